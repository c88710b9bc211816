-- Tables, their named constraints and their indexes.
--
-- Every state transition is a single guarded `UPDATE ... WHERE status = ...`; the CHECK
-- constraints below name the rules a row must keep whatever writes it (error messages and
-- tests refer to them by name). The workflow tables and the tables that name a job carry no
-- foreign keys to the job and run tables: their rows are written only by Runledger's own
-- statements, for the job or run they name, so the keys are right by construction, and each
-- key check cost a lookup and a KEY SHARE lock on the hot path. What the keys did on delete is
-- done by the statement triggers of 12_retention.sql.
--
-- A status change of a job row is never a heap-only update (status is in the predicates of
-- the partial indexes), so every index of `job_queue` takes an entry at each transition: the
-- table keeps only indexes that a hot-path statement or a bounded operator read needs, and the
-- operator indexes are partial, entered once, when a job finishes or fails.

------------------------------------------------------------------------------------------------
-- Job definitions: one row per job type; enqueue requires an enabled row. Definitions are
-- never deleted.
------------------------------------------------------------------------------------------------
CREATE TABLE runledger.job_definitions (
    job_type            text        NOT NULL,
    version             integer     NOT NULL DEFAULT 1,
    max_attempts        integer     NOT NULL DEFAULT 5,
    timeout_seconds     integer     NOT NULL DEFAULT 300,
    priority            integer     NOT NULL DEFAULT 0,
    retry_base_delay_ms bigint      NOT NULL DEFAULT 1000,
    retry_max_delay_ms  bigint      NOT NULL DEFAULT 3600000,
    is_enabled          boolean     NOT NULL DEFAULT true,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    -- The type's own retention after any finished status; NULL: the pruner's defaults.
    retention_seconds   integer,
    -- The queue the type's jobs enter (`default` unless set).
    queue               text        NOT NULL DEFAULT 'default',
    -- At most this many jobs of the type leased at once across all workers; NULL: no limit.
    global_concurrency  integer,
    CONSTRAINT job_definitions_pkey PRIMARY KEY (job_type),
    CONSTRAINT job_definitions_job_type_valid CHECK (runledger.is_valid_identifier(job_type)),
    CONSTRAINT job_definitions_version_positive CHECK (version > 0),
    CONSTRAINT job_definitions_max_attempts_positive CHECK (max_attempts > 0),
    CONSTRAINT job_definitions_timeout_positive CHECK (timeout_seconds > 0),
    CONSTRAINT job_definitions_retry_base_positive CHECK (retry_base_delay_ms > 0),
    CONSTRAINT job_definitions_retry_cap_not_below_base CHECK (retry_max_delay_ms >= retry_base_delay_ms),
    CONSTRAINT job_definitions_retention_positive CHECK (retention_seconds IS NULL OR retention_seconds > 0),
    CONSTRAINT job_definitions_queue_valid CHECK (runledger.is_valid_identifier(queue)),
    CONSTRAINT job_definitions_global_concurrency_positive
        CHECK (global_concurrency IS NULL OR global_concurrency > 0)
);

------------------------------------------------------------------------------------------------
-- Per-queue settings an operator changes at run time. A queue without a row is open and has no
-- global limit.
------------------------------------------------------------------------------------------------
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

