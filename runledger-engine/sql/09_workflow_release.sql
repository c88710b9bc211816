-- Workflow release: how a run's DAG moves forward. Every path that ends a step job (the batch
-- of successes, a failure that dead-letters, the reaper, a cancellation) or completes an
-- external step drives the DAG in the same transaction, set-based, once per statement.
--
-- Each step keeps dependency counters (total / pending / unsatisfied). When steps finish, their
-- dependents are counted down once each by the number of their finished prerequisites; a
-- dependent reaching zero pending is released in the same row update (a job step becomes
-- ENQUEUED with a job row whose id is the step's, an external step WAITING_FOR_EXTERNAL, a
-- fan-out finishes at once with its children's outputs), or
-- CANCELED with `workflow.dependency_unsatisfied`, cascading, when an after_success
-- prerequisite did not succeed. The run's status is then recomputed.
--
-- Lock order of every path that finishes step jobs: the job rows, the run's release lock
-- (10_workflow_cancellation.sql), the run rows in id order. A step row is written only by the
-- holder of its job row or of its run's row. The steps a batch finishes belong to jobs whose
-- rows it already holds, so it writes them before it locks their runs; everything that reads
-- other steps of a run (the countdown, the run's status) happens under the run's lock, so
-- batches of one run, appends and cancellations see each other's committed work.
--
-- This is PL/pgSQL because each stage reads what the previous one wrote: the countdown of one
-- wave of finished steps yields the steps it releases and the steps it cancels, whose own
-- dependents are the next wave, until none is left (a loop whose length is the depth of the
-- cascade). In one SQL statement a stage cannot see the rows an earlier part of the same
-- statement wrote; from Rust each wave would be a round trip. The functions that join arrays of
-- keys to tables carry planner settings that keep their plans bounded by those keys (an index
-- condition `id = ANY (...)`, rows joined by hashing) whatever the tables' size when a
-- connection first planned them, and one generic plan per connection.

-- Starts a run just inserted: releases its roots (the steps without prerequisites) and returns
-- the run's status. No step of a new run has a finished prerequisite to count. Called by
-- `postgres::jobs::workflows::enqueue_workflow_run` after it inserted the run, its steps and
-- its edges. PL/pgSQL: the status is computed from what the release just wrote, in the same
-- round trip.
CREATE FUNCTION runledger.workflow_start_run(p_run uuid, p_roots uuid[]) RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM runledger.workflow_release_steps(p_roots);
    RETURN runledger.workflow_refresh_run(p_run);
END;
$$;

-- Settles steps appended to a run: counts the prerequisites outside them that have already
-- finished, releases the steps that are free, cancels (with cascade) those whose after_success
-- prerequisite already failed, and returns the run's refreshed status. Prerequisites among the
-- new steps are BLOCKED and count for nothing. Called by
-- `postgres::jobs::workflows::append_workflow_steps` under the run's release lock (shared) and
-- the run's row lock.
CREATE FUNCTION runledger.workflow_settle_new_steps(p_run uuid, p_steps uuid[])
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_ready uuid[];
    v_doomed uuid[];
BEGIN
    WITH counts AS (
        SELECT d.step_id,
               count(*) AS done,
               count(*) FILTER (WHERE d.condition = 'SUCCESS' AND p.status IN ('FAILED', 'CANCELED')) AS bad
        FROM runledger.workflow_steps p
        JOIN runledger.workflow_step_dependencies d ON d.depends_on_step_id = p.id
        WHERE p.workflow_run_id = p_run
          AND p.status IN ('SUCCEEDED', 'FAILED', 'CANCELED')
          AND NOT p.id = ANY(p_steps)
          AND d.step_id = ANY(p_steps)
        GROUP BY d.step_id
    )
    UPDATE runledger.workflow_steps s
    SET deps_pending = s.deps_pending - c.done, deps_unsatisfied = c.bad
    FROM counts c
    WHERE s.id = c.step_id;

    SELECT array_agg(id) FILTER (WHERE deps_unsatisfied = 0),
           array_agg(id) FILTER (WHERE deps_unsatisfied > 0)
    INTO v_ready, v_doomed
    FROM runledger.workflow_steps
    WHERE id = ANY(p_steps) AND status = 'BLOCKED' AND deps_pending = 0;

    PERFORM runledger.workflow_release_steps(v_ready);
    PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
    PERFORM runledger.workflow_count_down_dependents(v_doomed, v_doomed);
    RETURN runledger.workflow_refresh_run(p_run);
END;
$$;

-- Marks steps terminal (those that are not already) with their status, output (kept for
-- SUCCEEDED only), error and reason, and drives their runs forward: takes the released steps it
-- finished away from their runs' counts of active steps, counts down their dependents and
-- refreshes each run. Steps of a canceled run are recorded but release nothing. Returns the
-- steps it finished.
--
-- Called by runledger.complete_jobs_success (a batch of successes, steps in id order), the
-- `job_queue_step_job_ended` trigger (a step job dead-lettered or canceled) and
-- runledger.workflow_complete_external (an external step). Locks the runs in id order after it
-- has written its own steps (see the lock order above).
CREATE FUNCTION runledger.workflow_finish_steps(
    p_steps uuid[],
    p_statuses text[],
    p_outputs jsonb[],
    p_error_codes text[],
    p_error_messages text[],
    p_reasons text[]
) RETURNS uuid[]
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_finished uuid[];
    v_failed uuid[];
    v_runs uuid[];
    v_ended int[];
    v_live uuid[];
    v_live_runs uuid[];
    v_run uuid;
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN '{}';
    END IF;

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
        WHERE s.id = ANY (p_steps) AND s.id = i.step_id
          AND s.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')
        -- Only a released step has a job id, and a step that is not finished yet was active
        -- once released.
        RETURNING s.id, s.workflow_run_id, s.status, s.job_id IS NOT NULL AS was_active
    ),
    per_run AS (
        SELECT workflow_run_id, (count(*) FILTER (WHERE was_active))::int AS ended
        FROM finished
        GROUP BY workflow_run_id
    )
    SELECT (SELECT array_agg(id) FROM finished),
           (SELECT array_agg(id) FILTER (WHERE status <> 'SUCCEEDED') FROM finished),
           (SELECT array_agg(workflow_run_id ORDER BY workflow_run_id) FROM per_run),
           (SELECT array_agg(ended ORDER BY workflow_run_id) FROM per_run)
    INTO v_finished, v_failed, v_runs, v_ended;
    IF v_finished IS NULL THEN
        RETURN '{}';
    END IF;

    -- From here on the runs' other steps are read: under their rows' locks, taken in id order,
    -- so batches of one run, appends and cancellations see each other's committed work.
    PERFORM 1 FROM runledger.workflow_runs WHERE id = ANY(v_runs) ORDER BY id FOR UPDATE;

    -- The finished steps are active no more. After a cancellation nothing is released.
    WITH counted AS (
        UPDATE runledger.workflow_runs w
        SET active_steps = w.active_steps - e.ended
        FROM unnest(v_runs, v_ended) AS e(id, ended)
        WHERE w.id = ANY (v_runs) AND w.id = e.id
        RETURNING w.id, w.status
    )
    SELECT array_agg(id) FILTER (WHERE status <> 'CANCELED') INTO v_live_runs FROM counted;
    IF v_live_runs IS NOT NULL THEN
        IF cardinality(v_live_runs) = cardinality(v_runs) THEN
            v_live := v_finished;
        ELSE
            SELECT array_agg(s.id) INTO v_live
            FROM runledger.workflow_steps s
            WHERE s.id = ANY(v_finished) AND s.workflow_run_id = ANY(v_live_runs);
        END IF;
        PERFORM runledger.workflow_count_down_dependents(v_live, v_failed);
        FOREACH v_run IN ARRAY v_live_runs LOOP
            PERFORM runledger.workflow_refresh_run(v_run);
        END LOOP;
    END IF;
    RETURN v_finished;
END;
$$;

-- After the steps in `p_finished` finished (those in `p_failed` without succeeding): counts
-- down their dependents' prerequisites, releases in the same row update the dependents that are
-- now free, inserts the jobs of the released job steps, closes the released fan-outs
-- (runledger.workflow_close_fan_outs), and cancels those whose after_success prerequisite did
-- not succeed; the canceled steps and the closed fan-outs are the next wave. Each wave reads
-- the edges out of its finished steps once, through the edges' primary key (prerequisite,
-- step), counted per dependent, then updates those dependents by their keys. Called by
-- runledger.workflow_finish_steps and runledger.workflow_settle_new_steps.
CREATE FUNCTION runledger.workflow_count_down_dependents(p_finished uuid[], p_failed uuid[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_frontier uuid[] := p_finished;
    v_failed uuid[] := coalesce(p_failed, '{}');
    v_dependents uuid[];
    v_done int[];
    v_bad int[];
    v_jobs runledger.workflow_steps[];
    v_doomed uuid[];
    v_fan_outs uuid[];
    v_closed uuid[];
    v_closed_failed uuid[];
BEGIN
    WHILE v_frontier IS NOT NULL AND cardinality(v_frontier) > 0 LOOP
        SELECT array_agg(e.step_id), array_agg(e.done), array_agg(e.bad)
        INTO v_dependents, v_done, v_bad
        FROM (
            SELECT d.step_id,
                   count(*)::int AS done,
                   (count(*) FILTER (
                       WHERE d.condition = 'SUCCESS' AND d.depends_on_step_id = ANY(v_failed)
                   ))::int AS bad
            FROM runledger.workflow_step_dependencies d
            WHERE d.depends_on_step_id = ANY(v_frontier)
            GROUP BY d.step_id
        ) e;
        EXIT WHEN v_dependents IS NULL;

        WITH counted AS (
            UPDATE runledger.workflow_steps s
            SET deps_pending = s.deps_pending - e.done,
                deps_unsatisfied = s.deps_unsatisfied + e.bad,
                status = CASE WHEN s.deps_pending = e.done AND s.deps_unsatisfied + e.bad = 0
                              THEN runledger.workflow_released_status(s.step_kind)
                              ELSE s.status END,
                job_id = CASE WHEN s.deps_pending = e.done AND s.deps_unsatisfied + e.bad = 0
                                   AND s.step_kind = 'JOB'
                              THEN s.id ELSE s.job_id END,
                updated_at = now()
            FROM unnest(v_dependents, v_done, v_bad) AS e(step_id, done, bad)
            WHERE s.id = ANY (v_dependents) AND s.id = e.step_id AND s.status = 'BLOCKED'
            RETURNING s AS step
        )
        SELECT array_agg(step) FILTER (WHERE (step).status = 'ENQUEUED'),
               array_agg((step).id) FILTER (WHERE (step).deps_pending = 0
                                             AND (step).deps_unsatisfied > 0),
               array_agg((step).id) FILTER (WHERE (step).step_kind = 'FAN_OUT'
                                             AND (step).status = 'WAITING_FOR_EXTERNAL')
        INTO v_jobs, v_doomed, v_fan_outs
        FROM counted;

        PERFORM runledger.workflow_insert_step_jobs(v_jobs);
        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
        v_closed := NULL;
        v_closed_failed := NULL;
        IF v_fan_outs IS NOT NULL THEN
            SELECT c.closed, c.failed INTO v_closed, v_closed_failed
            FROM runledger.workflow_close_fan_outs(v_fan_outs) AS c;
        END IF;
        -- Canceled steps finished without succeeding: their dependents count them as failed;
        -- so do they a fan-out that failed.
        v_frontier := coalesce(v_doomed, '{}') || coalesce(v_closed, '{}');
        v_failed := coalesce(v_doomed, '{}') || coalesce(v_closed_failed, '{}');
    END LOOP;
END;
$$;

-- Releases BLOCKED steps, of any runs: job steps become ENQUEUED with their own id as their
-- job's id and get a job row, external steps start WAITING_FOR_EXTERNAL, fan-outs finish at
-- once (runledger.workflow_close_fan_outs) and count down their dependents. Each step row is
-- written once. Called by runledger.workflow_start_run and runledger.workflow_settle_new_steps.
CREATE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_jobs runledger.workflow_steps[];
    v_fan_outs uuid[];
    v_closed uuid[];
    v_closed_failed uuid[];
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH released AS (
        UPDATE runledger.workflow_steps s
        SET status = runledger.workflow_released_status(s.step_kind),
            job_id = CASE s.step_kind WHEN 'JOB' THEN s.id END,
            updated_at = now()
        WHERE s.id = ANY(p_steps) AND s.status = 'BLOCKED'
        RETURNING s AS step
    )
    SELECT array_agg(step) FILTER (WHERE (step).step_kind = 'JOB'),
           array_agg((step).id) FILTER (WHERE (step).step_kind = 'FAN_OUT')
    INTO v_jobs, v_fan_outs
    FROM released;

    PERFORM runledger.workflow_insert_step_jobs(v_jobs);
    SELECT c.closed, c.failed INTO v_closed, v_closed_failed
    FROM runledger.workflow_close_fan_outs(v_fan_outs) AS c;
    PERFORM runledger.workflow_count_down_dependents(v_closed, v_closed_failed);
END;
$$;

-- Finishes fan-outs just released (WAITING_FOR_EXTERNAL for the length of the statement that
-- released them): SUCCEEDED with the outputs of their children in order, or FAILED with
-- `workflow.fan_out_failed` when one did not succeed. A fan-out whose children's outputs take
-- more than 16 MiB succeeds without collecting them (NULL output, reason
-- `workflow.fan_out_outputs_not_collected`): they are read from the children, a page at a
-- time. Returns the fan-outs it finished and those that failed, which the caller counts down
-- as the next wave. Called by runledger.workflow_count_down_dependents and
-- runledger.workflow_release_steps. The children are found by their keys through the run's
-- unique key index, one lookup each.
CREATE FUNCTION runledger.workflow_close_fan_outs(
    p_steps uuid[], OUT closed uuid[], OUT failed uuid[]
)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = on
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH gates AS MATERIALIZED (
        SELECT g.id, g.workflow_run_id, g.step_key,
               coalesce((g.payload ->> 'children')::int, 0) AS children
        FROM runledger.workflow_steps g
        WHERE g.id = ANY (p_steps) AND g.step_kind = 'FAN_OUT'
          AND g.status = 'WAITING_FOR_EXTERNAL'
    ),
    children AS MATERIALIZED (
        SELECT g.id AS gate, i.n, c.status, c.output
        FROM gates g
        CROSS JOIN LATERAL generate_series(0, g.children - 1) AS i(n)
        LEFT JOIN runledger.workflow_steps c
          ON c.workflow_run_id = g.workflow_run_id AND c.step_key = g.step_key || '/' || i.n
    ),
    verdicts AS MATERIALIZED (
        SELECT g.id, g.children,
               (count(c.n) FILTER (WHERE c.status IS DISTINCT FROM 'SUCCEEDED'))::int AS bad,
               coalesce(sum(pg_column_size(c.output)), 0) <= 16777216 AS collectable
        FROM gates g
        LEFT JOIN children c ON c.gate = g.id
        GROUP BY g.id, g.children
    ),
    outputs AS (
        SELECT c.gate, jsonb_agg(c.output ORDER BY c.n) AS output
        FROM children c
        JOIN verdicts v ON v.id = c.gate
        WHERE v.bad = 0 AND v.collectable
        GROUP BY c.gate
    ),
    finished AS (
        UPDATE runledger.workflow_steps s
        SET status = CASE WHEN v.bad = 0 THEN 'SUCCEEDED' ELSE 'FAILED' END,
            output = CASE WHEN v.bad = 0 AND v.collectable
                          THEN coalesce(o.output, '[]'::jsonb) END,
            status_reason = CASE WHEN v.bad = 0 AND NOT v.collectable
                                 THEN 'workflow.fan_out_outputs_not_collected' END,
            last_error_code = CASE WHEN v.bad > 0 THEN 'workflow.fan_out_failed' END,
            last_error_message = CASE WHEN v.bad > 0
                THEN format('%s of the %s children of `%s` did not succeed',
                            v.bad, v.children, s.step_key) END,
            finished_at = now(),
            updated_at = now()
        FROM verdicts v
        LEFT JOIN outputs o ON o.gate = v.id
        WHERE s.id = ANY (p_steps) AND s.id = v.id
        RETURNING s.id, s.status
    )
    SELECT array_agg(f.id), array_agg(f.id) FILTER (WHERE f.status = 'FAILED')
    INTO closed, failed
    FROM finished f;
END;
$$;

-- Inserts the jobs of job steps just marked ENQUEUED (the rows as the release's UPDATE returned
-- them, their job's id set), counts them as active in their runs, and wakes the workers of
-- their types on the channel of each job. The one place where a step becomes a job row. The
-- jobs take their run's organization and trace context (from the runs of those steps only) and
-- their definition's defaults; whether a type's jobs are gated is decided once per type. A job
-- is due now, or from its run's creation when the run asked for `run_first` claim order.
CREATE FUNCTION runledger.workflow_insert_step_jobs(p_steps runledger.workflow_steps[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_types text[];
    v_gated_types text[];
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH steps AS MATERIALIZED (
        SELECT s.id, s.job_id, s.job_type, s.organization_id, s.payload, s.priority,
               s.max_attempts, s.timeout_seconds, s.workflow_run_id, s.step_key, s.resource_key
        FROM unnest(p_steps) AS s
        WHERE s.step_kind = 'JOB' AND s.status = 'ENQUEUED'
    ),
    -- Whether a type's jobs are under a global limit is decided once per type.
    definitions AS MATERIALIZED (
        SELECT d.job_type, d.priority, d.max_attempts, d.timeout_seconds, d.queue,
               runledger.job_gated(d.global_concurrency IS NOT NULL, d.queue) AS limited
        FROM runledger.job_definitions d
        WHERE d.job_type = ANY (ARRAY(SELECT DISTINCT job_type FROM steps))
    ),
    runs AS MATERIALIZED (
        SELECT w.id, w.organization_id, w.trace_context,
               CASE WHEN w.run_first THEN w.created_at ELSE now() END AS due_at
        FROM runledger.workflow_runs w
        WHERE w.id = ANY (ARRAY(SELECT DISTINCT workflow_run_id FROM steps))
    ),
    -- The steps are active from now on.
    counted AS (
        UPDATE runledger.workflow_runs w
        SET active_steps = w.active_steps + c.n
        FROM (SELECT workflow_run_id, count(*)::int AS n FROM steps GROUP BY workflow_run_id) c
        WHERE w.id = ANY (ARRAY(SELECT DISTINCT workflow_run_id FROM steps))
          AND w.id = c.workflow_run_id
    ),
    jobs AS (
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            workflow_run_id, workflow_step_id, workflow_step_key, queue, resource_key, gated,
            trace_context, next_run_at
        )
        SELECT s.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key, d.queue, s.resource_key,
               s.resource_key IS NOT NULL OR d.limited,
               w.trace_context, w.due_at
        FROM steps s
        JOIN runs w ON w.id = s.workflow_run_id
        JOIN definitions d ON d.job_type = s.job_type
        RETURNING job_type, gated
    )
    SELECT array_agg(DISTINCT job_type) FILTER (WHERE NOT gated),
           array_agg(DISTINCT job_type) FILTER (WHERE gated)
    INTO v_types, v_gated_types
    FROM jobs;

    -- A released step's job is due at once.
    PERFORM pg_notify(runledger.job_wake_channel(false), t.job_type)
    FROM unnest(v_types) AS t(job_type);
    PERFORM pg_notify(runledger.job_wake_channel(true), t.job_type)
    FROM unnest(v_gated_types) AS t(job_type);
END;
$$;

-- Cancels BLOCKED steps whose after_success prerequisite did not succeed
-- (`workflow.dependency_unsatisfied`). The caller counts them as failed prerequisites of their
-- own dependents.
CREATE FUNCTION runledger.workflow_cancel_unsatisfied(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;
    UPDATE runledger.workflow_steps
    SET status = 'CANCELED',
        status_reason = 'workflow.dependency_unsatisfied',
        last_error_code = 'workflow.dependency_unsatisfied',
        last_error_message = 'a prerequisite required to succeed did not succeed',
        finished_at = now(),
        updated_at = now()
    WHERE id = ANY(p_steps);
END;
$$;

-- Recomputes a run's status: RUNNING while a step is active (the run's `active_steps` count;
-- when that reads zero, the run's steps are read once), else WAITING_FOR_EXTERNAL while a gate
-- is open, else RUNNING while a step is still blocked, else COMPLETED_WITH_ERRORS when a step
-- failed or was canceled, else SUCCEEDED, copying the result step's output to the run. A canceled run stays canceled. A run
-- that becomes terminal notifies `runledger_workflow_runs` (payload: the run id), so result
-- waiters wake at once. Returns the status.
CREATE FUNCTION runledger.workflow_refresh_run(p_run uuid) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_active boolean;
    v_waiting boolean := false;
    v_blocked boolean := false;
    v_failed boolean := false;
    v_status text;
BEGIN
    SELECT coalesce(w.active_steps > 0, false) INTO v_active
    FROM runledger.workflow_runs w
    WHERE w.id = p_run;
    IF NOT coalesce(v_active, false) THEN
        -- No step counted active: the run's steps decide, read once.
        SELECT coalesce(bool_or(status IN ('ENQUEUED', 'RUNNING')), false),
               coalesce(bool_or(status = 'WAITING_FOR_EXTERNAL'), false),
               coalesce(bool_or(status = 'BLOCKED'), false),
               coalesce(bool_or(status IN ('FAILED', 'CANCELED')), false)
        INTO v_active, v_waiting, v_blocked, v_failed
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

    IF FOUND AND v_status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS') THEN
        PERFORM pg_notify('runledger_workflow_runs', p_run::text);
    END IF;
    RETURN v_status;
END;
$$;

-- What a step becomes when it is released: a job step waits for its job, an external step for
-- its completion.
CREATE FUNCTION runledger.workflow_released_status(p_step_kind text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE p_step_kind WHEN 'JOB' THEN 'ENQUEUED' ELSE 'WAITING_FOR_EXTERNAL' END
$$;

-- A step job that is dead-lettered (a failure on its last attempt, the reaper, the claim's
-- refusal of a payload no worker can decode) or canceled finishes its step: FAILED with the
-- job's error, or CANCELED. Successes are finished by runledger.complete_jobs_success itself.
-- A row trigger whose WHEN clause PostgreSQL checks on the row, so that the other updates of
-- the job table (claims, heartbeats, progress, continuations, the successes of plain jobs) run
-- no trigger function at all and keep no transition rows; rows are finished one by one here,
-- on a path taken by failures only. Every writer of a job's status is covered, whatever
-- statement it is.
CREATE FUNCTION runledger.on_step_job_ended() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM runledger.workflow_finish_steps(
        ARRAY[NEW.workflow_step_id],
        ARRAY[CASE NEW.status WHEN 'DEAD_LETTERED' THEN 'FAILED' ELSE 'CANCELED' END],
        ARRAY[NULL::jsonb],
        ARRAY[CASE WHEN NEW.status = 'DEAD_LETTERED' THEN NEW.last_error_code END],
        ARRAY[CASE WHEN NEW.status = 'DEAD_LETTERED' THEN NEW.last_error_message END],
        ARRAY[CASE NEW.status WHEN 'DEAD_LETTERED' THEN 'job.dead_lettered'
                              ELSE 'job.canceled' END]
    );
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_step_job_ended
    AFTER UPDATE OF status ON runledger.job_queue
    FOR EACH ROW
    WHEN (NEW.workflow_step_id IS NOT NULL
          AND NEW.status IN ('DEAD_LETTERED', 'CANCELED')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION runledger.on_step_job_ended();
