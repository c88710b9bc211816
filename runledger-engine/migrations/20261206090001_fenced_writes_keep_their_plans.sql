-- The lease-fenced batch writes (a batch of successes, the heartbeat of running jobs, the mark
-- of long runners) as functions with the claim's planner settings (20261204090001).
--
-- Each joined its array of leases to the job rows and filtered on the lease: worker id,
-- attempt, unexpired lease. A prepared statement's first five executions on a connection are
-- planned for their parameters, and with the statistics a backlog leaves (analyzed while every
-- job was pending, so no row has a worker id) the planner took the lease filter to match one
-- row: it read the whole table and joined it against every lease of the batch. On 20,000
-- pending jobs a batch of 200 successes took 13 ms instead of 1.6, and in a burn-down most
-- batches are among the first five of their connection: that was half of the server's time per
-- job. Inside these functions the plan is generic and reads each lease's row by its key.

CREATE FUNCTION runledger.complete_jobs_success(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_outputs jsonb[], p_progress jsonb[]
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET status = 'SUCCEEDED',
        output = s.output,
        progress = coalesce(s.progress, q.progress),
        started_at = coalesce(q.started_at, q.leased_at),
        lease_expires_at = NULL,
        finished_at = now(),
        updated_at = now()
    FROM unnest(p_ids, p_attempts, p_outputs, p_progress) AS s(id, attempt, output, progress)
    WHERE q.id = s.id AND q.attempt = s.attempt AND q.worker_id = p_worker_id
      AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
    RETURNING q.id;
END;
$$;

CREATE FUNCTION runledger.mark_jobs_running(
    p_worker_id text, p_ids uuid[], p_attempts integer[]
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET started_at = coalesce(q.started_at, now())
    FROM unnest(p_ids, p_attempts) AS m(id, attempt)
    WHERE q.id = m.id AND q.attempt = m.attempt AND q.worker_id = p_worker_id
      AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
    RETURNING q.id;
END;
$$;

CREATE FUNCTION runledger.heartbeat_jobs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_lease_seconds double precision
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET lease_expires_at = now() + make_interval(secs => p_lease_seconds)
    FROM unnest(p_ids, p_attempts) AS h(id, attempt)
    WHERE q.id = h.id AND q.attempt = h.attempt AND q.worker_id = p_worker_id
      AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
    RETURNING q.id;
END;
$$;
