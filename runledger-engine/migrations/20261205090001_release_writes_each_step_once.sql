-- Less work on a workflow's critical path. On a 1 -> 1,000 -> 1 run (one client, warm, the
-- engine's statements replayed against the bench's data) the first step's completion, which
-- releases the 1,000 middle steps, went from 31-42 to 25-26 ms, and a completion batch of 125
-- middle steps from 7.0-8.5 to 4.8-6.3 ms (2.5-3 ms without the workflow trigger).
--
-- * A released step is written once. The countdown of a step's prerequisites now marks the step
--   released in the same row update (ENQUEUED with its job's id, or WAITING_FOR_EXTERNAL);
--   before, the release read every step again, inserted the jobs and then updated every step
--   a second time. The jobs are inserted from the marked steps by one function that every
--   release path shares.
-- * A completion batch locks its runs after it has marked its own steps finished, not before:
--   the steps it finishes belong to jobs whose rows it already holds, so nothing else writes
--   them meanwhile, and the batches of one run no longer wait for each other while they write
--   them. Everything that reads other steps (the countdown, the run's status) still happens
--   under the run's lock, so an append of steps or a sibling batch is seen as before.
-- * Settling a new run counts only the prerequisites that existed before it: steps inserted by
--   the same statement are all BLOCKED, so joining them to their edges counted nothing.
--
-- Lock order is unchanged: job rows, the release lock, the run rows (in id order); a step row
-- is written only by the holder of its job row or of its run's row.

-- What a step becomes when it is released: a job step waits for its job, an external step for
-- its completion.
CREATE FUNCTION runledger.workflow_released_status(p_step_kind text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE p_step_kind WHEN 'JOB' THEN 'ENQUEUED' ELSE 'WAITING_FOR_EXTERNAL' END
$$;

-- Inserts the jobs of job steps that were just marked ENQUEUED with their job's id (by
-- runledger.workflow_release_steps or the countdown in runledger.workflow_release_dependents),
-- and wakes the workers of their types. The one place where a step becomes a job row.
CREATE FUNCTION runledger.workflow_insert_step_jobs(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_types text[];
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH steps AS MATERIALIZED (
        SELECT s.id, s.job_id, s.job_type, s.organization_id, s.payload, s.priority,
               s.max_attempts, s.timeout_seconds, s.workflow_run_id, s.step_key, s.resource_key
        FROM runledger.workflow_steps s
        WHERE s.id = ANY(p_steps) AND s.step_kind = 'JOB' AND s.status = 'ENQUEUED'
    ),
    -- Whether a type's jobs are under a global limit is decided once per type.
    definitions AS MATERIALIZED (
        SELECT d.job_type, d.priority, d.max_attempts, d.timeout_seconds, d.queue,
               runledger.job_is_limited(d.job_type, d.queue) AS limited
        FROM runledger.job_definitions d
        WHERE d.job_type IN (SELECT job_type FROM steps)
    ),
    jobs AS (
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            workflow_run_id, workflow_step_id, workflow_step_key, queue, resource_key, gated,
            trace_context
        )
        SELECT s.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key, d.queue, s.resource_key,
               s.resource_key IS NOT NULL OR d.limited,
               w.trace_context
        FROM steps s
        JOIN runledger.workflow_runs w ON w.id = s.workflow_run_id
        JOIN definitions d ON d.job_type = s.job_type
        RETURNING job_type
    )
    SELECT array_agg(DISTINCT job_type) INTO v_types FROM jobs;

    -- A released step's job is due at once.
    PERFORM pg_notify('runledger_job_queue', t.job_type) FROM unnest(v_types) AS t(job_type);
END;
$$;

-- Releases BLOCKED steps, of any runs: job steps become ENQUEUED with a job row, external steps
-- start WAITING_FOR_EXTERNAL. Each step row is written once.
CREATE OR REPLACE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_jobs uuid[];
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH released AS (
        UPDATE runledger.workflow_steps
        SET status = runledger.workflow_released_status(step_kind),
            job_id = CASE step_kind WHEN 'JOB' THEN runledger.uuidv7() END,
            updated_at = now()
        WHERE id = ANY(p_steps) AND status = 'BLOCKED'
        RETURNING id, step_kind
    )
    SELECT array_agg(id) FILTER (WHERE step_kind = 'JOB') INTO v_jobs FROM released;

    PERFORM runledger.workflow_insert_step_jobs(v_jobs);
END;
$$;

-- After the steps in p_finished became terminal: count down their dependents' prerequisites,
-- release in the same row update the dependents that are now free, and cancel (cascading)
-- those whose after_success prerequisite did not succeed. Each dependent's finished and failed
-- prerequisites are counted by one lookup of the edges' primary key (step, prerequisite), so
-- the cost follows the number of edges touched whatever the statistics say.
CREATE OR REPLACE FUNCTION runledger.workflow_release_dependents(p_finished uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_frontier uuid[] := p_finished;
    v_failed uuid[];
    v_dependents uuid[];
    v_jobs uuid[];
    v_doomed uuid[];
BEGIN
    WHILE v_frontier IS NOT NULL AND cardinality(v_frontier) > 0 LOOP
        SELECT array_agg(id) FILTER (WHERE status <> 'SUCCEEDED')
        INTO v_failed
        FROM runledger.workflow_steps
        WHERE id = ANY(v_frontier);

        v_dependents := ARRAY(
            SELECT DISTINCT step_id
            FROM runledger.workflow_step_dependencies
            WHERE depends_on_step_id = ANY(v_frontier)
        );

        WITH counted AS (
            UPDATE runledger.workflow_steps s
            SET (deps_pending, deps_unsatisfied, status, job_id, updated_at) = (
                    SELECT n.pending, n.unsatisfied,
                           CASE WHEN n.pending > 0 OR n.unsatisfied > 0 THEN s.status
                                ELSE runledger.workflow_released_status(s.step_kind) END,
                           CASE WHEN n.pending = 0 AND n.unsatisfied = 0 AND s.step_kind = 'JOB'
                                THEN runledger.uuidv7() ELSE s.job_id END,
                           now()
                    FROM (
                        SELECT s.deps_pending - count(*) AS pending,
                               s.deps_unsatisfied + count(*) FILTER (
                                   WHERE d.condition = 'SUCCESS'
                                     AND d.depends_on_step_id = ANY(v_failed)
                               ) AS unsatisfied
                        FROM runledger.workflow_step_dependencies d
                        WHERE d.step_id = s.id AND d.depends_on_step_id = ANY(v_frontier)
                    ) n
                )
            WHERE s.id = ANY(v_dependents) AND s.status = 'BLOCKED'
            RETURNING s.id, s.status, s.deps_pending, s.deps_unsatisfied
        )
        SELECT array_agg(id) FILTER (WHERE status = 'ENQUEUED'),
               array_agg(id) FILTER (WHERE deps_pending = 0 AND deps_unsatisfied > 0)
        INTO v_jobs, v_doomed
        FROM counted;

        PERFORM runledger.workflow_insert_step_jobs(v_jobs);
        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
        v_frontier := v_doomed;
    END LOOP;
END;
$$;

-- Marks steps terminal (those that are not already) and drives their runs forward; steps of a
-- canceled run are recorded but release nothing. Returns the steps it finished.
CREATE OR REPLACE FUNCTION runledger.workflow_finish_steps(
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
    v_runs uuid[];
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
        WHERE s.id = i.step_id AND s.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')
        RETURNING s.id, s.workflow_run_id
    )
    SELECT array_agg(id), array_agg(DISTINCT workflow_run_id)
    INTO v_finished, v_runs
    FROM finished;
    IF v_finished IS NULL THEN
        RETURN '{}';
    END IF;

    -- From here on the runs' other steps are read: under their rows' locks, taken in id order,
    -- so batches of one run, appends and cancellations see each other's committed work.
    PERFORM 1 FROM runledger.workflow_runs WHERE id = ANY(v_runs) ORDER BY id FOR UPDATE;

    -- After a cancellation nothing is released.
    SELECT array_agg(w.id) INTO v_live_runs
    FROM runledger.workflow_runs w
    WHERE w.id = ANY(v_runs) AND w.status <> 'CANCELED';
    IF v_live_runs IS NOT NULL THEN
        IF cardinality(v_live_runs) = cardinality(v_runs) THEN
            v_live := v_finished;
        ELSE
            SELECT array_agg(s.id) INTO v_live
            FROM runledger.workflow_steps s
            WHERE s.id = ANY(v_finished) AND s.workflow_run_id = ANY(v_live_runs);
        END IF;
        PERFORM runledger.workflow_release_dependents(v_live);
        FOREACH v_run IN ARRAY v_live_runs LOOP
            PERFORM runledger.workflow_refresh_run(v_run);
        END LOOP;
    END IF;
    RETURN v_finished;
END;
$$;

-- Settles steps just inserted into a run (a new run's steps, or appended ones): counts the
-- prerequisites outside them that are already terminal, releases the steps that are free,
-- cancels (with cascade) those whose after_success prerequisite already failed, and refreshes
-- the run. Prerequisites among the new steps are BLOCKED and count for nothing.
CREATE OR REPLACE FUNCTION runledger.workflow_settle_new_steps(p_run uuid, p_steps uuid[])
RETURNS text
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
        WHERE d.step_id = ANY(p_steps) AND NOT d.depends_on_step_id = ANY(p_steps)
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

    PERFORM runledger.workflow_release_steps(v_ready);
    PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
    PERFORM runledger.workflow_release_dependents(v_doomed);
    RETURN runledger.workflow_refresh_run(p_run);
END;
$$;

-- The run-scoped forms of the release functions served only the settling of new steps, which
-- now calls the set-based ones.
DROP FUNCTION runledger.workflow_release_steps(uuid, uuid[]);
DROP FUNCTION runledger.workflow_release_dependents(uuid, uuid[]);