------------------------------------------------------------------------------------------------
-- The queue: one row per job, from its enqueue to its end. The attempt in progress is described
-- by the row itself (worker_id, attempt, leased_at, started_at, lease_expires_at), and a
-- succeeded job's row is the record of its last attempt (`job_attempt_history`).
------------------------------------------------------------------------------------------------
CREATE TABLE runledger.job_queue (
    id                  uuid        NOT NULL DEFAULT runledger.uuidv7(),
    job_type            text        NOT NULL,
    organization_id     uuid,
    status              text        NOT NULL DEFAULT 'PENDING',
    payload             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    priority            integer     NOT NULL DEFAULT 0,
    -- Number of attempts started so far; also the fencing token of the current lease.
    attempt             integer     NOT NULL DEFAULT 0,
    -- Value of `attempt` when the job last started a run with a fresh attempt budget (a
    -- requeue, a continuation): attempts used = attempt - attempt_floor.
    attempt_floor       integer     NOT NULL DEFAULT 0,
    max_attempts        integer     NOT NULL,
    timeout_seconds     integer     NOT NULL,
    next_run_at         timestamptz NOT NULL DEFAULT now(),
    -- The worker holding the lease; kept when the job succeeds, as the record of who ran it.
    worker_id           text,
    lease_expires_at    timestamptz,
    -- When the current attempt was leased, and when its handler reported it started.
    leased_at           timestamptz,
    started_at          timestamptz,
    idempotency_key     text,
    -- The canonical request of a keyed enqueue, compared when the key is used again.
    enqueue_request     jsonb,
    progress            jsonb,
    output              jsonb,
    last_error_code     text,
    last_error_message  text,
    workflow_run_id     uuid,
    workflow_step_id    uuid,
    created_by_user_id  uuid,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    -- A step job's step key, so that a claim hands it to the handler without a join.
    workflow_step_key   text,
    -- Starts at 1 and grows by one each time the job starts a new run with a fresh attempt
    -- budget (a requeue, a continuation). Compare-and-requeue compares the caller's observed
    -- status and run number with the row's, so a stale operator view never requeues twice.
    run_number          integer     NOT NULL DEFAULT 1,
    -- The last checkpoint a continued attempt committed; handed to the next run's handler.
    checkpoint          jsonb,
    queue               text        NOT NULL DEFAULT 'default',
    -- Under a global concurrency limit (of its queue or type) or holding a resource key: claimed
    -- by the limited claim only, never through `job_queue_claim_idx`.
    gated               boolean     NOT NULL DEFAULT false,
    -- At most one job holding a given key is leased at a time across all workers. The key is
    -- held by the row's LEASED status itself, so whatever ends the lease frees it.
    resource_key        text,
    -- The trace context of the span that enqueued the job (propagation fields as a JSON object
    -- of strings); NULL when no propagator is installed or no span was active.
    trace_context       jsonb,
    -- A unique key, held per organization and job type: by a singleton or a debounced job while
    -- it is in the states `unique_while` names (QUEUED: pending and never started; ACTIVE:
    -- pending or leased), by a throttled job (WINDOW) until `unique_until`. NULL for every
    -- other job.
    unique_key          text,
    unique_while        text,
    unique_until        timestamptz,
    CONSTRAINT job_queue_pkey PRIMARY KEY (id),
    CONSTRAINT job_queue_status_valid CHECK (
        status IN ('PENDING', 'LEASED', 'SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
    ),
    CONSTRAINT job_queue_attempts_valid CHECK (
        max_attempts > 0 AND attempt >= 0 AND attempt_floor >= 0 AND attempt_floor <= attempt
    ),
    CONSTRAINT job_queue_timeout_positive CHECK (timeout_seconds > 0),
    CONSTRAINT job_queue_lease_matches_status CHECK (
        (status = 'LEASED') = (worker_id IS NOT NULL AND lease_expires_at IS NOT NULL AND leased_at IS NOT NULL)
    ),
    CONSTRAINT job_queue_finished_when_terminal CHECK (
        (status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')) = (finished_at IS NOT NULL)
    ),
    CONSTRAINT job_queue_output_only_when_succeeded CHECK (output IS NULL OR status = 'SUCCEEDED'),
    CONSTRAINT job_queue_idempotency_key_not_blank CHECK (idempotency_key IS NULL OR btrim(idempotency_key) <> ''),
    CONSTRAINT job_queue_keyed_request_snapshot CHECK (idempotency_key IS NULL OR enqueue_request IS NOT NULL),
    CONSTRAINT job_queue_workflow_step_has_run CHECK (workflow_step_id IS NULL OR workflow_run_id IS NOT NULL),
    CONSTRAINT job_queue_run_number_positive CHECK (run_number > 0),
    -- The rule of runledger.is_valid_identifier, written out (see 02_identifiers.sql).
    CONSTRAINT job_queue_resource_key_valid CHECK (
        resource_key IS NULL OR (btrim(resource_key) <> '' AND char_length(resource_key) <= 255)
    ),
    CONSTRAINT job_queue_unique_key_valid CHECK (
        (unique_key IS NULL) = (unique_while IS NULL)
        AND (unique_while IS NULL OR unique_while IN ('QUEUED', 'ACTIVE', 'WINDOW'))
        AND (coalesce(unique_while, '') = 'WINDOW') = (unique_until IS NOT NULL)
        AND (unique_key IS NULL OR (btrim(unique_key) <> '' AND char_length(unique_key) <= 255))
    )
);

-- The claim index: only claimable rows, in claim order. Gated jobs never enter it, so global
-- limits and resource keys cost the default claim nothing.
CREATE INDEX job_queue_claim_idx
    ON runledger.job_queue (priority DESC, next_run_at, id) WHERE status = 'PENDING' AND NOT gated;
-- The limited claim's index: pending gated jobs, in claim order.
CREATE INDEX job_queue_gated_claim_idx
    ON runledger.job_queue (priority DESC, next_run_at, id) WHERE status = 'PENDING' AND gated;
-- The reaper index: only leased rows, by lease expiry.
CREATE INDEX job_queue_lease_expiry_idx
    ON runledger.job_queue (lease_expires_at) WHERE status = 'LEASED';
-- The holders of resource keys: at most one leased job per key. The limited claim reads it to
-- skip busy keys.
CREATE UNIQUE INDEX job_queue_resource_holder_idx
    ON runledger.job_queue (resource_key) WHERE status = 'LEASED' AND resource_key IS NOT NULL;
-- Idempotency keys belong to one organization (or to jobs without one) and one job type: a key
-- used by one tenant never collides with, or reveals, another tenant's job.
CREATE UNIQUE INDEX job_queue_idempotency_key_key
    ON runledger.job_queue (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        idempotency_key
    )
    WHERE idempotency_key IS NOT NULL;
-- Singletons: the holder of a unique key, per organization and job type, while the job is in
-- the states its `unique_while` names. Jobs without a key are outside both indexes.
CREATE UNIQUE INDEX job_queue_unique_queued_key
    ON runledger.job_queue (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        unique_key
    )
    WHERE unique_while = 'QUEUED' AND status = 'PENDING' AND attempt = 0;
CREATE UNIQUE INDEX job_queue_unique_active_key
    ON runledger.job_queue (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        unique_key
    )
    WHERE unique_while = 'ACTIVE' AND status IN ('PENDING', 'LEASED');
-- Throttled jobs by key and the end of their window: "the job of this key enqueued less than a
-- window ago" cannot be a unique index (it depends on the time), so an enqueue looks it up here
-- under a lock of the key.
CREATE INDEX job_queue_unique_window_idx
    ON runledger.job_queue (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        unique_key,
        unique_until
    )
    WHERE unique_while = 'WINDOW';
-- Successes by finish time, for "succeeded in the last 24 h" and duration percentiles. A
-- success appends one entry at the index's right edge.
CREATE INDEX job_queue_succeeded_recent_idx
    ON runledger.job_queue (finished_at)
    INCLUDE (job_type, leased_at, started_at)
    WHERE status = 'SUCCEEDED';
-- Organization-scoped job lists; jobs without an organization cost nothing.
CREATE INDEX job_queue_organization_idx
    ON runledger.job_queue (organization_id, id)
    WHERE organization_id IS NOT NULL;
-- Search by failure code; only failed jobs carry one.
CREATE INDEX job_queue_last_error_code_idx
    ON runledger.job_queue (last_error_code, id)
    WHERE last_error_code IS NOT NULL;
-- Finished jobs by type, oldest or newest first: the queue screen's type filter and the
-- pruner's per-type scan below a cutoff id.
CREATE INDEX job_queue_finished_type_idx
    ON runledger.job_queue (job_type, id)
    WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED');
-- Failed jobs by status, newest first (successes are the bulk of the history and are read
-- through the primary key).
CREATE INDEX job_queue_failed_idx
    ON runledger.job_queue (status, id) WHERE status IN ('DEAD_LETTERED', 'CANCELED');

------------------------------------------------------------------------------------------------
-- Attempt history, events, dead letters, logs. Each names its job without a foreign key: the
-- job's deletion takes them with it (`job_queue_delete_rows`, 12_retention.sql).
------------------------------------------------------------------------------------------------
-- One row per attempt that did not end its job with a success (failures, continued runs,
-- cancellations, expired leases), written when the attempt ends.
CREATE TABLE runledger.job_attempts (
    job_id        uuid        NOT NULL,
    attempt       integer     NOT NULL,
    worker_id     text        NOT NULL,
    outcome       text        NOT NULL,
    failure_kind  text,
    error_code    text,
    error_message text,
    leased_at     timestamptz NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_attempts_pkey PRIMARY KEY (job_id, attempt),
    CONSTRAINT job_attempts_attempt_positive CHECK (attempt > 0),
    CONSTRAINT job_attempts_outcome_valid CHECK (outcome IN ('SUCCEEDED', 'FAILED', 'CANCELED')),
    CONSTRAINT job_attempts_failure_kind_valid CHECK (
        failure_kind IS NULL OR failure_kind IN ('RETRYABLE', 'TERMINAL', 'PANICKED', 'TIMEOUT', 'LEASE_EXPIRED')
    ),
    CONSTRAINT job_attempts_failure_kind_matches_outcome CHECK ((outcome = 'FAILED') = (failure_kind IS NOT NULL))
);

-- Panics of the last 24 hours, for the metrics.
CREATE INDEX job_attempts_panicked_recent_idx
    ON runledger.job_attempts (finished_at)
    WHERE failure_kind = 'PANICKED';

-- Meaningful events only (retry scheduled, dead-lettered, canceled, requeued, lease expired,
-- continued): routine transitions are told by the job and attempt rows.
CREATE TABLE runledger.job_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    job_id      uuid        NOT NULL,
    event_type  text        NOT NULL,
    attempt     integer,
    worker_id   text,
    details     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_events_pkey PRIMARY KEY (id),
    CONSTRAINT job_events_type_valid CHECK (
        event_type IN (
            'RETRY_SCHEDULED', 'DEAD_LETTERED', 'CANCELED', 'REQUEUED', 'LEASE_EXPIRED', 'CONTINUED'
        )
    )
);

CREATE INDEX job_events_job_idx ON runledger.job_events (job_id, id);
-- Continuations of the last 24 hours, for the metrics; only continuation events enter it.
CREATE INDEX job_events_continued_recent_idx
    ON runledger.job_events (created_at)
    WHERE event_type = 'CONTINUED';

CREATE TABLE runledger.job_dead_letters (
    id               bigint      GENERATED ALWAYS AS IDENTITY,
    job_id           uuid        NOT NULL,
    job_type         text        NOT NULL,
    organization_id  uuid,
    payload          jsonb       NOT NULL,
    attempt          integer     NOT NULL,
    failure_kind     text        NOT NULL,
    error_code       text,
    error_message    text,
    dead_lettered_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_dead_letters_pkey PRIMARY KEY (id),
    CONSTRAINT job_dead_letters_failure_kind_valid CHECK (
        failure_kind IN ('RETRYABLE', 'TERMINAL', 'PANICKED', 'TIMEOUT', 'LEASE_EXPIRED')
    )
);

CREATE INDEX job_dead_letters_job_idx ON runledger.job_dead_letters (job_id);
-- Dead letters by time, for "dead-lettered in the last 24 h".
CREATE INDEX job_dead_letters_recent_idx
    ON runledger.job_dead_letters (dead_lettered_at)
    INCLUDE (job_type, organization_id);

CREATE TABLE runledger.job_logs (
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    job_id     uuid        NOT NULL,
    attempt    integer,
    level      text        NOT NULL DEFAULT 'INFO',
    message    text        NOT NULL,
    fields     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_logs_pkey PRIMARY KEY (id),
    CONSTRAINT job_logs_level_valid CHECK (level IN ('TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR'))
);

CREATE INDEX job_logs_job_idx ON runledger.job_logs (job_id, id);

------------------------------------------------------------------------------------------------
-- Lineage of replays: a succeeded direct job replayed as a new job. The replay key makes a
-- replay idempotent (scoped to the organization of the source job); the reason is part of the
-- request, so a reused key with another reason or another source job is refused.
------------------------------------------------------------------------------------------------
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

------------------------------------------------------------------------------------------------
-- Durable enqueue intents: an outbox. A caller records the wish to enqueue a job inside its own
-- transaction, without the job's definition having to exist yet; the intent promoter of every
-- worker that runs the job type turns pending intents into jobs. The idempotency key is
-- mandatory and scoped like the queue's (organization, job type), so the job an intent becomes
-- carries the same key and the same request snapshot as a direct keyed enqueue would.
------------------------------------------------------------------------------------------------
CREATE TABLE runledger.job_enqueue_intents (
    id                 uuid        NOT NULL DEFAULT runledger.uuidv7(),
    job_type           text        NOT NULL,
    organization_id    uuid,
    idempotency_key    text        NOT NULL,
    payload            jsonb       NOT NULL,
    priority           integer,
    max_attempts       integer,
    timeout_seconds    integer,
    run_at             timestamptz,
    delay_ms           bigint,
    created_by_user_id uuid,
    -- The canonical request, compared on a retry of the same key (same shape as the queue's).
    enqueue_request    jsonb       NOT NULL,
    status             text        NOT NULL DEFAULT 'PENDING',
    job_id             uuid,
    -- Promotion tries that failed and were deferred.
    attempts           integer     NOT NULL DEFAULT 0,
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    last_error_code    text,
    last_error_message text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    resource_key       text,
    CONSTRAINT job_enqueue_intents_pkey PRIMARY KEY (id),
    CONSTRAINT job_enqueue_intents_job_type_valid CHECK (runledger.is_valid_identifier(job_type)),
    CONSTRAINT job_enqueue_intents_key_not_blank CHECK (btrim(idempotency_key) <> ''),
    CONSTRAINT job_enqueue_intents_status_valid CHECK (status IN ('PENDING', 'PROMOTED', 'CONFLICTED')),
    CONSTRAINT job_enqueue_intents_attempts_valid CHECK (attempts >= 0),
    CONSTRAINT job_enqueue_intents_promoted_has_job CHECK ((status = 'PROMOTED') = (job_id IS NOT NULL)),
    CONSTRAINT job_enqueue_intents_finished_when_terminal CHECK (
        (status IN ('PROMOTED', 'CONFLICTED')) = (finished_at IS NOT NULL)
    ),
    CONSTRAINT job_enqueue_intents_resource_key_valid
        CHECK (resource_key IS NULL OR runledger.is_valid_identifier(resource_key))
);

CREATE UNIQUE INDEX job_enqueue_intents_idempotency_key_key
    ON runledger.job_enqueue_intents (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        idempotency_key
    );
-- The promoter's index: only pending intents, per job type, in the order they become due. A
-- pass reads only the types its worker runs, however many intents other types have waiting.
CREATE INDEX job_enqueue_intents_pending_idx
    ON runledger.job_enqueue_intents (job_type, next_attempt_at)
    WHERE status = 'PENDING';
-- Finished intents by finish time, for "promoted / conflicted in the last 24 h".
CREATE INDEX job_enqueue_intents_finished_idx
    ON runledger.job_enqueue_intents (finished_at)
    INCLUDE (job_type, organization_id, status)
    WHERE status <> 'PENDING';

------------------------------------------------------------------------------------------------
-- Schedules and runtime configuration.
------------------------------------------------------------------------------------------------
CREATE TABLE runledger.job_schedules (
    id                 uuid        NOT NULL DEFAULT runledger.uuidv7(),
    name               text        NOT NULL,
    job_type           text        NOT NULL,
    cron_expr          text        NOT NULL,
    payload_template   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    is_active          boolean     NOT NULL DEFAULT true,
    organization_id    uuid,
    max_jitter_seconds integer     NOT NULL DEFAULT 0,
    -- The nominal time of the next fire, on the cron grid (a failed fire keeps it).
    next_fire_at       timestamptz NOT NULL DEFAULT now(),
    last_fired_at      timestamptz,
    last_error_code    text,
    last_error_message text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- The IANA time zone the cron expression is evaluated in; the engine validates names
    -- against the IANA database before it writes them.
    time_zone          text        NOT NULL DEFAULT 'UTC',
    -- When the scheduler tries a failed fire again; NULL when the current fire has not failed.
    retry_at           timestamptz,
    CONSTRAINT job_schedules_pkey PRIMARY KEY (id),
    CONSTRAINT job_schedules_name_key UNIQUE (name),
    CONSTRAINT job_schedules_definition_fkey FOREIGN KEY (job_type)
        REFERENCES runledger.job_definitions (job_type),
    CONSTRAINT job_schedules_name_valid CHECK (runledger.is_valid_identifier(name)),
    CONSTRAINT job_schedules_cron_not_blank CHECK (btrim(cron_expr) <> ''),
    CONSTRAINT job_schedules_jitter_valid CHECK (max_jitter_seconds >= 0),
    CONSTRAINT job_schedules_time_zone_not_blank CHECK (btrim(time_zone) <> '')
);

CREATE INDEX job_schedules_due_idx ON runledger.job_schedules (next_fire_at) WHERE is_active;

CREATE TABLE runledger.job_runtime_configs (
    config_key  text        NOT NULL,
    config      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_runtime_configs_pkey PRIMARY KEY (config_key),
    CONSTRAINT job_runtime_configs_key_valid CHECK (runledger.is_valid_identifier(config_key))
);

------------------------------------------------------------------------------------------------
-- Workflow runs, steps and edges (driven by the functions of 09_workflow_release.sql).
------------------------------------------------------------------------------------------------
CREATE TABLE runledger.workflow_runs (
    id                 uuid        NOT NULL DEFAULT runledger.uuidv7(),
    workflow_type      text        NOT NULL,
    organization_id    uuid,
    status             text        NOT NULL DEFAULT 'RUNNING',
    metadata           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    idempotency_key    text,
    enqueue_request    jsonb,
    result_step_key    text,
    result             jsonb,
    status_reason      text,
    created_by_user_id uuid,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    -- The trace context of the span that enqueued the run, copied to each released step job.
    trace_context      jsonb,
    active_steps       integer     NOT NULL DEFAULT 0,
    -- Its step jobs are due from the run's creation (not their release), so claims take an
    -- older run's steps first.
    run_first          boolean     NOT NULL DEFAULT false,
    CONSTRAINT workflow_runs_pkey PRIMARY KEY (id),
    CONSTRAINT workflow_runs_workflow_type_valid CHECK (runledger.is_valid_identifier(workflow_type)),
    CONSTRAINT workflow_runs_status_valid CHECK (
        status IN ('RUNNING', 'WAITING_FOR_EXTERNAL', 'SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
    ),
    CONSTRAINT workflow_runs_idempotency_key_not_blank CHECK (idempotency_key IS NULL OR btrim(idempotency_key) <> ''),
    CONSTRAINT workflow_runs_keyed_request_snapshot CHECK (idempotency_key IS NULL OR enqueue_request IS NOT NULL),
    CONSTRAINT workflow_runs_finished_when_terminal CHECK (
        (status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')) = (finished_at IS NOT NULL)
    )
);

COMMENT ON COLUMN runledger.workflow_runs.active_steps IS
    'Steps of the run that are ENQUEUED or RUNNING, while the run is not canceled.';

-- Scoped like the queue's keys: organization and workflow type.
CREATE UNIQUE INDEX workflow_runs_idempotency_key_key
    ON runledger.workflow_runs (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        workflow_type,
        idempotency_key
    )
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX workflow_runs_organization_idx ON runledger.workflow_runs (organization_id, id);
CREATE INDEX workflow_runs_status_idx ON runledger.workflow_runs (status, id);
-- Workflow runs by type (type filter and counts).
CREATE INDEX workflow_runs_type_idx ON runledger.workflow_runs (workflow_type, id);

-- A step's id is also its job's id: a step is released once and has one job in its life, and
-- `job_id` stays NULL until the release. A step's stored status stays ENQUEUED while its job
-- runs; reads show RUNNING from the job (runledger.workflow_step_status), so claims and retries
-- of step jobs write no step row.
--
-- A FAN_OUT step runs no job: the step that fills it (one of its prerequisites) adds its
-- children, `{key}/0` to `{key}/{n - 1}`, as its prerequisites and records their number in its
-- payload (`{"children": n}`); once they and its other prerequisites have finished, the release
-- finishes it at once (runledger.workflow_close_fan_outs, 09_workflow_release.sql).
--
-- A step row is written three times after its insert: released, finished, and for a fan-in
-- step its counters at each prerequisite's end. None of those updates changes an indexed column
-- (no index reads `job_id`: a job names its step), so each can be a heap-only update that
-- writes no index entry, if the new version fits on the row's page. At fillfactor 30 a page
-- keeps room for two more versions of each row, so both updates stay on the page whether or
-- not old versions can be pruned meanwhile (a long transaction holds the horizon back).
CREATE TABLE runledger.workflow_steps (
    id                   uuid        NOT NULL DEFAULT runledger.uuidv7(),
    workflow_run_id      uuid        NOT NULL,
    step_key             text        NOT NULL,
    step_kind            text        NOT NULL DEFAULT 'JOB',
    job_type             text,
    payload              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    priority             integer,
    max_attempts         integer,
    timeout_seconds      integer,
    stage                text,
    organization_id      uuid,
    metadata             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status               text        NOT NULL DEFAULT 'BLOCKED',
    job_id               uuid,
    -- Prerequisites in all, not finished yet, and finished without satisfying their edge.
    deps_total           integer     NOT NULL DEFAULT 0,
    deps_pending         integer     NOT NULL DEFAULT 0,
    deps_unsatisfied     integer     NOT NULL DEFAULT 0,
    output               jsonb,
    status_reason        text,
    last_error_code      text,
    last_error_message   text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    -- Whether the step's job may end an attempt by continuing (a step opts in).
    continuation_allowed boolean     NOT NULL DEFAULT false,
    resource_key         text,
    CONSTRAINT workflow_steps_pkey PRIMARY KEY (id),
    CONSTRAINT workflow_steps_run_step_key_key UNIQUE (workflow_run_id, step_key),
    CONSTRAINT workflow_steps_step_key_valid CHECK (runledger.is_valid_identifier(step_key)),
    CONSTRAINT workflow_steps_kind_valid CHECK (step_kind IN ('JOB', 'EXTERNAL', 'FAN_OUT')),
    CONSTRAINT workflow_steps_job_type_matches_kind CHECK (
        (step_kind = 'JOB' AND runledger.is_valid_identifier(job_type))
        OR (step_kind IN ('EXTERNAL', 'FAN_OUT') AND job_type IS NULL)
    ),
    CONSTRAINT workflow_steps_status_valid CHECK (
        status IN ('BLOCKED', 'WAITING_FOR_EXTERNAL', 'ENQUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELED')
    ),
    CONSTRAINT workflow_steps_max_attempts_positive CHECK (max_attempts IS NULL OR max_attempts > 0),
    CONSTRAINT workflow_steps_timeout_positive CHECK (timeout_seconds IS NULL OR timeout_seconds > 0),
    CONSTRAINT workflow_steps_dependency_counters_valid CHECK (
        deps_total >= 0 AND deps_pending >= 0 AND deps_unsatisfied >= 0
        AND deps_pending <= deps_total AND deps_unsatisfied <= deps_total
    ),
    CONSTRAINT workflow_steps_output_only_when_succeeded CHECK (output IS NULL OR status = 'SUCCEEDED'),
    CONSTRAINT workflow_steps_resource_key_valid
        CHECK (resource_key IS NULL OR runledger.is_valid_identifier(resource_key))
)
WITH (fillfactor = 30);

-- The edges of a run's DAG. Every edge joins two steps of one run. The primary key leads with
-- the prerequisite, which is how the release reads them (the dependents of the steps that just
-- finished); reads that start from a step's prerequisites start from the run's steps instead.
CREATE TABLE runledger.workflow_step_dependencies (
    workflow_run_id     uuid        NOT NULL,
    step_id             uuid        NOT NULL,
    depends_on_step_id  uuid        NOT NULL,
    condition           text        NOT NULL DEFAULT 'SUCCESS',
    created_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workflow_step_dependencies_pkey PRIMARY KEY (depends_on_step_id, step_id),
    CONSTRAINT workflow_step_dependencies_condition_valid CHECK (condition IN ('SUCCESS', 'TERMINAL')),
    CONSTRAINT workflow_step_dependencies_not_self CHECK (step_id <> depends_on_step_id)
);

-- Steps appended to a running run, keyed so that a retried append is recognised.
CREATE TABLE runledger.workflow_run_mutations (
    id              uuid        NOT NULL DEFAULT runledger.uuidv7(),
    workflow_run_id uuid        NOT NULL,
    mutation_key    text        NOT NULL,
    mutation_type   text        NOT NULL,
    request         jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workflow_run_mutations_pkey PRIMARY KEY (id),
    CONSTRAINT workflow_run_mutations_run_fkey FOREIGN KEY (workflow_run_id)
        REFERENCES runledger.workflow_runs (id) ON DELETE CASCADE,
    CONSTRAINT workflow_run_mutations_run_key_key UNIQUE (workflow_run_id, mutation_key),
    CONSTRAINT workflow_run_mutations_key_valid CHECK (runledger.is_valid_identifier(mutation_key)),
    CONSTRAINT workflow_run_mutations_type_valid CHECK (mutation_type IN ('APPEND_STEPS', 'FILL_FAN_OUT'))
);

------------------------------------------------------------------------------------------------
-- The last queue depth count, shared by every worker process of the database (one row; see
-- runledger.sample_queue_depths in 13_metrics.sql).
------------------------------------------------------------------------------------------------
CREATE TABLE runledger.queue_depth_sample (
    singleton  boolean     NOT NULL DEFAULT true,
    sampled_at timestamptz NOT NULL,
    depths     jsonb       NOT NULL,
    CONSTRAINT queue_depth_sample_pkey PRIMARY KEY (singleton),
    CONSTRAINT queue_depth_sample_singleton_check CHECK (singleton)
);

------------------------------------------------------------------------------------------------
-- The worker processes alive now: each supervisor writes its row when it starts and again every
-- few seconds, with the job types it runs and the queues it serves, and deletes it when it
-- stops. A row not written for a while is a process that died; `explain_job` reads the rows to
-- say when no live worker serves a job.
------------------------------------------------------------------------------------------------
CREATE TABLE runledger.worker_presence (
    worker_id  text        NOT NULL,
    -- The job types its handlers run.
    job_types  text[]      NOT NULL,
    -- The queues it claims from; NULL: every queue.
    queues     text[],
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT worker_presence_pkey PRIMARY KEY (worker_id)
);
