-- The lookup behind a keyed enqueue whose key is taken: the jobs holding the request's keys.
--
-- Sent as a prepared statement, it was planned for its parameters five times on a connection
-- and then generically, and the generic plan made from the statistics of a small job table
-- (a new database, a quiet queue) read every row of the table and hashed it for each lookup:
-- with 20,000 jobs, 20,005 rows read to resolve one key. As a function planned at each call,
-- with no sequential scan and no hash or merge join, the lookup is planned for the table as it
-- is and reads each key's job through the idempotency index.

CREATE FUNCTION runledger.keyed_jobs(
    p_keys text[], p_requests jsonb[], p_organizations uuid[], p_job_types text[]
) RETURNS TABLE (ord bigint, id uuid, status text, same_request boolean)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT k.ord, q.id, q.status, (q.enqueue_request = k.request)
    FROM unnest(p_keys, p_requests, p_organizations, p_job_types)
         WITH ORDINALITY AS k(idempotency_key, request, organization_id, job_type, ord)
    JOIN runledger.job_queue q
      ON coalesce(q.organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
             = coalesce(k.organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
     AND q.job_type = k.job_type
     AND q.idempotency_key = k.idempotency_key;
END;
$$;
