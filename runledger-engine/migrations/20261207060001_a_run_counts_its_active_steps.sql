-- A run counts its active steps (ENQUEUED or RUNNING), so that its refresh after a completion
-- batch no longer reads its steps to learn whether one is still active.
--
-- The refresh asked `EXISTS (... WHERE workflow_run_id = $1 AND status IN ('ENQUEUED',
-- 'RUNNING'))`. PostgreSQL planned it as a bitmap scan of every entry of the run in the
-- (run, step key) index, which cannot stop at the first match: each completion batch of a
-- 10,000-step run read the whole run (0.66 to 2.2 ms as the run progressed), so the refreshes
-- of a wide run grew with the square of its width. Replayed on the 2-core machine of
-- docs/benchmarks.md (a 1 -> 10,000 -> 1 run inserted in SQL, its middle steps finished in 67
-- batches of 150, three alternated replays of each version), the batches took 112 to 168 ms in
-- all against 354 to 388. On a 1 -> 1,000 -> 1 run the difference is within the noise (seven
-- batches in 12 to 22 ms with the count, 13 to 21 without, eight alternated pairs): the run's
-- row takes one more write per batch where the probe read about a thousand index entries.
--
-- The count is kept where steps become active and where they stop being so:
-- * `runledger.workflow_insert_step_jobs`, the one place where a step becomes a job row, adds
--   the job steps it is given (just marked ENQUEUED) to their runs;
-- * `runledger.workflow_finish_steps`, under the runs' locks, takes away the steps it finished
--   that had been released: a step's `job_id` is set by the update that releases it and a
--   finished step is never released again, so a step it finishes with a job id was active.
-- A run's cancellation leaves the count as it was: nothing refreshes a canceled run.
-- Should the count ever read zero or less while a step is active (a release whose call began
-- before this migration adds nothing), the refresh finds that step in the reading of the
-- run's steps it does then anyway, and the run stays RUNNING.
--
-- `runledger.workflow_release_dependents` is renamed `runledger.workflow_count_down_dependents`
-- (`ALTER FUNCTION ... RENAME`: the body stays). A call of `runledger.workflow_finish_steps`
-- that began before this migration keeps the body it began with, which takes nothing from the
-- count; if it has updated its steps and waits for its run's row meanwhile, it now fails at the
-- old name and nothing of it is kept, instead of leaving its steps counted as active, which
-- would keep their run RUNNING for good. The worker writes a refused batch of successes again
-- one row at a time, through the new body; a failure it could not write is taken back by the
-- reaper when its lease ends.

ALTER TABLE runledger.workflow_runs ADD COLUMN active_steps integer NOT NULL DEFAULT 0;

-- Only a run that has not ended can have an active step: the others keep 0, and their steps
-- are not read.
UPDATE runledger.workflow_runs w
SET active_steps = (
    SELECT count(*)
    FROM runledger.workflow_steps s
    WHERE s.workflow_run_id = w.id AND s.status IN ('ENQUEUED', 'RUNNING')
)
WHERE w.status IN ('RUNNING', 'WAITING_FOR_EXTERNAL');

COMMENT ON COLUMN runledger.workflow_runs.active_steps IS
    'Steps of the run that are ENQUEUED or RUNNING, while the run is not canceled.';

CREATE OR REPLACE FUNCTION runledger.workflow_refresh_run(p_run uuid) RETURNS text
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

-- Counts the job steps it makes jobs of as active in their runs.
CREATE OR REPLACE FUNCTION runledger.workflow_insert_step_jobs(p_steps runledger.workflow_steps[])
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
        SELECT w.id, w.organization_id, w.trace_context
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
            trace_context
        )
        SELECT s.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key, d.queue, s.resource_key,
               s.resource_key IS NOT NULL OR d.limited,
               w.trace_context
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

-- Takes the released steps it finishes away from their runs' counts of active steps, under the
-- runs' locks, before the release and the refresh that read those counts.
CREATE OR REPLACE FUNCTION runledger.workflow_finish_steps(
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

-- The countdown keeps its body under its new name.
ALTER FUNCTION runledger.workflow_release_dependents(uuid[], uuid[])
    RENAME TO workflow_count_down_dependents;

-- Appended steps settle as before, through the renamed countdown.
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

