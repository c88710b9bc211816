-- Set-based workflow release. A statement that finishes many step jobs (a batch of successes,
-- the reaper's batch, a cancellation) now drives the DAG once per statement instead of once
-- per job row: the runs concerned are locked once each, in id order, their steps are updated
-- together, each dependent's counters are decremented once by the number of its finished
-- prerequisites, and each run's status is recomputed once. A fan-in of a thousand steps no
-- longer serializes a thousand times on its run's row.
--
-- Lock order: every path that finishes step jobs holds the job rows first and then takes the
-- run rows in id order; cancelling a run now does the same (its jobs first), so a cancellation
-- and a completion of the same run wait for each other instead of deadlocking.

-- Releases BLOCKED steps whose dependencies are all done, of any runs: job steps get a job row
-- (and become ENQUEUED), external steps start WAITING_FOR_EXTERNAL.
CREATE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
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
            workflow_run_id, workflow_step_id, workflow_step_key
        )
        SELECT r.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key
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

-- The run-scoped form, kept for callers that name the run.
CREATE OR REPLACE FUNCTION runledger.workflow_release_steps(p_run uuid, p_steps uuid[])
RETURNS void
LANGUAGE sql
AS $$
    SELECT runledger.workflow_release_steps(p_steps)
$$;

-- After the steps in p_finished (of any runs) became terminal: decrement each dependent's
-- counters once by the number of its finished prerequisites, release the dependents that are
-- now free, and cancel (cascading) those whose after_success prerequisite did not succeed.
CREATE FUNCTION runledger.workflow_release_dependents(p_finished uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_frontier uuid[] := p_finished;
    v_ready uuid[];
    v_doomed uuid[];
BEGIN
    WHILE v_frontier IS NOT NULL AND cardinality(v_frontier) > 0 LOOP
        WITH edges AS (
            SELECT d.step_id,
                   count(*) AS finished,
                   count(*) FILTER (WHERE d.condition = 'SUCCESS' AND p.status <> 'SUCCEEDED') AS unsatisfied
            FROM runledger.workflow_step_dependencies d
            JOIN runledger.workflow_steps p ON p.id = d.depends_on_step_id
            WHERE d.depends_on_step_id = ANY(v_frontier)
            GROUP BY d.step_id
        ),
        counted AS (
            UPDATE runledger.workflow_steps s
            SET deps_pending = s.deps_pending - e.finished,
                deps_unsatisfied = s.deps_unsatisfied + e.unsatisfied,
                updated_at = now()
            FROM edges e
            WHERE s.id = e.step_id AND s.status = 'BLOCKED'
            RETURNING s.id, s.deps_pending, s.deps_unsatisfied
        )
        SELECT array_agg(id) FILTER (WHERE deps_pending = 0 AND deps_unsatisfied = 0),
               array_agg(id) FILTER (WHERE deps_pending = 0 AND deps_unsatisfied > 0)
        INTO v_ready, v_doomed
        FROM counted;

        PERFORM runledger.workflow_release_steps(v_ready);
        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
        v_frontier := v_doomed;
    END LOOP;
END;
$$;

-- The run-scoped form, kept for callers that name the run.
CREATE OR REPLACE FUNCTION runledger.workflow_release_dependents(p_run uuid, p_finished uuid[])
RETURNS void
LANGUAGE sql
AS $$
    SELECT runledger.workflow_release_dependents(p_finished)
$$;

-- Marks steps terminal (those that are not already) and drives their runs forward: the runs
-- are locked once each, in id order; steps of a canceled run are recorded but release nothing.
-- Returns the steps it finished.
CREATE FUNCTION runledger.workflow_finish_steps(
    p_steps uuid[],
    p_statuses text[],
    p_outputs jsonb[],
    p_error_codes text[],
    p_error_messages text[],
    p_reasons text[]
) RETURNS uuid[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_finished uuid[];
    v_live uuid[];
    v_live_runs uuid[];
    v_run uuid;
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN '{}';
    END IF;
    PERFORM 1
    FROM runledger.workflow_runs
    WHERE id IN (SELECT workflow_run_id FROM runledger.workflow_steps WHERE id = ANY(p_steps))
    ORDER BY id
    FOR UPDATE;

    WITH input AS (
        SELECT *
        FROM unnest(p_steps, p_statuses, p_outputs, p_error_codes, p_error_messages, p_reasons)
             AS i(step_id, status, output, error_code, error_message, reason)
    ),
    finished AS (
        UPDATE runledger.workflow_steps s
        SET status = i.status,
            output = CASE WHEN i.status = 'SUCCEEDED' THEN i.output END,
            last_error_code = i.error_code,
            last_error_message = i.error_message,
            status_reason = i.reason,
            finished_at = now(),
            updated_at = now()
        FROM input i
        WHERE s.id = i.step_id AND s.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')
        RETURNING s.id, s.workflow_run_id
    )
    SELECT array_agg(f.id),
           array_agg(f.id) FILTER (WHERE w.status <> 'CANCELED'),
           array_agg(DISTINCT f.workflow_run_id) FILTER (WHERE w.status <> 'CANCELED')
    INTO v_finished, v_live, v_live_runs
    FROM finished f
    JOIN runledger.workflow_runs w ON w.id = f.workflow_run_id;

    -- After a cancellation nothing is released.
    IF v_live IS NOT NULL THEN
        PERFORM runledger.workflow_release_dependents(v_live);
        FOREACH v_run IN ARRAY v_live_runs LOOP
            PERFORM runledger.workflow_refresh_run(v_run);
        END LOOP;
    END IF;
    RETURN coalesce(v_finished, '{}');
END;
$$;

-- One step (external completion); the same path as a batch.
CREATE OR REPLACE FUNCTION runledger.workflow_finish_step(
    p_step uuid,
    p_status text,
    p_output jsonb,
    p_error_code text,
    p_error_message text,
    p_reason text
) RETURNS boolean
LANGUAGE sql
AS $$
    SELECT cardinality(runledger.workflow_finish_steps(
        ARRAY[p_step], ARRAY[p_status], ARRAY[p_output], ARRAY[p_error_code],
        ARRAY[p_error_message], ARRAY[p_reason]
    )) > 0
$$;

-- Mirrors the status changes of step jobs onto their steps, once per statement. A statement
-- that touches no step job (every plain job's claim, completion and heartbeat) costs one scan
-- of its transition rows.
CREATE FUNCTION runledger.on_workflow_jobs_status() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_steps uuid[];
    v_statuses text[];
    v_outputs jsonb[];
    v_codes text[];
    v_messages text[];
    v_reasons text[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_jobs WHERE workflow_step_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;

    WITH changed AS (
        SELECT n.workflow_step_id AS step_id, n.status
        FROM new_jobs n
        JOIN old_jobs o ON o.id = n.id
        WHERE n.workflow_step_id IS NOT NULL AND n.status IN ('LEASED', 'PENDING')
          AND o.status IS DISTINCT FROM n.status
    )
    UPDATE runledger.workflow_steps s
    SET status = CASE c.status WHEN 'LEASED' THEN 'RUNNING' ELSE 'ENQUEUED' END,
        updated_at = now()
    FROM changed c
    WHERE s.id = c.step_id
      AND s.status = CASE c.status WHEN 'LEASED' THEN 'ENQUEUED' ELSE 'RUNNING' END;

    SELECT array_agg(n.workflow_step_id ORDER BY n.workflow_step_id),
           array_agg(CASE n.status WHEN 'SUCCEEDED' THEN 'SUCCEEDED'
                                   WHEN 'DEAD_LETTERED' THEN 'FAILED'
                                   ELSE 'CANCELED' END ORDER BY n.workflow_step_id),
           array_agg(n.output ORDER BY n.workflow_step_id),
           array_agg(CASE WHEN n.status = 'DEAD_LETTERED' THEN n.last_error_code END
                     ORDER BY n.workflow_step_id),
           array_agg(CASE WHEN n.status = 'DEAD_LETTERED' THEN n.last_error_message END
                     ORDER BY n.workflow_step_id),
           array_agg(CASE n.status WHEN 'DEAD_LETTERED' THEN 'job.dead_lettered'
                                   WHEN 'CANCELED' THEN 'job.canceled' END
                     ORDER BY n.workflow_step_id)
    INTO v_steps, v_statuses, v_outputs, v_codes, v_messages, v_reasons
    FROM new_jobs n
    JOIN old_jobs o ON o.id = n.id
    WHERE n.workflow_step_id IS NOT NULL
      AND n.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
      AND o.status IS DISTINCT FROM n.status;

    PERFORM runledger.workflow_finish_steps(
        v_steps, v_statuses, v_outputs, v_codes, v_messages, v_reasons
    );
    RETURN NULL;
END;
$$;

DROP TRIGGER job_queue_workflow_status ON runledger.job_queue;
DROP FUNCTION runledger.on_workflow_job_status();

CREATE TRIGGER job_queue_workflow_status
    AFTER UPDATE ON runledger.job_queue
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION runledger.on_workflow_jobs_status();

-- Cancels a run: open steps and their pending or leased jobs end CANCELED; nothing is released
-- afterwards. The run's jobs are locked before the run, the order every completion path uses.
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
