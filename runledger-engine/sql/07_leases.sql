-- Lease-fenced writes of a running attempt: the mark that a handler started and the heartbeat
-- that extends leases. Every write from a worker is fenced by (job id, attempt, worker id,
-- lease not expired); a row that fails the fence is left untouched and missing from the answer,
-- which is how the caller learns that the lease is lost (`job.lease_owner_mismatch`).
--
-- These functions exist for their planner settings, the claim's (06_claim.sql): each joins an
-- array of leases to the job rows and filters on the lease. A prepared statement's first five
-- executions on a connection are planned for their parameters, and with the statistics a
-- backlog leaves (analyzed while every job was pending, so no row has a worker id) the planner
-- took the lease filter to match one row and read the whole table for every batch. Inside
-- these functions the plan is generic, reads each lease's row by its key (`id = ANY`, an index
-- condition bounded by the batch whatever the table's size), and joins the bounded rows by
-- hashing, never by a nested loop that compares n x n pairs when the planner takes the wrong
-- side as the outer one. A client statement cannot carry those settings without a round trip
-- of its own.

-- Records that the handlers of these leases started (`started_at`, kept if already set; the
-- job's stage becomes RUNNING). Returns the jobs whose lease still held. Called by
-- `postgres::jobs::lease::mark_jobs_running`: the runtime's mark of handlers that have run a
-- while, and `Worker::run_once` for its whole batch.
CREATE FUNCTION runledger.mark_jobs_running(
    p_worker_id text, p_ids uuid[], p_attempts integer[]
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET started_at = coalesce(q.started_at, now())
    FROM unnest(p_ids, p_attempts) AS m(id, attempt)
    WHERE q.id = ANY (p_ids) AND q.id = m.id AND q.attempt = m.attempt
      AND q.worker_id = p_worker_id
      AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
    RETURNING q.id;
END;
$$;

-- Extends every listed lease of `p_worker_id` by `p_lease_seconds` from now and returns the
-- jobs whose lease was renewed; a job missing from the answer has lost its lease and its
-- handler should stop. Called by `postgres::jobs::lease::heartbeat_jobs`, all the leases of a
-- worker in one statement.
CREATE FUNCTION runledger.heartbeat_jobs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_lease_seconds double precision
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET lease_expires_at = now() + make_interval(secs => p_lease_seconds)
    FROM unnest(p_ids, p_attempts) AS h(id, attempt)
    WHERE q.id = ANY (p_ids) AND q.id = h.id AND q.attempt = h.attempt
      AND q.worker_id = p_worker_id
      AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
    RETURNING q.id;
END;
$$;
