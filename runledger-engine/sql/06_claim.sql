-- The claim: pending, due jobs become LEASED to one worker, in one statement and one round trip
-- (`SELECT * FROM runledger.claim_jobs(...)`), called by `postgres::jobs::lease::claim_on`
-- (`claim_jobs` and `claim_limited_jobs`, the worker's producers and `Worker::run_once`).
--
-- `p_gated` chooses the jobs. Without it: the ungated jobs, through `job_queue_claim_idx`,
-- highest priority first, then oldest run time, then id, `FOR UPDATE SKIP LOCKED`, at most
-- `p_limit`. With it: the jobs under a global concurrency limit (of their queue or job type) or
-- holding an execution resource key, within their limits and never two of one key, under one
-- advisory lock shared by every limited claim; when none of those is due it returns at once
-- without the lock. Jobs of a paused queue stay pending either way, and a job left pending
-- spends no attempt. `p_job_types` and `p_queues` (NULL: any) restrict the claim to what the
-- worker runs.
--
-- Each picked row is leased to `p_worker_id` for `p_lease_seconds` with `attempt + 1` (the
-- lease's fencing token), in id order. The attempt in progress lives on the job row; its
-- `job_attempts` row is written when it ends. The payload is returned as text: a worker
-- decodes each one on its own, so a stored payload no worker can decode fails alone (the
-- runtime dead-letters it) instead of failing the statement, and no row pays for a check on
-- the server. `p_unflushed` lets the claim's transaction commit without waiting for its WAL
-- flush: a lease is the one write a server crash may then lose, which only makes its job
-- claimable again.
--
-- Why PL/pgSQL, and not a statement in Rust:
-- * The planner settings below are the function's own (they apply to the statements inside it
--   and are restored when it returns) and keep the claim on the claim index in order whatever
--   the table's statistics say. A backlog enqueued faster than autovacuum analyzes the table
--   leaves statistics under which a planner free to choose reads every pending row (a
--   sequential or bitmap scan) and sorts them at each claim, and a generic plan that hash-joins
--   writes the picked rows by hashing the whole primary key. A client statement can only get these settings
--   with a transaction and a SET of its own: more round trips.
-- * The limited claim takes its advisory lock before the statement that counts the leased
--   jobs, so that this statement's snapshot sees what the previous holder committed. In a
--   single statement the snapshot is taken before the lock is granted, and two limited claims
--   could both see room for the same last slot.
-- * The statements keep their generic plans for the session, so the claim is planned once per
--   connection, not at each call.
CREATE FUNCTION runledger.claim_jobs(
    p_worker_id text,
    p_limit bigint,
    p_lease_seconds double precision,
    p_job_types text[],
    p_queues text[],
    p_gated boolean,
    p_unflushed boolean
) RETURNS TABLE (
    id uuid, job_type text, queue text, resource_key text, organization_id uuid,
    payload text, priority integer, attempt integer, attempt_number integer,
    max_attempts integer, timeout_seconds integer, lease_expires_at timestamptz,
    due_at timestamptz, leased_at timestamptz, workflow_run_id uuid, workflow_step_id uuid,
    workflow_step_key text, checkpoint jsonb, trace_context jsonb
)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_paused text[];
BEGIN
    IF p_limit <= 0 THEN
        RETURN;
    END IF;
    v_paused := ARRAY(SELECT c.name FROM runledger.job_queues c WHERE c.is_paused);
    IF NOT p_gated THEN
        v_ids := ARRAY(
            SELECT q.id
            FROM runledger.job_queue q
            WHERE q.status = 'PENDING' AND NOT q.gated AND q.next_run_at <= now()
              AND (p_job_types IS NULL OR q.job_type = ANY (p_job_types))
              AND (p_queues IS NULL OR q.queue = ANY (p_queues))
              AND q.queue <> ALL (v_paused)
            ORDER BY q.priority DESC, q.next_run_at, q.id
            LIMIT p_limit
            FOR UPDATE OF q SKIP LOCKED
        );
    ELSE
        IF NOT EXISTS (
            SELECT 1 FROM runledger.job_queue q
            WHERE q.status = 'PENDING' AND q.gated AND q.next_run_at <= now()
              AND (p_job_types IS NULL OR q.job_type = ANY (p_job_types))
              AND (p_queues IS NULL OR q.queue = ANY (p_queues))
        ) THEN
            RETURN;
        END IF;
        -- The limited claims' lock: the ASCII bytes of "runlgate".
        PERFORM pg_advisory_xact_lock(8247619704468894821);
        v_ids := ARRAY(
            WITH running AS (
                SELECT r.queue, r.job_type FROM runledger.job_queue r WHERE r.status = 'LEASED'
            ),
            queue_room AS (
                SELECT c.name,
                       c.global_concurrency
                           - (SELECT count(*) FROM running r WHERE r.queue = c.name) AS room
                FROM runledger.job_queues c
                WHERE c.global_concurrency IS NOT NULL
            ),
            type_room AS (
                SELECT d.job_type,
                       d.global_concurrency
                           - (SELECT count(*) FROM running r WHERE r.job_type = d.job_type) AS room
                FROM runledger.job_definitions d
                WHERE d.global_concurrency IS NOT NULL
            ),
            candidates AS (
                SELECT q.id, q.queue, q.job_type, q.resource_key, q.priority, q.next_run_at
                FROM runledger.job_queue q
                WHERE q.status = 'PENDING' AND q.gated AND q.next_run_at <= now()
                  AND (p_job_types IS NULL OR q.job_type = ANY (p_job_types))
                  AND (p_queues IS NULL OR q.queue = ANY (p_queues))
                  AND q.queue <> ALL (v_paused)
                  AND NOT EXISTS (
                      SELECT 1 FROM queue_room r WHERE r.name = q.queue AND r.room <= 0
                  )
                  AND NOT EXISTS (
                      SELECT 1 FROM type_room r WHERE r.job_type = q.job_type AND r.room <= 0
                  )
                  AND (q.resource_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM runledger.job_queue holder
                      WHERE holder.resource_key = q.resource_key AND holder.status = 'LEASED'
                  ))
                ORDER BY q.priority DESC, q.next_run_at, q.id
                LIMIT p_limit * 4
                FOR UPDATE OF q SKIP LOCKED
            ),
            ranked AS (
                SELECT c.id, c.priority, c.next_run_at, c.resource_key,
                       qr.room AS queue_room, tr.room AS type_room,
                       row_number() OVER (PARTITION BY c.queue
                                          ORDER BY c.priority DESC, c.next_run_at, c.id) AS in_queue,
                       row_number() OVER (PARTITION BY c.job_type
                                          ORDER BY c.priority DESC, c.next_run_at, c.id) AS in_type,
                       row_number() OVER (PARTITION BY c.resource_key
                                          ORDER BY c.priority DESC, c.next_run_at, c.id) AS in_resource
                FROM candidates c
                LEFT JOIN queue_room qr ON qr.name = c.queue
                LEFT JOIN type_room tr ON tr.job_type = c.job_type
            )
            SELECT r.id
            FROM ranked r
            WHERE (r.queue_room IS NULL OR r.in_queue <= r.queue_room)
              AND (r.type_room IS NULL OR r.in_type <= r.type_room)
              AND (r.resource_key IS NULL OR r.in_resource = 1)
            ORDER BY r.priority DESC, r.next_run_at, r.id
            LIMIT p_limit
        );
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    IF p_unflushed THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET status = 'LEASED',
        attempt = q.attempt + 1,
        worker_id = p_worker_id,
        lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        leased_at = now(),
        started_at = NULL,
        updated_at = now()
    WHERE q.id = ANY (v_ids)
    RETURNING q.id, q.job_type, q.queue, q.resource_key, q.organization_id, q.payload::text,
              q.priority, q.attempt, q.attempt - q.attempt_floor, q.max_attempts,
              q.timeout_seconds, q.lease_expires_at, q.next_run_at, q.leased_at,
              q.workflow_run_id, q.workflow_step_id, q.workflow_step_key, q.checkpoint,
              q.trace_context;
END;
$$;
