-- The ends of an attempt that a worker writes in batches: successes and continuations; and the
-- retry backoff of the failure path. A failure is one Rust statement
-- (`postgres::jobs::lease::complete_job_failure`, a CTE chain: retry or dead letter, attempt
-- row, dead-letter row, event); a step job it dead-letters ends its step through the
-- `job_queue_step_job_ended` trigger (09_workflow_release.sql).
--
-- Both batch functions are lease-fenced per row and carry the claim's planner settings for the
-- reason given in 07_leases.sql: they join an array of leases to the job rows, and a client
-- statement's first executions on a connection, planned for their parameters, could read the
-- whole job table for every batch.

-- Marks many leased jobs of one worker SUCCEEDED in one statement, each row fenced by its lease,
-- and returns the jobs it completed (the others had lost their lease and are left untouched).
-- A succeeded job keeps the worker that ran it, and its row is the record of its last attempt:
-- no `job_attempts` row is written. Called by `postgres::jobs::lease::complete_jobs_success`
-- (the worker's completer, one call per batch of outcomes).
--
-- The step jobs of the batch finish their steps in the same transaction, in one set-based call
-- of runledger.workflow_finish_steps (ordered by step id), which releases their dependents and
-- refreshes their runs: the hot path of a workflow, with no trigger on the job table's updates.
--
-- Locks: the job rows in the order the plan reads them, then (inside workflow_finish_steps) the
-- runs in id order. A workflow cancellation never waits for one of its run's jobs while holding
-- another (runledger.workflow_cancel_run), so the two cannot deadlock.
--
-- PL/pgSQL: besides the planner settings, the call into the workflow cascade happens only when
-- the batch holds step jobs, with the steps the update returned, in the same round trip.
CREATE FUNCTION runledger.complete_jobs_success(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_outputs jsonb[], p_progress jsonb[]
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_ids uuid[];
    v_steps uuid[];
    v_outputs jsonb[];
    v_none text[];
BEGIN
    WITH succeeded AS (
        UPDATE runledger.job_queue q
        SET status = 'SUCCEEDED',
            output = s.output,
            progress = coalesce(s.progress, q.progress),
            started_at = coalesce(q.started_at, q.leased_at),
            lease_expires_at = NULL,
            finished_at = now(),
            updated_at = now()
        FROM unnest(p_ids, p_attempts, p_outputs, p_progress) AS s(id, attempt, output, progress)
        WHERE q.id = ANY (p_ids) AND q.id = s.id AND q.attempt = s.attempt
          AND q.worker_id = p_worker_id
          AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
        RETURNING q.id, q.workflow_step_id, q.output
    )
    SELECT array_agg(id),
           array_agg(workflow_step_id ORDER BY workflow_step_id)
               FILTER (WHERE workflow_step_id IS NOT NULL),
           array_agg(output ORDER BY workflow_step_id) FILTER (WHERE workflow_step_id IS NOT NULL)
    INTO v_ids, v_steps, v_outputs
    FROM succeeded;
    IF v_steps IS NOT NULL THEN
        v_none := array_fill(NULL::text, ARRAY[cardinality(v_steps)]);
        PERFORM runledger.workflow_finish_steps(
            v_steps, array_fill('SUCCEEDED'::text, ARRAY[cardinality(v_steps)]), v_outputs,
            v_none, v_none, v_none
        );
    END IF;
    RETURN QUERY SELECT unnest(v_ids);
END;
$$;

-- Continues many leased jobs of one worker in one statement: each attempt whose lease still
-- holds closes as a success (a `job_attempts` row), and its job goes back to PENDING with
-- `run_number` + 1, a fresh attempt budget (`attempt_floor`), `next_run_at` after the asked
-- delay, the new checkpoint and progress (each kept when not given), a CONTINUED event, and a
-- notification when it is due at once. A step job may continue only when its step allows it
-- (read per job, by its step's key); otherwise nothing is written and `allowed` is false. A
-- continued step stays open and releases nothing. Rows are locked in id order. Called by
-- `postgres::jobs::continuation::continue_jobs`.
CREATE FUNCTION runledger.continue_jobs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_delays double precision[],
    p_checkpoints jsonb[], p_progress jsonb[]
) RETURNS TABLE (id uuid, allowed boolean, run_number integer, next_run_at timestamptz)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH current AS (
        SELECT q.id, c.delay_secs, c.checkpoint, c.progress,
               (q.workflow_step_id IS NULL OR coalesce((
                   SELECT s.continuation_allowed FROM runledger.workflow_steps s
                   WHERE s.id = q.workflow_step_id
               ), false)) AS allowed
        FROM unnest(p_ids, p_attempts, p_delays, p_checkpoints, p_progress)
             AS c(id, attempt, delay_secs, checkpoint, progress)
        JOIN runledger.job_queue q ON q.id = c.id
        WHERE q.id = ANY (p_ids) AND q.attempt = c.attempt AND q.worker_id = p_worker_id
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
        WHERE q.id = ANY (p_ids) AND q.id = c.id AND c.allowed
        RETURNING q.id, q.job_type, q.gated, q.attempt, q.leased_at, q.started_at,
                  q.run_number, q.next_run_at
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
        SELECT pg_notify(runledger.job_wake_channel(t.gated), t.job_type)
        FROM (
            SELECT DISTINCT n.job_type, n.gated FROM continued n WHERE n.next_run_at <= now()
        ) t
    )
    SELECT c.id, c.allowed, n.run_number, n.next_run_at
    FROM current c
    LEFT JOIN continued n ON n.id = c.id
    -- Read so that the notifications are sent: a CTE nothing reads is not run.
    WHERE (SELECT count(*) FROM notified) >= 0;
END;
$$;

-- The retry delay after `attempts_used` failed attempts: base * 2^(attempts_used - 1), capped
-- by the definition's `cap_ms` and by 365 days whatever a definition row says (so a retryable
-- failure can always be recorded), with "equal jitter" (uniform in [delay / 2, delay]) so that
-- the retries of a burst spread out. Read by the failure path
-- (`postgres::jobs::lease::complete_job_failure`) and by the intent promoter's deferrals
-- (`postgres::jobs::intents`); the reaper retries an expired lease after a fixed delay
-- (`postgres::jobs::admin::reap_expired_leases`).
CREATE FUNCTION runledger.retry_backoff(attempts_used integer, base_ms bigint, cap_ms bigint)
RETURNS interval
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT make_interval(secs => (capped / 2 + random() * capped / 2) / 1000.0)
    FROM (
        SELECT least(
            cap_ms::float8,
            31536000000::float8,
            base_ms::float8 * power(2::float8, least(greatest(attempts_used, 1) - 1, 62))
        ) AS capped
    ) AS delay
$$;
