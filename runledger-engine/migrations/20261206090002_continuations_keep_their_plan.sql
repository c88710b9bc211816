-- The batch of continuations as a function with the claim's planner settings, for the reason
-- given in 20261206090001: the statement joined its leases to the job rows and filtered on the
-- lease, and its first executions on a connection, planned for their parameters, could read the
-- whole job table for every batch.

CREATE FUNCTION runledger.continue_jobs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_delays double precision[],
    p_checkpoints jsonb[], p_progress jsonb[]
) RETURNS TABLE (id uuid, allowed boolean, run_number integer, next_run_at timestamptz)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH current AS (
        SELECT q.id, c.delay_secs, c.checkpoint, c.progress,
               (q.workflow_step_id IS NULL OR coalesce(s.continuation_allowed, false)) AS allowed
        FROM unnest(p_ids, p_attempts, p_delays, p_checkpoints, p_progress)
             AS c(id, attempt, delay_secs, checkpoint, progress)
        JOIN runledger.job_queue q ON q.id = c.id
        LEFT JOIN runledger.workflow_steps s ON s.id = q.workflow_step_id
        WHERE q.attempt = c.attempt AND q.worker_id = p_worker_id
          AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
        ORDER BY q.id
        FOR UPDATE OF q
    ),
    continued AS (
        UPDATE runledger.job_queue q
        SET status = 'PENDING',
            next_run_at = now() + make_interval(secs => c.delay_secs),
            attempt_floor = q.attempt,
            run_number = q.run_number + 1,
            checkpoint = coalesce(c.checkpoint, q.checkpoint),
            progress = coalesce(c.progress, q.progress),
            worker_id = NULL,
            lease_expires_at = NULL,
            updated_at = now()
        FROM current c
        WHERE q.id = c.id AND c.allowed
        RETURNING q.id, q.job_type, q.attempt, q.leased_at, q.started_at, q.run_number,
                  q.next_run_at
    ),
    attempt_row AS (
        INSERT INTO runledger.job_attempts (job_id, attempt, worker_id, outcome, leased_at, started_at)
        SELECT n.id, n.attempt, p_worker_id, 'SUCCEEDED', n.leased_at, coalesce(n.started_at, n.leased_at)
        FROM continued n
    ),
    event AS (
        INSERT INTO runledger.job_events (job_id, event_type, attempt, worker_id, details)
        SELECT n.id, 'CONTINUED', n.attempt, p_worker_id,
               jsonb_build_object('run_number', n.run_number, 'next_run_at', n.next_run_at)
        FROM continued n
    ),
    notified AS (
        SELECT pg_notify('runledger_job_queue', t.job_type)
        FROM (SELECT DISTINCT n.job_type FROM continued n WHERE n.next_run_at <= now()) t
    )
    SELECT c.id, c.allowed, n.run_number, n.next_run_at
    FROM current c
    LEFT JOIN continued n ON n.id = c.id
    -- Read so that the notifications are sent: a CTE nothing reads is not run.
    WHERE (SELECT count(*) FROM notified) >= 0;
END;
$$;
