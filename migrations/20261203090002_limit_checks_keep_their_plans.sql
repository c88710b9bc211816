-- Whether a job is under a global limit is read for every job that enters the queue (one call
-- per enqueue statement, one per released workflow step). As SQL functions with a subquery,
-- which PostgreSQL cannot inline, each call planned its query anew: about 0.17 ms, a third of
-- a single job's enqueue, and 170 ms for a workflow step releasing 1,000 steps. In PL/pgSQL
-- the queries keep their plans for the session. Same rules as in 20261202110001.
CREATE OR REPLACE FUNCTION runledger.job_gated(p_type_limited boolean, p_queue text) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN p_type_limited OR EXISTS (
        SELECT 1 FROM runledger.job_queues
        WHERE name = p_queue AND global_concurrency IS NOT NULL
    );
END;
$$;

CREATE OR REPLACE FUNCTION runledger.job_is_limited(p_job_type text, p_queue text) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN runledger.job_gated(EXISTS (
        SELECT 1 FROM runledger.job_definitions
        WHERE job_type = p_job_type AND global_concurrency IS NOT NULL
    ), p_queue);
END;
$$;
