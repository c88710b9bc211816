-- Run-first claim order: a run may ask for its step jobs to be due from its creation, so that
-- claims finish an older run before they start the steps of a newer one.
ALTER TABLE runledger.workflow_runs ADD COLUMN run_first boolean NOT NULL DEFAULT false;

-- Inserts the jobs of job steps just marked ENQUEUED (the rows as the release's UPDATE returned
-- them, their job's id set), counts them as active in their runs, and wakes the workers of
-- their types on the channel of each job. The one place where a step becomes a job row. The
-- jobs take their run's organization and trace context (from the runs of those steps only) and
-- their definition's defaults; whether a type's jobs are gated is decided once per type. A job
-- is due now, or from its run's creation when the run asked for `run_first` claim order.
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
