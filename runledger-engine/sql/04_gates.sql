-- Gates and wake-ups: which jobs are `gated` and which channel wakes the workers for a job.
--
-- A queue or a job type may carry a global concurrency limit: at most that many of its jobs are
-- leased at once across all workers. A job under such a limit, or holding an execution resource
-- key, is flagged `gated` when it enters the queue and is claimed by the limited claim only
-- (06_claim.sql), which runs under one advisory lock and counts the leased jobs afresh; every
-- other job is claimed through `job_queue_claim_idx`, which gated jobs never enter, so the
-- limits cost the default claim nothing.

-- Whether a job in `p_queue` is under a global limit, its type's limit being given
-- (`p_type_limited`). Read for every job that enters the queue: by the enqueue functions
-- (05_enqueue.sql), the keyed enqueue (`postgres::jobs::enqueue`), a definition's upsert
-- (`postgres::jobs::definitions`) and the jobs of released workflow steps, once per type.
--
-- PL/pgSQL, not SQL: an SQL function with a subquery is not inlined, so each call planned its
-- query anew (about a third of a single job's enqueue, and 170 ms for a step releasing 1,000
-- steps); in PL/pgSQL the query keeps its plan for the session.
CREATE FUNCTION runledger.job_gated(p_type_limited boolean, p_queue text) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN p_type_limited OR EXISTS (
        SELECT 1 FROM runledger.job_queues
        WHERE name = p_queue AND global_concurrency IS NOT NULL
    );
END;
$$;

-- Whether jobs of `p_job_type` in `p_queue` are under a global limit, the type's limit read from
-- its definition. Read by a requeue (`postgres::jobs::admin`) and by
-- runledger.refresh_job_gates. PL/pgSQL for the reason given at runledger.job_gated.
CREATE FUNCTION runledger.job_is_limited(p_job_type text, p_queue text) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN runledger.job_gated(EXISTS (
        SELECT 1 FROM runledger.job_definitions
        WHERE job_type = p_job_type AND global_concurrency IS NOT NULL
    ), p_queue);
END;
$$;

-- After a limit changed: flags again the pending jobs of a queue or of some job types, so that
-- each is claimed by the claim its limits call for. Called by a catalog sync whose definitions
-- changed their limits (`postgres::jobs::definitions::sync_job_definitions`).
CREATE FUNCTION runledger.refresh_job_gates(p_queue text, p_job_types text[])
RETURNS void
LANGUAGE sql
AS $$
    UPDATE runledger.job_queue q
    SET gated = q.resource_key IS NOT NULL OR runledger.job_is_limited(q.job_type, q.queue)
    WHERE q.status = 'PENDING'
      AND (q.queue = p_queue OR q.job_type = ANY(p_job_types))
      AND q.gated IS DISTINCT FROM (
          q.resource_key IS NOT NULL OR runledger.job_is_limited(q.job_type, q.queue)
      )
$$;

-- The channel that wakes workers for a job: gated jobs have their own, listened to only by the
-- workers' loops for such jobs, so a plain job never costs those loops an empty claim. Every
-- statement that makes a job due notifies its channel with the job type as payload (the
-- enqueues, a continuation due at once, a requeue, a released step's job); PostgreSQL folds
-- identical notifications of one transaction into one and delivers them at commit.
CREATE FUNCTION runledger.job_wake_channel(p_gated boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_gated THEN 'runledger_gated_jobs' ELSE 'runledger_job_queue' END
$$;
