-- Workflow DAG engine: step release, cascading cancellation and run status, driven from the
-- job rows of workflow steps so that every path that finishes a job (batched completion,
-- failure, reaper, cancellation) releases dependents in the same transaction.

-- The step key travels with a step's job so that a claim can hand it to the handler without
-- a join.
ALTER TABLE runledger.job_queue ADD COLUMN workflow_step_key text;

-- Releases BLOCKED steps whose dependencies are all done: job steps get a job row (and become
-- ENQUEUED), external steps start WAITING_FOR_EXTERNAL.
CREATE FUNCTION runledger.workflow_release_steps(p_run uuid, p_steps uuid[]) RETURNS void
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
               coalesce(s.timeout_seconds, d.timeout_seconds), p_run, s.id, s.step_key
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

-- Cancels steps whose after_success prerequisite did not succeed.
CREATE FUNCTION runledger.workflow_cancel_unsatisfied(p_steps uuid[]) RETURNS void
LANGUAGE sql
AS $$
    UPDATE runledger.workflow_steps
    SET status = 'CANCELED',
        status_reason = 'workflow.dependency_unsatisfied',
        last_error_code = 'workflow.dependency_unsatisfied',
        last_error_message = 'a prerequisite required to succeed did not succeed',
        finished_at = now(),
        updated_at = now()
    WHERE id = ANY(coalesce(p_steps, '{}'))
$$;

-- After the steps in p_finished became terminal: decrement their dependents' counters, release
-- the dependents that are now free, and cancel (cascading) those whose after_success
-- prerequisite did not succeed.
CREATE FUNCTION runledger.workflow_release_dependents(p_run uuid, p_finished uuid[]) RETURNS void
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

        PERFORM runledger.workflow_release_steps(p_run, v_ready);

        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);

        v_frontier := v_doomed;
    END LOOP;
END;
$$;

-- Recomputes a run's status from its steps; copies the result step's output when it succeeds
-- and notifies result waiters when it becomes terminal. A canceled run stays canceled.
CREATE FUNCTION runledger.workflow_refresh_run(p_run uuid) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_active boolean;
    v_waiting boolean;
    v_blocked boolean;
    v_failed boolean;
    v_status text;
    v_changed boolean;
BEGIN
    -- EXISTS probes stop at the first match: the common case (steps still active) is cheap
    -- even for wide fan-outs.
    v_active := EXISTS (
        SELECT 1 FROM runledger.workflow_steps
        WHERE workflow_run_id = p_run AND status IN ('ENQUEUED', 'RUNNING')
    );
    IF v_active THEN
        v_waiting := false; v_blocked := false; v_failed := false;
    ELSE
        SELECT coalesce(bool_or(status = 'WAITING_FOR_EXTERNAL'), false),
               coalesce(bool_or(status = 'BLOCKED'), false),
               coalesce(bool_or(status IN ('FAILED', 'CANCELED')), false)
        INTO v_waiting, v_blocked, v_failed
        FROM runledger.workflow_steps
        WHERE workflow_run_id = p_run;
    END IF;

    v_status := CASE
        WHEN v_active THEN 'RUNNING'
        WHEN v_waiting THEN 'WAITING_FOR_EXTERNAL'
        WHEN v_blocked THEN 'RUNNING'
        WHEN v_failed THEN 'COMPLETED_WITH_ERRORS'
        ELSE 'SUCCEEDED'
    END;

    UPDATE runledger.workflow_runs w
    SET status = v_status,
        result = CASE WHEN v_status = 'SUCCEEDED' AND w.result_step_key IS NOT NULL THEN (
                     SELECT s.output FROM runledger.workflow_steps s
                     WHERE s.workflow_run_id = p_run AND s.step_key = w.result_step_key
                 ) END,
        finished_at = CASE WHEN v_status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS') THEN now() END,
        updated_at = now()
    WHERE w.id = p_run AND w.status <> 'CANCELED' AND w.status <> v_status;
    v_changed := FOUND;

    IF v_changed AND v_status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS') THEN
        PERFORM pg_notify('runledger_workflow_runs', p_run::text);
    END IF;
    RETURN v_status;
END;
$$;

-- Marks a step terminal (if it is not already) and drives the DAG forward. Serialized per run
-- by the run row's lock, so concurrent completions of sibling steps see each other.
CREATE FUNCTION runledger.workflow_finish_step(
    p_step uuid,
    p_status text,
    p_output jsonb,
    p_error_code text,
    p_error_message text,
    p_reason text
) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_run uuid;
    v_run_status text;
BEGIN
    SELECT workflow_run_id INTO v_run FROM runledger.workflow_steps WHERE id = p_step;
    IF v_run IS NULL THEN
        RETURN false;
    END IF;
    SELECT status INTO v_run_status FROM runledger.workflow_runs WHERE id = v_run FOR UPDATE;

    UPDATE runledger.workflow_steps
    SET status = p_status,
        output = CASE WHEN p_status = 'SUCCEEDED' THEN p_output END,
        last_error_code = p_error_code,
        last_error_message = p_error_message,
        status_reason = p_reason,
        finished_at = now(),
        updated_at = now()
    WHERE id = p_step AND status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED');
    IF NOT FOUND THEN
        RETURN false;
    END IF;

    -- After a cancellation nothing is released.
    IF v_run_status = 'CANCELED' THEN
        RETURN true;
    END IF;
    PERFORM runledger.workflow_release_dependents(v_run, ARRAY[p_step]);
    PERFORM runledger.workflow_refresh_run(v_run);
    RETURN true;
END;
$$;

