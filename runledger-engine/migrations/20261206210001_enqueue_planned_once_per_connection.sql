-- The enqueue of jobs without idempotency keys, as a function with one generic plan per
-- connection.
--
-- Sent as a prepared statement, it was planned for its parameters at each of its first five
-- executions on a connection (0.25 to 0.35 ms of planning each on the 2-core machine of
-- docs/benchmarks.md, against 0.18 ms for its execution) before PostgreSQL settled on its
-- generic plan. An application's pool hands its connections out in turn, so a single job's
-- enqueue paid that planning again and again: with 15 idle connections, the first 75 enqueues
-- of a process and every enqueue on a connection the pool had just opened. Planned generically
-- from the first call, the enqueue costs one planning per connection. The statement is the one
-- the client sent: the definitions of the requests' types (one missing or disabled type
-- inserts nothing and is named), one row per request with the type's defaults filled in, and a
-- notification per due job on its channel.

CREATE FUNCTION runledger.enqueue_jobs(
    p_ids uuid[],
    p_job_types text[],
    p_organization_ids uuid[],
    p_payloads jsonb[],
    p_priorities integer[],
    p_max_attempts integer[],
    p_timeouts integer[],
    p_run_ats timestamptz[],
    p_created_by uuid[],
    p_resource_keys text[],
    p_distinct_types text[],
    p_trace_context jsonb
) RETURNS TABLE (missing_type text, types text[], queues text[])
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH definitions AS (
        SELECT d.job_type, d.priority, d.max_attempts, d.timeout_seconds, d.queue,
               runledger.job_gated(d.global_concurrency IS NOT NULL, d.queue) AS gated
        FROM runledger.job_definitions d
        WHERE d.job_type = ANY (p_distinct_types) AND d.is_enabled
    ),
    missing AS (
        SELECT t.job_type
        FROM unnest(p_distinct_types) AS t(job_type)
        WHERE t.job_type NOT IN (SELECT job_type FROM definitions)
        LIMIT 1
    ),
    inserted AS (
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            next_run_at, created_by_user_id, queue, resource_key, gated, trace_context
        )
        SELECT i.id, i.job_type, i.organization_id, i.payload,
               coalesce(i.priority, d.priority),
               coalesce(i.max_attempts, d.max_attempts),
               coalesce(i.timeout_seconds, d.timeout_seconds),
               coalesce(i.run_at, now()),
               i.created_by_user_id, d.queue, i.resource_key,
               d.gated OR i.resource_key IS NOT NULL, p_trace_context
        FROM unnest(
            p_ids, p_job_types, p_organization_ids, p_payloads, p_priorities, p_max_attempts,
            p_timeouts, p_run_ats, p_created_by, p_resource_keys
        ) AS i(id, job_type, organization_id, payload, priority, max_attempts,
               timeout_seconds, run_at, created_by_user_id, resource_key)
        JOIN definitions d ON d.job_type = i.job_type
        WHERE NOT EXISTS (SELECT 1 FROM missing)
        RETURNING CASE WHEN next_run_at <= now()
                       THEN pg_notify(runledger.job_wake_channel(gated), job_type) IS NULL END
    )
    SELECT (SELECT m.job_type FROM missing m),
           coalesce((SELECT array_agg(d.job_type) FROM definitions d), '{}'),
           coalesce((SELECT array_agg(d.queue) FROM definitions d), '{}');
END;
$$;
