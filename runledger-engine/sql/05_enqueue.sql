-- Enqueue: jobs enter the queue. Each enqueue checks that its type has an enabled definition
-- in the statement that inserts, fills unset settings from the definition, flags the job
-- `gated` as its limits and resource key call for (04_gates.sql), and notifies the job's wake
-- channel when it is due.
--
-- The unkeyed enqueues are functions planned generically from their first call on a
-- connection (`plan_cache_mode = force_generic_plan`). Sent as a prepared statement, the
-- enqueue was planned for its parameters at each of its first five executions on every
-- connection, and an application's pool hands its connections out in turn, so single enqueues
-- paid that planning again and again. A client statement cannot carry that setting without a
-- round trip of its own, which is why these stay functions. The keyed enqueue's insert is the
-- Rust statement of `postgres::jobs::enqueue::enqueue_keyed`; only its lookup of taken keys is
-- here.

-- One job without an idempotency key, from scalar arguments (unnesting arrays and joining the
-- definitions cost a single enqueue more than the insert itself). Returns the job's queue, or
-- NULL when the type has no enabled definition (then nothing is inserted). Called by
-- `postgres::jobs::enqueue::enqueue_one` (an enqueue of one request, on a pool or inside the
-- caller's transaction).
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

-- The job holding a singleton's or a debounced job's unique key: of the organization and type,
-- with the key, in the states its `unique_while` names (QUEUED: pending and never started;
-- ACTIVE: pending or leased). The one statement of what holding a key means besides the
-- unique indexes' predicates (03_tables.sql). Called by runledger.enqueue_unique_job and by
-- `postgres::jobs::admin::requeue` (a requeue must not make a second holder).
CREATE FUNCTION runledger.unique_key_holder(
    p_organization_id uuid, p_job_type text, p_unique_key text, p_unique_while text
) RETURNS TABLE (id uuid, queue text, status text)
LANGUAGE sql STABLE
AS $$
    SELECT q.id, q.queue, q.status
    FROM runledger.job_queue q
    WHERE coalesce(q.organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
              = coalesce(p_organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
      AND q.job_type = p_job_type AND q.unique_key = p_unique_key
      AND q.unique_while = p_unique_while
      AND CASE p_unique_while
              WHEN 'QUEUED' THEN q.status = 'PENDING' AND q.attempt = 0
              WHEN 'ACTIVE' THEN q.status IN ('PENDING', 'LEASED')
              ELSE false
          END
    LIMIT 1
$$;

-- One job with a unique key (and no idempotency key): a singleton, a debounced or a throttled
-- enqueue. Inserts it unless a job of its organization and type holds the key, and returns
-- the job's queue, id and status with what happened (`outcome`); no row when the type has no
-- enabled definition.
--
-- * QUEUED or ACTIVE without a window, a singleton: the holder is a job in those states
--   (pending and never started; pending or leased) and the request is DROPPED for it.
-- * QUEUED with a window, a debounce: the job is due at the end of the window; a holder gets
--   the request's payload and its start pushed to the end of a new window (REPLACED).
-- * WINDOW, a throttle: the holder is the job enqueued with the key less than a window ago,
--   whatever its state, and the request is DROPPED for it. Throttled enqueues of one key take
--   a transaction-scoped advisory lock, since no index can say "less than a window ago".
--
-- A singleton holder that finished between the insert and the lookup frees its key, and a
-- debounce holder claimed before its update is no longer waiting: the insert is tried again.
-- Refuses to run in REPEATABLE READ or SERIALIZABLE, where the lookup would not see a holder
-- committed after the transaction's snapshot (`refused_level`). Called by
-- `postgres::jobs::enqueue::enqueue_unique`.
--
-- PL/pgSQL: the insert, the lookup, the update and the retry read what each other wrote, in
-- one round trip.
CREATE FUNCTION runledger.enqueue_unique_job(
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
    p_trace_context jsonb,
    p_unique_key text,
    p_unique_while text,
    p_window interval
) RETURNS TABLE (queue text, id uuid, status text, outcome text, refused_level text)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_queue text;
    v_id uuid;
    v_status text;
    v_notified boolean;
    v_run_at timestamptz := p_run_at;
    v_tries integer := 0;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN QUERY SELECT NULL::text, NULL::uuid, NULL::text, NULL::text,
                            current_setting('transaction_isolation');
        RETURN;
    END IF;
    IF p_window IS NOT NULL AND p_unique_while = 'QUEUED' THEN
        v_run_at := now() + p_window;
    END IF;
    IF p_unique_while = 'WINDOW' THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            concat_ws('/', p_organization_id, p_job_type, p_unique_key), 0));
        SELECT q.queue, q.id, q.status INTO v_queue, v_id, v_status
        FROM runledger.job_queue q
        WHERE coalesce(q.organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
                  = coalesce(p_organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
          AND q.job_type = p_job_type AND q.unique_key = p_unique_key
          AND q.unique_while = 'WINDOW' AND q.unique_until > now()
        ORDER BY q.unique_until DESC
        LIMIT 1;
        IF FOUND THEN
            RETURN QUERY SELECT v_queue, v_id, v_status, 'DROPPED'::text, NULL::text;
            RETURN;
        END IF;
    END IF;
    LOOP
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            next_run_at, created_by_user_id, queue, resource_key, gated, trace_context,
            unique_key, unique_while, unique_until
        )
        SELECT p_id, d.job_type, p_organization_id, p_payload,
               coalesce(p_priority, d.priority),
               coalesce(p_max_attempts, d.max_attempts),
               coalesce(p_timeout, d.timeout_seconds),
               coalesce(v_run_at, now()),
               p_created_by, d.queue, p_resource_key,
               runledger.job_gated(d.global_concurrency IS NOT NULL, d.queue)
                   OR p_resource_key IS NOT NULL,
               p_trace_context, p_unique_key, p_unique_while,
               CASE WHEN p_unique_while = 'WINDOW' THEN now() + p_window END
        FROM runledger.job_definitions d
        WHERE d.job_type = p_job_type AND d.is_enabled
        ON CONFLICT DO NOTHING
        RETURNING queue,
                  CASE WHEN next_run_at <= now()
                       THEN pg_notify(runledger.job_wake_channel(gated), job_type) IS NULL END
        INTO v_queue, v_notified;
        IF FOUND THEN
            RETURN QUERY SELECT v_queue, p_id, 'PENDING'::text, 'INSERTED'::text, NULL::text;
            RETURN;
        END IF;
        IF NOT EXISTS (
            SELECT 1 FROM runledger.job_definitions d
            WHERE d.job_type = p_job_type AND d.is_enabled
        ) THEN
            RETURN;
        END IF;
        SELECT h.queue, h.id, h.status INTO v_queue, v_id, v_status
        FROM runledger.unique_key_holder(p_organization_id, p_job_type, p_unique_key,
                                         p_unique_while) AS h;
        IF FOUND AND p_window IS NOT NULL THEN
            -- A debounce: the waiting holder takes the payload and a new window, unless a
            -- claim took it meanwhile (then the key is free: the insert is tried again).
            UPDATE runledger.job_queue q
            SET payload = p_payload, next_run_at = v_run_at, updated_at = now()
            WHERE q.id = v_id AND q.status = 'PENDING' AND q.attempt = 0;
            IF FOUND THEN
                RETURN QUERY SELECT v_queue, v_id, 'PENDING'::text, 'REPLACED'::text, NULL::text;
                RETURN;
            END IF;
        ELSIF FOUND THEN
            RETURN QUERY SELECT v_queue, v_id, v_status, 'DROPPED'::text, NULL::text;
            RETURN;
        END IF;
        v_tries := v_tries + 1;
        IF v_tries >= 100 THEN
            RAISE EXCEPTION 'unique key % of % changed hands 100 times during one enqueue',
                p_unique_key, p_job_type;
        END IF;
    END LOOP;
END;
$$;

-- Many jobs of one type without idempotency keys, the type's definition read once into
-- variables instead of joined to every row (a join over a batch of any types cost more server
-- time than this; the client sends a batch of several types as one call per type in one
-- transaction: `postgres::jobs::enqueue::enqueue_of_type`). The due rows notify the type's
-- channel once (the gated jobs' channel for a limited type or a row holding a resource key).
-- Returns the type's queue, or NULL when the type has no enabled definition (then nothing is
-- inserted). NULL arrays stand for columns no request sets.
--
-- PL/pgSQL: the definition is read once into variables and the notification depends on
-- whether any row holds a run time or a key, all in the one call.
CREATE FUNCTION runledger.enqueue_jobs_of_type(
    p_job_type text,
    p_ids uuid[],
    p_organization_ids uuid[],
    p_payloads jsonb[],
    p_priorities integer[],
    p_max_attempts integer[],
    p_timeouts integer[],
    p_run_ats timestamptz[],
    p_created_by uuid[],
    p_resource_keys text[],
    p_trace_context jsonb
) RETURNS text
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_priority integer;
    v_max_attempts integer;
    v_timeout integer;
    v_queue text;
    v_gated boolean;
BEGIN
    SELECT d.priority, d.max_attempts, d.timeout_seconds, d.queue,
           runledger.job_gated(d.global_concurrency IS NOT NULL, d.queue)
    INTO v_priority, v_max_attempts, v_timeout, v_queue, v_gated
    FROM runledger.job_definitions d
    WHERE d.job_type = p_job_type AND d.is_enabled;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO runledger.job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, created_by_user_id, queue, resource_key, gated, trace_context
    )
    SELECT i.id, p_job_type, i.organization_id, i.payload,
           coalesce(i.priority, v_priority),
           coalesce(i.max_attempts, v_max_attempts),
           coalesce(i.timeout_seconds, v_timeout),
           coalesce(i.run_at, now()),
           i.created_by_user_id, v_queue, i.resource_key,
           v_gated OR i.resource_key IS NOT NULL, p_trace_context
    FROM unnest(
        p_ids, p_organization_ids, p_payloads, p_priorities, p_max_attempts, p_timeouts,
        p_run_ats, p_created_by, p_resource_keys
    ) AS i(id, organization_id, payload, priority, max_attempts, timeout_seconds, run_at,
           created_by_user_id, resource_key);
    IF p_run_ats IS NULL AND p_resource_keys IS NULL THEN
        -- Every row is due now and gated as its type is.
        PERFORM pg_notify(runledger.job_wake_channel(v_gated), p_job_type);
    ELSE
        -- A NULL array unnests as NULLs beside the other one: due now, or holding no key.
        PERFORM pg_notify(runledger.job_wake_channel(w.gated), p_job_type)
        FROM (
            SELECT DISTINCT v_gated OR u.resource_key IS NOT NULL AS gated
            FROM unnest(p_run_ats, p_resource_keys) AS u(run_at, resource_key)
            WHERE u.run_at IS NULL OR u.run_at <= now()
        ) AS w;
    END IF;
    RETURN v_queue;
END;
$$;

-- The lookup behind a keyed enqueue whose key is taken: for each request (by its position
-- `ord`), the job holding its key and whether that job was enqueued with the same request.
-- Called by `postgres::jobs::enqueue::enqueue_keyed` after its insert skipped taken keys.
--
-- Planned at each call (`force_custom_plan`), with no sequential scan and no hash or merge
-- join, so that each key's job is read through `job_queue_idempotency_key_key` whatever the
-- table's size. Sent as a prepared statement it was planned generically after five
-- executions, and a generic plan made from the statistics of a small job table (a new
-- database, a quiet queue) read and hashed the whole table for each lookup.
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