-- Mirrors a step job's status onto its step.
CREATE FUNCTION runledger.on_workflow_job_status() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.status = 'LEASED' THEN
        UPDATE runledger.workflow_steps
        SET status = 'RUNNING', updated_at = now()
        WHERE id = NEW.workflow_step_id AND status = 'ENQUEUED';
    ELSIF NEW.status = 'PENDING' THEN
        UPDATE runledger.workflow_steps
        SET status = 'ENQUEUED', updated_at = now()
        WHERE id = NEW.workflow_step_id AND status = 'RUNNING';
    ELSIF NEW.status = 'SUCCEEDED' THEN
        PERFORM runledger.workflow_finish_step(NEW.workflow_step_id, 'SUCCEEDED', NEW.output, NULL, NULL, NULL);
    ELSIF NEW.status = 'DEAD_LETTERED' THEN
        PERFORM runledger.workflow_finish_step(
            NEW.workflow_step_id, 'FAILED', NULL, NEW.last_error_code, NEW.last_error_message, 'job.dead_lettered'
        );
    ELSIF NEW.status = 'CANCELED' THEN
        PERFORM runledger.workflow_finish_step(
            NEW.workflow_step_id, 'CANCELED', NULL, NULL, NULL, 'job.canceled'
        );
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_workflow_status
    AFTER UPDATE OF status ON runledger.job_queue
    FOR EACH ROW
    WHEN (NEW.workflow_step_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION runledger.on_workflow_job_status();

-- Cancels a run: open steps and their pending or leased jobs end CANCELED; nothing is released
-- afterwards. Returns the run's status before the call, or NULL when the run does not exist.
CREATE FUNCTION runledger.workflow_cancel_run(p_run uuid, p_reason text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous text;
BEGIN
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
            FOR UPDATE
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

-- Completes an external step from outside. Returns one of: completed, already_completed,
-- conflicting_completion, conflicting_output, run_not_found, run_canceled, step_not_found,
-- step_not_external, step_not_waiting. With p_scoped, the run must belong to p_org (NULL: a
-- run without organization).
CREATE FUNCTION runledger.workflow_complete_external(
    p_run uuid,
    p_scoped boolean,
    p_org uuid,
    p_step_key text,
    p_status text,
    p_reason text,
    p_error_code text,
    p_error_message text,
    p_output jsonb
) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_run runledger.workflow_runs%ROWTYPE;
    v_step runledger.workflow_steps%ROWTYPE;
BEGIN
    SELECT * INTO v_run FROM runledger.workflow_runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND OR (p_scoped AND v_run.organization_id IS DISTINCT FROM p_org) THEN
        RETURN 'run_not_found';
    END IF;
    SELECT * INTO v_step FROM runledger.workflow_steps
    WHERE workflow_run_id = p_run AND step_key = p_step_key;
    IF NOT FOUND THEN
        RETURN 'step_not_found';
    END IF;
    IF v_step.step_kind <> 'EXTERNAL' THEN
        RETURN 'step_not_external';
    END IF;
    IF v_step.status IN ('SUCCEEDED', 'FAILED', 'CANCELED') THEN
        IF v_step.status = p_status
           AND v_step.status_reason IS NOT DISTINCT FROM p_reason
           AND v_step.last_error_code IS NOT DISTINCT FROM p_error_code
           AND v_step.last_error_message IS NOT DISTINCT FROM p_error_message THEN
            IF p_status = 'SUCCEEDED' AND v_step.output IS DISTINCT FROM p_output THEN
                RETURN 'conflicting_output';
            END IF;
            RETURN 'already_completed';
        END IF;
        IF v_run.status = 'CANCELED' THEN
            RETURN 'run_canceled';
        END IF;
        RETURN 'conflicting_completion';
    END IF;
    IF v_run.status = 'CANCELED' THEN
        RETURN 'run_canceled';
    END IF;
    IF v_step.status <> 'WAITING_FOR_EXTERNAL' THEN
        RETURN 'step_not_waiting';
    END IF;
    PERFORM runledger.workflow_finish_step(
        v_step.id, p_status, p_output, p_error_code, p_error_message, p_reason
    );
    RETURN 'completed';
END;
$$;

-- Settles steps just inserted into a run (a new run's steps, or appended ones): counts
-- prerequisites that are already terminal, releases the steps that are free, cancels (with
-- cascade) those whose after_success prerequisite already failed, and refreshes the run.
CREATE FUNCTION runledger.workflow_settle_new_steps(p_run uuid, p_steps uuid[]) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_ready uuid[];
    v_doomed uuid[];
BEGIN
    WITH counts AS (
        SELECT d.step_id,
               count(*) FILTER (WHERE p.status IN ('SUCCEEDED', 'FAILED', 'CANCELED')) AS done,
               count(*) FILTER (WHERE d.condition = 'SUCCESS' AND p.status IN ('FAILED', 'CANCELED')) AS bad
        FROM runledger.workflow_step_dependencies d
        JOIN runledger.workflow_steps p ON p.id = d.depends_on_step_id
        WHERE d.step_id = ANY(p_steps)
        GROUP BY d.step_id
    )
    UPDATE runledger.workflow_steps s
    SET deps_pending = s.deps_pending - c.done, deps_unsatisfied = c.bad
    FROM counts c
    WHERE s.id = c.step_id AND (c.done > 0 OR c.bad > 0);

    SELECT array_agg(id) FILTER (WHERE deps_unsatisfied = 0),
           array_agg(id) FILTER (WHERE deps_unsatisfied > 0)
    INTO v_ready, v_doomed
    FROM runledger.workflow_steps
    WHERE id = ANY(p_steps) AND status = 'BLOCKED' AND deps_pending = 0;

    PERFORM runledger.workflow_release_steps(p_run, v_ready);
    PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
    PERFORM runledger.workflow_release_dependents(p_run, v_doomed);
    RETURN runledger.workflow_refresh_run(p_run);
END;
$$;
