-- The enqueue of one job without an idempotency key, as a function of scalar arguments.
--
-- `runledger.enqueue_jobs` takes a batch as arrays: it unnests them, joins the definitions of
-- the batch's types and aggregates each type's queue into its answer. For one job that work is
-- most of the call: a single enqueue on a pooled connection that has been idle a while (the
-- usual case: a pool hands its connections out in turn) took 0.96 ms with
-- `synchronous_commit = off`, against 0.84 ms for this function and 0.64 ms for a bare insert
-- of the same row (pgbench, 20 connections sharing 100 enqueues per second, medians of six
-- alternated runs on the 2-core machine of docs/benchmarks.md). Like the batch function it is
-- planned generically from its first call on a connection.
--
-- The row is the one `runledger.enqueue_jobs` inserts for a single request: unset settings come
-- from the type's enabled definition, and a due job notifies its channel. The answer is the
-- job's queue, or NULL when the type has no enabled definition (then nothing is inserted).

CREATE FUNCTION runledger.enqueue_job(
    p_id uuid,
    p_job_type text,
    p_organization_id uuid,
    p_payload jsonb,
    p_priority integer,
    p_max_attempts integer,
    p_timeout integer,
    p_run_at timestamptz,
    p_created_by uuid,
    p_resource_key text,
    p_trace_context jsonb
) RETURNS text
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queue text;
    v_notified boolean;
BEGIN
    INSERT INTO runledger.job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, created_by_user_id, queue, resource_key, gated, trace_context
    )
    SELECT p_id, d.job_type, p_organization_id, p_payload,
           coalesce(p_priority, d.priority),
           coalesce(p_max_attempts, d.max_attempts),
           coalesce(p_timeout, d.timeout_seconds),
           coalesce(p_run_at, now()),
           p_created_by, d.queue, p_resource_key,
           runledger.job_gated(d.global_concurrency IS NOT NULL, d.queue)
               OR p_resource_key IS NOT NULL,
           p_trace_context
    FROM runledger.job_definitions d
    WHERE d.job_type = p_job_type AND d.is_enabled
    RETURNING queue,
              CASE WHEN next_run_at <= now()
                   THEN pg_notify(runledger.job_wake_channel(gated), job_type) IS NULL END
    INTO v_queue, v_notified;
    RETURN v_queue;
END;
$$;
