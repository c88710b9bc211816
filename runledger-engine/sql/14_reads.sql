-- Helpers of the read paths (job and workflow reads, the operator tools): values derived from
-- a row where it is read, and what reads return instead of a document a worker cannot decode.

-- A job's stage: a finer view of its status that tells a job waiting for its first attempt from
-- one waiting for a retry, and a leased job whose handler has not started yet from one whose
-- handler runs. Derived where it is read from the row alone, so it cannot disagree with the
-- status and costs the writes of a job row nothing. Read by `postgres::jobs::reads`.
CREATE FUNCTION runledger.job_stage(
    p_status text, p_attempt integer, p_attempt_floor integer, p_started_at timestamptz
) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE p_status
        WHEN 'PENDING' THEN CASE WHEN p_attempt > p_attempt_floor THEN 'RETRY_SCHEDULED'
                                 ELSE 'QUEUED' END
        WHEN 'LEASED' THEN CASE WHEN p_started_at IS NULL THEN 'LEASED' ELSE 'RUNNING' END
        WHEN 'SUCCEEDED' THEN 'COMPLETED'
        WHEN 'DEAD_LETTERED' THEN 'DEAD_LETTERED'
        ELSE 'CANCELED'
    END
$$;

-- A step's status as reads show it: ENQUEUED while its job waits, RUNNING while its job is
-- leased, the stored status otherwise. The stored status stays ENQUEUED while the job runs, so
-- that claims and retries of step jobs write no step row. Read by
-- `postgres::jobs::workflows::list_workflow_steps`.
CREATE FUNCTION runledger.workflow_step_status(p_status text, p_job_id uuid) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_status = 'ENQUEUED' AND EXISTS (
            SELECT 1 FROM runledger.job_queue j WHERE j.id = p_job_id AND j.status = 'LEASED'
        ) THEN 'RUNNING'
        ELSE p_status
    END
$$;

-- Every ended attempt of a job in one list: the rows of `job_attempts` (failures, continued
-- runs, cancellations, expired leases), and a succeeded job's last attempt, read from the job
-- row that records it (worker, attempt, lease, start and finish). A succeeded attempt that also
-- has a stored row is listed once. Read by `postgres::jobs::reads::list_job_attempts`.
CREATE VIEW runledger.job_attempt_history AS
SELECT job_id, attempt, worker_id, outcome, failure_kind, error_code, error_message, leased_at,
       started_at, finished_at
FROM runledger.job_attempts
UNION ALL
SELECT q.id, q.attempt, q.worker_id, 'SUCCEEDED', NULL, NULL, NULL, q.leased_at, q.started_at,
       q.finished_at
FROM runledger.job_queue q
WHERE q.status = 'SUCCEEDED' AND q.worker_id IS NOT NULL AND q.leased_at IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM runledger.job_attempts a WHERE a.job_id = q.id AND a.attempt = q.attempt
  );

-- Whether a JSON document nests arrays and objects deeper than the 127 levels serde_json (and
-- so the Rust side) decodes: a container at level 127 (the root is level 0) means 128 levels.
-- Inlined by the planner; it walks the document once.
CREATE FUNCTION runledger.json_too_deep(value jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT jsonb_path_exists(
        value, 'strict $.**{127} ? (@.type() == "object" || @.type() == "array")'
    )
$$;

-- `value` as reads return it: a stored document a worker could not decode is replaced by a
-- small object naming the problem (`unreadable`: the code, and a message), so one such row
-- never fails a whole page. Two problems: nesting deeper than 127 levels (reported with
-- `code`), and a number outside the range of a 64-bit float, which PostgreSQL stores exactly
-- and serde_json refuses (payload reads, whose code is `job.payload_too_deep`, report it as
-- `job.payload_unreadable`). Read by the job, log, intent and workflow reads of
-- `postgres::jobs`.
CREATE FUNCTION runledger.readable_json(value jsonb, code text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN runledger.json_too_deep(value) THEN jsonb_build_object(
            'unreadable', code,
            'message', 'the stored JSON nests deeper than 127 levels; read the column with SQL'
        )
        WHEN jsonb_path_exists(
            value, 'strict $.** ? (@.type() == "number" && @.abs() > 1.7976931348623157e308)'
        ) THEN jsonb_build_object(
            'unreadable', CASE code WHEN 'job.payload_too_deep' THEN 'job.payload_unreadable' ELSE code END,
            'message', 'the stored JSON holds a number outside the range of a 64-bit float; read the column with SQL'
        )
        ELSE value
    END
$$;
