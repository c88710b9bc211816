-- Cancelling a workflow run, and the run's release lock that keeps a cancellation from racing
-- the paths that release steps from outside the run's jobs (appends, external completions).
--
-- The release lock is a transaction-scoped advisory lock per run. Cancelling a run holds it
-- exclusively from the moment it has locked the run's jobs until its transaction ends.
-- Appending steps and completing an external step try to take it shared, without waiting:
-- while a cancellation holds it they fail with `workflow.release_conflict` instead of queueing
-- behind it. Completions of step jobs do not take it: they lock their job rows first, so they
-- already wait for an in-flight cancellation of their run and then find their lease gone.
--
-- Lock order of every path that finishes step jobs: job rows, the release lock, the run rows
-- (in id order).

-- The advisory lock key of a run's release lock.
CREATE FUNCTION runledger.workflow_release_lock_key(p_run uuid) RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT hashtextextended('runledger.workflow_release:' || p_run::text, 0)
$$;

-- Takes the run's release lock shared for the rest of the transaction unless a cancellation
-- holds it; tells whether it was taken. Called by
-- `postgres::jobs::workflows::append_workflow_steps` and `complete_external_workflow_step`, in
-- the statement that checks the transaction's isolation level.
CREATE FUNCTION runledger.workflow_try_release_lock(p_run uuid) RETURNS boolean
LANGUAGE sql
AS $$
    SELECT pg_try_advisory_xact_lock_shared(runledger.workflow_release_lock_key(p_run))
$$;

-- Cancels a run: its open steps and their pending or leased jobs end CANCELED (with an attempt
-- row for a leased job and a CANCELED event for each), nothing is released afterwards, and the
-- run's waiters are notified on `runledger_workflow_runs`. Returns the run's status before the
-- call, or NULL when the run does not exist; a run that already ended is left as it is. Called
-- by `postgres::jobs::workflows::cancel_workflow_run` (READ COMMITTED only).
--
-- Locks: the run's open jobs first, then its release lock (exclusive, until the transaction
-- ends), then the run's row: the order every completion path uses, so a cancellation and a
-- completion of the same run wait for each other instead of deadlocking. Statements that write
-- several leased rows (mark running, heartbeat, the completion batch) lock them in the order
-- their plan reads them, not in id order, so the jobs are locked all at once or not at all:
-- NOWAIT inside a subtransaction, whose rollback releases the locks it took. While any is held
-- elsewhere the cancellation holds none, sleeps a millisecond and tries again, so the holder
-- always finishes; after about two seconds of that (a holder inside a long transaction) it
-- waits for them in id order. A run's jobs are found through its steps
-- (`workflow_steps.job_id`), looked up by the job table's primary key.
--
-- PL/pgSQL: the retry loop around a subtransaction would cost a round trip and a savepoint per
-- try from Rust, and the writes that follow depend on the status read under the locks.
CREATE FUNCTION runledger.workflow_cancel_run(p_run uuid, p_reason text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous text;
    v_try int := 0;
BEGIN
    LOOP
        v_try := v_try + 1;
        IF v_try > 2000 THEN
            PERFORM 1
            FROM runledger.job_queue
            WHERE id = ANY (ARRAY(
                SELECT s.job_id FROM runledger.workflow_steps s WHERE s.workflow_run_id = p_run))
              AND status IN ('PENDING', 'LEASED')
            ORDER BY id
            FOR UPDATE;
            EXIT;
        END IF;
        BEGIN
            PERFORM 1
            FROM runledger.job_queue
            WHERE id = ANY (ARRAY(
                SELECT s.job_id FROM runledger.workflow_steps s WHERE s.workflow_run_id = p_run))
              AND status IN ('PENDING', 'LEASED')
            ORDER BY id
            FOR UPDATE NOWAIT;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.001);
        END;
    END LOOP;
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
            WHERE id = ANY (ARRAY(
                SELECT s.job_id FROM runledger.workflow_steps s WHERE s.workflow_run_id = p_run))
              AND status IN ('PENDING', 'LEASED')
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
