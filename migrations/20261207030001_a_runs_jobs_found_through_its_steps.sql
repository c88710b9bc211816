-- A run's jobs are found through its steps instead of an index of the job table.
--
-- A step job is inserted by the release that records its id on its step (`workflow_steps.job_id`,
-- in the same statement), and no other path gives a job a run: the jobs of run R are the jobs
-- whose ids R's steps name, and the steps' (workflow_run_id, step_key) index finds them. The
-- statements below take those ids as an array, which the job table's primary key looks up;
-- a join let the planner scan the whole job table instead.
-- `job_queue_workflow_run_idx` only served the few statements that look a run's jobs up: a
-- cancellation, retention and the operators' job list filtered by run. Yet a status change of
-- a job is never a heap-only update (status is in the predicates of the table's partial
-- indexes), so every step job wrote an entry into it at its insert, its claim, its success and
-- each retry: 3,000 entries for the 1,000 middle steps of a 1 -> 1,000 -> 1 workflow, on the
-- statements between one step's completion and its dependents' start. Four alternated
-- `--only workflow` runs of the bench with and without the index (7 December, an eighth
-- machine of 2 cores, five rounds each): the workflow took 99 to 115 ms at the median without
-- it, 114 to 122 ms with it.

DROP INDEX runledger.job_queue_workflow_run_idx;

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

-- Retention: a pruned run's jobs and edges, through its steps (which it deletes after them).
CREATE OR REPLACE FUNCTION runledger.delete_workflow_run_rows() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM runledger.job_queue q
    WHERE q.id = ANY (ARRAY(
        SELECT s.job_id
        FROM runledger.workflow_steps s
        JOIN deleted_runs r ON s.workflow_run_id = r.id
    ));
    -- Every edge joins two steps of one run: the edges out of the run's steps are all of them
    -- (found by prerequisite, the key of 20261207040001_step_edges_keyed_by_their_prerequisite).
    DELETE FROM runledger.workflow_step_dependencies d
    USING runledger.workflow_steps s, deleted_runs r
    WHERE s.workflow_run_id = r.id AND d.depends_on_step_id = s.id;
    DELETE FROM runledger.workflow_steps s
    USING deleted_runs r
    WHERE s.workflow_run_id = r.id;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION runledger.prunable_workflow_runs(
    p_succeeded_seconds double precision,
    p_dead_lettered_seconds double precision,
    p_canceled_seconds double precision,
    p_limit bigint
)
RETURNS TABLE (id uuid, status text)
LANGUAGE sql STABLE
AS $$
    SELECT w.id, w.status
    FROM runledger.workflow_runs w
    WHERE w.status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
      AND w.id < runledger.uuidv7_floor(now() - make_interval(
            secs => least(p_succeeded_seconds, p_dead_lettered_seconds, p_canceled_seconds)))
      AND w.finished_at < now() - make_interval(secs => CASE w.status
            WHEN 'SUCCEEDED' THEN p_succeeded_seconds
            WHEN 'COMPLETED_WITH_ERRORS' THEN p_dead_lettered_seconds
            ELSE p_canceled_seconds
        END)
      AND NOT EXISTS (
          SELECT 1
          FROM runledger.workflow_steps s
          JOIN runledger.job_queue q ON q.id = s.job_id
          WHERE s.workflow_run_id = w.id AND q.status IN ('PENDING', 'LEASED')
      )
    LIMIT p_limit
$$;
