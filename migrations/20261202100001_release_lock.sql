-- The exclusive release lock of a workflow run. Cancelling a run holds it, exclusively, from the
-- moment it has locked the run's jobs until its transaction ends. Appending steps and
-- completing an external step try to take it shared, without waiting: while a cancellation
-- holds it they fail with workflow.release_conflict instead of queueing behind it. Completions
-- of step jobs do not take it: they lock their job rows first, so they already wait for an
-- in-flight cancellation of their run and then find their lease gone.
--
-- Lock order of every path that finishes step jobs: job rows (in id order), the release lock,
-- the run rows (in id order).

-- The advisory lock key of a run's release lock.
CREATE FUNCTION runledger.workflow_release_lock_key(p_run uuid) RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT hashtextextended('runledger.workflow_release:' || p_run::text, 0)
$$;

-- Takes the run's release lock shared for the rest of the transaction unless a cancellation
-- holds it; tells whether it was taken.
CREATE FUNCTION runledger.workflow_try_release_lock(p_run uuid) RETURNS boolean
LANGUAGE sql
AS $$
    SELECT pg_try_advisory_xact_lock_shared(runledger.workflow_release_lock_key(p_run))
$$;

-- Cancels a run: open steps and their pending or leased jobs end CANCELED; nothing is released
-- afterwards. The run's jobs are locked first, then its release lock (held exclusively until the
-- transaction ends), then the run.
-- Returns the run's status before the call, or NULL when the run does not exist.
CREATE OR REPLACE FUNCTION runledger.workflow_cancel_run(p_run uuid, p_reason text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous text;
BEGIN
    PERFORM 1
    FROM runledger.job_queue
    WHERE workflow_run_id = p_run AND status IN ('PENDING', 'LEASED')
    ORDER BY id
    FOR UPDATE;
    PERFORM pg_advisory_xact_lock(runledger.workflow_release_lock_key(p_run));
    SELECT status INTO v_previous FROM runledger.workflow_runs WHERE id = p_run FOR UPDATE;
    IF v_previous IS NULL OR v_previous IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED') THEN
        RETURN v_previous;
    END IF;

    UPDATE runledger.workflow_runs
    SET status = 'CANCELED', status_reason = p_reason, finished_at = now(), updated_at = now()
    WHERE id = p_run;

    UPDATE runledger.workflow_steps
    SET status = 'CANCELED', status_reason = 'workflow.run_canceled', finished_at = now(),
        updated_at = now()
    WHERE workflow_run_id = p_run AND status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED');

    WITH canceled AS (
        UPDATE runledger.job_queue q
        SET status = 'CANCELED', worker_id = NULL, lease_expires_at = NULL, finished_at = now(),
            updated_at = now()
        FROM (
            SELECT id, status AS previous_status, worker_id AS previous_worker_id
            FROM runledger.job_queue
            WHERE workflow_run_id = p_run AND status IN ('PENDING', 'LEASED')
        ) c
        WHERE q.id = c.id
        RETURNING q.id, q.attempt, q.leased_at, q.started_at, c.previous_status, c.previous_worker_id
    ),
    attempt_rows AS (
        INSERT INTO runledger.job_attempts (job_id, attempt, worker_id, outcome, leased_at, started_at)
        SELECT id, attempt, previous_worker_id, 'CANCELED', leased_at, started_at
        FROM canceled
        WHERE previous_status = 'LEASED'
    )
    INSERT INTO runledger.job_events (job_id, event_type, attempt, details)
    SELECT id, 'CANCELED', attempt,
           jsonb_build_object('previous_status', previous_status, 'reason', 'workflow.run_canceled')
    FROM canceled;

    PERFORM pg_notify('runledger_workflow_runs', p_run::text);
    RETURN v_previous;
END;
$$;
