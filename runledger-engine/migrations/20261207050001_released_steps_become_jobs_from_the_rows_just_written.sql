-- The jobs of released steps are inserted from the step rows the release has just written,
-- handed over as they came out of its UPDATE, instead of being read again by their ids.
--
-- `runledger.workflow_insert_step_jobs` took the released steps' ids and read each of those
-- rows again through the primary key, right after the UPDATE that released them had written
-- them. It now takes the rows themselves (`RETURNING` the whole row). Replayed on the 2-core
-- machine of docs/benchmarks.md (20 runs of a 1 -> 1,000 -> 1 fan-out, three alternated
-- replays of each version), the statement that finishes the first step and releases its 1,000
-- dependents took 13.9 to 14.4 ms at the median instead of 14.7 to 15.1.

-- Inserts the jobs of job steps that were just marked ENQUEUED (the rows as the release wrote
-- them, their job's id set) and wakes the workers of their types, on the channel of each job.
-- The one place where a step becomes a job row. The jobs take their run's settings from the
-- runs of those steps only.
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
        SELECT w.id, w.organization_id, w.trace_context
        FROM runledger.workflow_runs w
        WHERE w.id = ANY (ARRAY(SELECT DISTINCT workflow_run_id FROM steps))
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

CREATE OR REPLACE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_jobs runledger.workflow_steps[];
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
    SELECT array_agg(step) FILTER (WHERE (step).step_kind = 'JOB') INTO v_jobs FROM released;

    PERFORM runledger.workflow_insert_step_jobs(v_jobs);
END;
$$;

CREATE OR REPLACE FUNCTION runledger.workflow_release_dependents(p_finished uuid[], p_failed uuid[])
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
                                             AND (step).deps_unsatisfied > 0)
        INTO v_jobs, v_doomed
        FROM counted;

        PERFORM runledger.workflow_insert_step_jobs(v_jobs);
        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
        -- Canceled steps finished without succeeding: their dependents count them as failed.
        v_frontier := v_doomed;
        v_failed := coalesce(v_doomed, '{}');
    END LOOP;
END;
$$;

DROP FUNCTION runledger.workflow_insert_step_jobs(uuid[]);
