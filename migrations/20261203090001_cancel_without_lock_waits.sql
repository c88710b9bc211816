-- A cancellation no longer waits for one of its run's jobs while holding another. Statements
-- that write several leased rows (mark running, heartbeat, the completion batch) lock them in
-- the order their plan reads them, which on a small table is the heap's order, not id order;
-- a cancellation that held the lower id and waited for the higher one deadlocked with a
-- completion batch that held the higher id and waited for the lower one.
--
-- The run's open jobs are now locked all at once or not at all (NOWAIT inside a subtransaction,
-- whose rollback releases the locks it took): while any is held elsewhere the cancellation
-- holds none, sleeps a millisecond and tries again, so the holder always finishes. After about
-- two seconds of that (a holder inside a long transaction) it waits in id order as before.
-- The rest is as in 20261202100001_release_lock.
CREATE OR REPLACE FUNCTION runledger.workflow_cancel_run(p_run uuid, p_reason text) RETURNS text
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
            WHERE workflow_run_id = p_run AND status IN ('PENDING', 'LEASED')
            ORDER BY id
            FOR UPDATE;
            EXIT;
        END IF;
        BEGIN
            PERFORM 1
            FROM runledger.job_queue
            WHERE workflow_run_id = p_run AND status IN ('PENDING', 'LEASED')
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
