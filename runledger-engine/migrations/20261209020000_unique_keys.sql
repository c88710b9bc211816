-- Unique keys: a singleton holds its key while it is queued (pending, never started) or
-- active (pending or leased), a debounced job while it waits, a throttled job for a window;
-- another enqueue with the key returns the holder (or, debounced, replaces its payload).
ALTER TABLE runledger.job_queue
    ADD COLUMN unique_key text,
    ADD COLUMN unique_while text,
    ADD COLUMN unique_until timestamptz,
    ADD CONSTRAINT job_queue_unique_key_valid CHECK (
        (unique_key IS NULL) = (unique_while IS NULL)
        AND (unique_while IS NULL OR unique_while IN ('QUEUED', 'ACTIVE', 'WINDOW'))
        AND (coalesce(unique_while, '') = 'WINDOW') = (unique_until IS NOT NULL)
        AND (unique_key IS NULL OR (btrim(unique_key) <> '' AND char_length(unique_key) <= 255))
    );

-- Singletons: the holder of a unique key, per organization and job type, while the job is in
-- the states its `unique_while` names. Jobs without a key are outside both indexes.
CREATE UNIQUE INDEX job_queue_unique_queued_key
    ON runledger.job_queue (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        unique_key
    )
    WHERE unique_while = 'QUEUED' AND status = 'PENDING' AND attempt = 0;
CREATE UNIQUE INDEX job_queue_unique_active_key
    ON runledger.job_queue (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        unique_key
    )
    WHERE unique_while = 'ACTIVE' AND status IN ('PENDING', 'LEASED');
-- Throttled jobs by key and the end of their window: "the job of this key enqueued less than a
-- window ago" cannot be a unique index (it depends on the time), so an enqueue looks it up here
-- under a lock of the key.
CREATE INDEX job_queue_unique_window_idx
    ON runledger.job_queue (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        unique_key,
        unique_until
    )
    WHERE unique_while = 'WINDOW';

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
