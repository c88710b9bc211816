-- Named queues, global concurrency limits and paused queues.
--
-- A job belongs to a queue (its definition's, `default` unless set); a worker serves the queues
-- it is given. A queue or a job type may carry a global concurrency limit: at most that many of
-- its jobs are leased at once across all workers. Jobs under such a limit are flagged `gated`
-- when they enter the queue and are claimed by a separate statement that runs under one
-- transaction-scoped advisory lock and counts the leased jobs afresh; every other job is
-- claimed as before, through a claim index that gated jobs never enter, so the limits cost the
-- default claim nothing but a primary-key lookup of each picked job's queue among the paused
-- ones.

ALTER TABLE runledger.job_definitions
    ADD COLUMN queue text NOT NULL DEFAULT 'default',
    ADD COLUMN global_concurrency integer,
    ADD CONSTRAINT job_definitions_queue_valid CHECK (runledger.is_valid_identifier(queue)),
    ADD CONSTRAINT job_definitions_global_concurrency_positive
        CHECK (global_concurrency IS NULL OR global_concurrency > 0);

-- Per-queue settings an operator changes at run time. A queue without a row is open and has
-- no global limit.
CREATE TABLE runledger.job_queues (
    name               text        NOT NULL,
    is_paused          boolean     NOT NULL DEFAULT false,
    global_concurrency integer,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_queues_pkey PRIMARY KEY (name),
    CONSTRAINT job_queues_name_valid CHECK (runledger.is_valid_identifier(name)),
    CONSTRAINT job_queues_global_concurrency_positive
        CHECK (global_concurrency IS NULL OR global_concurrency > 0)
);

-- Adding columns with constant defaults does not rewrite the table.
ALTER TABLE runledger.job_queue
    ADD COLUMN queue text NOT NULL DEFAULT 'default',
    ADD COLUMN gated boolean NOT NULL DEFAULT false;

-- The default claim reads only ungated jobs; the gated claim has its own index.
DROP INDEX runledger.job_queue_claim_idx;
CREATE INDEX job_queue_claim_idx
    ON runledger.job_queue (priority DESC, next_run_at, id) WHERE status = 'PENDING' AND NOT gated;
CREATE INDEX job_queue_gated_claim_idx
    ON runledger.job_queue (priority DESC, next_run_at, id) WHERE status = 'PENDING' AND gated;

-- Whether a job in `p_queue` is under a global limit, its type's limit being given.
CREATE FUNCTION runledger.job_gated(p_type_limited boolean, p_queue text) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_type_limited OR EXISTS (
        SELECT 1 FROM runledger.job_queues
        WHERE name = p_queue AND global_concurrency IS NOT NULL
    )
$$;

-- Whether jobs of `p_job_type` in `p_queue` are under a global limit. Read when a job enters
-- the queue.
CREATE FUNCTION runledger.job_is_limited(p_job_type text, p_queue text) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT runledger.job_gated(EXISTS (
        SELECT 1 FROM runledger.job_definitions
        WHERE job_type = p_job_type AND global_concurrency IS NOT NULL
    ), p_queue)
$$;

-- After a limit changed: re-flags the pending jobs of a queue or of some job types.
CREATE FUNCTION runledger.refresh_job_gates(p_queue text, p_job_types text[]) RETURNS void
LANGUAGE sql
AS $$
    UPDATE runledger.job_queue q
    SET gated = runledger.job_is_limited(q.job_type, q.queue)
    WHERE q.status = 'PENDING'
      AND (q.queue = p_queue OR q.job_type = ANY(p_job_types))
      AND q.gated IS DISTINCT FROM runledger.job_is_limited(q.job_type, q.queue)
$$;

-- Released workflow steps enter their definition's queue, flagged as any other job.
CREATE OR REPLACE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH released AS (
        SELECT s.id AS step_id, runledger.uuidv7() AS job_id
        FROM runledger.workflow_steps s
        WHERE s.id = ANY(p_steps) AND s.status = 'BLOCKED' AND s.step_kind = 'JOB'
    ),
    jobs AS (
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            workflow_run_id, workflow_step_id, workflow_step_key, queue, gated
        )
        SELECT r.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key, d.queue, runledger.job_is_limited(d.job_type, d.queue)
        FROM released r
        JOIN runledger.workflow_steps s ON s.id = r.step_id
        JOIN runledger.workflow_runs w ON w.id = s.workflow_run_id
        JOIN runledger.job_definitions d ON d.job_type = s.job_type
        RETURNING id, workflow_step_id
    )
    UPDATE runledger.workflow_steps s
    SET status = 'ENQUEUED', job_id = jobs.id, updated_at = now()
    FROM jobs
    WHERE s.id = jobs.workflow_step_id;

    UPDATE runledger.workflow_steps
    SET status = 'WAITING_FOR_EXTERNAL', updated_at = now()
    WHERE id = ANY(p_steps) AND status = 'BLOCKED' AND step_kind = 'EXTERNAL';
END;
$$;
