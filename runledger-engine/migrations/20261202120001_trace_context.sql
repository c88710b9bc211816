-- The trace context of the span that enqueued a job (propagation fields such as W3C
-- `traceparent`, as a JSON object of strings), so that the handler's span continues the
-- enqueuer's trace. Set only when a trace propagator is installed and the enqueue ran inside
-- a traced span; NULL otherwise, which costs an enqueue nothing. A nullable column without a
-- default: adding it rewrites nothing.
ALTER TABLE runledger.job_queue ADD COLUMN trace_context jsonb;

-- A workflow run keeps the context of the span that enqueued it, and each step job released
-- for it carries that context, so every step's span continues the enqueuer's trace.
ALTER TABLE runledger.workflow_runs ADD COLUMN trace_context jsonb;

-- As in 20261202110002_resource_keys (queue, resource key and limit flag of the step's job), with
-- the run's trace context copied to the jobs too.
CREATE OR REPLACE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
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
            workflow_run_id, workflow_step_id, workflow_step_key, queue, resource_key, gated,
            trace_context
        )
        SELECT r.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key, d.queue, s.resource_key,
               s.resource_key IS NOT NULL OR runledger.job_is_limited(d.job_type, d.queue),
               w.trace_context
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
