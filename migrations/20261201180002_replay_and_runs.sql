-- Runs and replays of direct jobs.
--
-- A job's run number starts at 1 and grows by one each time the job starts a new run with a
-- fresh attempt budget (a requeue). Compare-and-requeue compares the caller's observed status
-- and run number with the row's, so a stale operator view never requeues a job twice.
ALTER TABLE runledger.job_queue
    ADD COLUMN run_number integer NOT NULL DEFAULT 1
    CONSTRAINT job_queue_run_number_positive CHECK (run_number > 0);

-- Lineage of replays: a succeeded direct job replayed as a new job. The replay key makes a
-- replay idempotent (scoped to the organization of the source job); the reason is part of the
-- request, so a reused key with another reason or another source job is refused.
CREATE TABLE runledger.job_replays (
    id                   uuid        NOT NULL DEFAULT runledger.uuidv7(),
    source_job_id        uuid        NOT NULL,
    replay_job_id        uuid        NOT NULL,
    organization_id      uuid,
    replay_key           text        NOT NULL,
    reason               text        NOT NULL,
    requested_by_user_id uuid,
    created_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_replays_pkey PRIMARY KEY (id),
    CONSTRAINT job_replays_source_fkey FOREIGN KEY (source_job_id)
        REFERENCES runledger.job_queue (id) ON DELETE CASCADE,
    CONSTRAINT job_replays_replay_fkey FOREIGN KEY (replay_job_id)
        REFERENCES runledger.job_queue (id) ON DELETE CASCADE,
    CONSTRAINT job_replays_replay_job_key UNIQUE (replay_job_id),
    CONSTRAINT job_replays_key_not_blank CHECK (btrim(replay_key) <> ''),
    CONSTRAINT job_replays_reason_not_blank CHECK (btrim(reason) <> ''),
    CONSTRAINT job_replays_not_self CHECK (source_job_id <> replay_job_id)
);

CREATE UNIQUE INDEX job_replays_replay_key_key
    ON runledger.job_replays (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        replay_key
    );
CREATE INDEX job_replays_source_idx ON runledger.job_replays (source_job_id);
