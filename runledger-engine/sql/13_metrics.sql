-- Metrics: per-type figures for operators and dashboards, and the queue depth gauge.
--
-- Every figure reads an index range: the backlog through the claim and lease-expiry partial
-- indexes, the last day's successes, dead letters, panics and continuations through their
-- finish-time indexes (03_tables.sql). Its cost grows with the backlog and the last day's
-- volume, never with the job history.

-- Per-type metrics for every job definition, for one organization's jobs when
-- `p_organization_id` is given: the backlog (pending, ready, the oldest ready, leased, leases
-- past their expiry), and over the last 24 hours the successes with the p50 and p95 duration of
-- the successful attempt (from lease, or handler start when reported, to finish), dead letters,
-- panics and continuations. Read by `postgres::jobs::metrics::get_job_metrics` and by the view
-- below.
CREATE FUNCTION runledger.job_metrics(p_organization_id uuid)
RETURNS TABLE (
    job_type           text,
    is_enabled         boolean,
    pending            bigint,
    pending_ready      bigint,
    oldest_ready_at    timestamptz,
    leased             bigint,
    stale_leases       bigint,
    succeeded_24h      bigint,
    dead_lettered_24h  bigint,
    p50_duration_ms    double precision,
    p95_duration_ms    double precision,
    panicked_24h       bigint,
    continued_24h      bigint
)
LANGUAGE sql STABLE
AS $$
    WITH active AS (
        SELECT q.job_type,
               count(*) FILTER (WHERE q.status = 'PENDING') AS pending,
               count(*) FILTER (WHERE q.status = 'PENDING' AND q.next_run_at <= now()) AS pending_ready,
               min(q.next_run_at) FILTER (WHERE q.status = 'PENDING' AND q.next_run_at <= now()) AS oldest_ready_at,
               count(*) FILTER (WHERE q.status = 'LEASED') AS leased,
               count(*) FILTER (WHERE q.status = 'LEASED' AND q.lease_expires_at <= now()) AS stale_leases
        FROM runledger.job_queue q
        WHERE q.status IN ('PENDING', 'LEASED')
          AND (p_organization_id IS NULL OR q.organization_id = p_organization_id)
        GROUP BY q.job_type
    ),
    succeeded AS (
        SELECT q.job_type,
               count(*) AS succeeded_24h,
               percentile_cont(0.5) WITHIN GROUP (
                   ORDER BY extract(epoch FROM q.finished_at - coalesce(q.started_at, q.leased_at)) * 1000
               ) AS p50_duration_ms,
               percentile_cont(0.95) WITHIN GROUP (
                   ORDER BY extract(epoch FROM q.finished_at - coalesce(q.started_at, q.leased_at)) * 1000
               ) AS p95_duration_ms
        FROM runledger.job_queue q
        WHERE q.status = 'SUCCEEDED'
          AND q.finished_at > now() - interval '24 hours'
          AND (p_organization_id IS NULL OR q.organization_id = p_organization_id)
        GROUP BY q.job_type
    ),
    dead AS (
        SELECT l.job_type, count(*) AS dead_lettered_24h
        FROM runledger.job_dead_letters l
        WHERE l.dead_lettered_at > now() - interval '24 hours'
          AND (p_organization_id IS NULL OR l.organization_id = p_organization_id)
        GROUP BY l.job_type
    ),
    panicked AS (
        SELECT q.job_type, count(*) AS panicked_24h
        FROM runledger.job_attempts t
        JOIN runledger.job_queue q ON q.id = t.job_id
        WHERE t.failure_kind = 'PANICKED'
          AND t.finished_at > now() - interval '24 hours'
          AND (p_organization_id IS NULL OR q.organization_id = p_organization_id)
        GROUP BY q.job_type
    ),
    continued AS (
        SELECT q.job_type, count(*) AS continued_24h
        FROM runledger.job_events e
        JOIN runledger.job_queue q ON q.id = e.job_id
        WHERE e.event_type = 'CONTINUED'
          AND e.created_at > now() - interval '24 hours'
          AND (p_organization_id IS NULL OR q.organization_id = p_organization_id)
        GROUP BY q.job_type
    )
    SELECT d.job_type,
           d.is_enabled,
           coalesce(a.pending, 0),
           coalesce(a.pending_ready, 0),
           a.oldest_ready_at,
           coalesce(a.leased, 0),
           coalesce(a.stale_leases, 0),
           coalesce(s.succeeded_24h, 0),
           coalesce(x.dead_lettered_24h, 0),
           s.p50_duration_ms,
           s.p95_duration_ms,
           coalesce(p.panicked_24h, 0),
           coalesce(c.continued_24h, 0)
    FROM runledger.job_definitions d
    LEFT JOIN active a ON a.job_type = d.job_type
    LEFT JOIN succeeded s ON s.job_type = d.job_type
    LEFT JOIN dead x ON x.job_type = d.job_type
    LEFT JOIN panicked p ON p.job_type = d.job_type
    LEFT JOIN continued c ON c.job_type = d.job_type
$$;

-- The global figures of runledger.job_metrics under the seed's name, for SQL dashboards.
CREATE VIEW runledger.job_metrics_rollup AS
SELECT * FROM runledger.job_metrics(NULL);

-- Intent figures per job type, optionally for one organization: the pending backlog (through
-- the promoter's index) and the last day's outcomes (through the finish-time index). Read by
-- `postgres::jobs::intents::get_job_intent_metrics`.
CREATE FUNCTION runledger.job_intent_metrics(p_organization_id uuid)
RETURNS TABLE (
    job_type          text,
    pending           bigint,
    pending_due       bigint,
    deferred          bigint,
    oldest_pending_at timestamptz,
    promoted_24h      bigint,
    conflicted_24h    bigint
)
LANGUAGE sql STABLE
AS $$
    WITH pending AS (
        SELECT i.job_type,
               count(*) AS pending,
               count(*) FILTER (WHERE i.next_attempt_at <= now()) AS pending_due,
               count(*) FILTER (WHERE i.attempts > 0) AS deferred,
               min(i.created_at) AS oldest_pending_at
        FROM runledger.job_enqueue_intents i
        WHERE i.status = 'PENDING'
          AND (p_organization_id IS NULL OR i.organization_id = p_organization_id)
        GROUP BY i.job_type
    ),
    finished AS (
        SELECT i.job_type,
               count(*) FILTER (WHERE i.status = 'PROMOTED') AS promoted_24h,
               count(*) FILTER (WHERE i.status = 'CONFLICTED') AS conflicted_24h
        FROM runledger.job_enqueue_intents i
        WHERE i.status <> 'PENDING'
          AND i.finished_at > now() - interval '24 hours'
          AND (p_organization_id IS NULL OR i.organization_id = p_organization_id)
        GROUP BY i.job_type
    )
    SELECT coalesce(p.job_type, f.job_type),
           coalesce(p.pending, 0),
           coalesce(p.pending_due, 0),
           coalesce(p.deferred, 0),
           p.oldest_pending_at,
           coalesce(f.promoted_24h, 0),
           coalesce(f.conflicted_24h, 0)
    FROM pending p
    FULL JOIN finished f ON f.job_type = p.job_type
$$;

-- Unfinished jobs by type and queue now: pending and due, pending and due later, leased. Reads
-- the pending and the leased jobs only. Read by `postgres::jobs::metrics::get_queue_depths` and
-- by runledger.sample_queue_depths.
CREATE FUNCTION runledger.count_queue_depths()
RETURNS TABLE (job_type text, queue text, ready bigint, scheduled bigint, running bigint)
LANGUAGE sql STABLE
AS $$
    WITH counted AS (
        SELECT q.job_type, q.queue,
               count(*) FILTER (WHERE q.next_run_at <= now()) AS ready,
               count(*) FILTER (WHERE q.next_run_at > now()) AS scheduled,
               0::bigint AS running
        FROM runledger.job_queue q
        WHERE q.status = 'PENDING'
        GROUP BY q.job_type, q.queue
        UNION ALL
        SELECT q.job_type, q.queue, 0, 0, count(*)
        FROM runledger.job_queue q
        WHERE q.status = 'LEASED'
        GROUP BY q.job_type, q.queue
    )
    SELECT c.job_type, c.queue, sum(c.ready)::bigint, sum(c.scheduled)::bigint,
           sum(c.running)::bigint
    FROM counted c
    GROUP BY c.job_type, c.queue
    ORDER BY c.job_type, c.queue
$$;

-- Whether the stored count is younger than `p_max_age_seconds` (under the statement's snapshot).
-- The age is compared in seconds, so that any maximum, however large, is a valid one.
CREATE FUNCTION runledger.queue_depth_sample_is_fresh(p_max_age_seconds double precision)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT 1 FROM runledger.queue_depth_sample s
        WHERE extract(epoch FROM now() - s.sampled_at) < p_max_age_seconds
    )
$$;

-- The queue depth as every worker process of the database shares it: the stored count when it
-- is younger than `p_max_age_seconds`, else a new count, stored. Only a caller that finds the
-- count old counts again, under an advisory lock it tries without waiting; the others,
-- meanwhile, return the stored count (on a database's first sample, an empty one). The
-- database then counts the backlog once per interval, not once per worker process. Called by
-- `postgres::jobs::metrics::sample_queue_depths` (the Supervisors' queue depth samplers).
--
-- PL/pgSQL: the freshness is checked again under the lock, with a new snapshot (the lock's
-- previous holder may have stored a count since), and the count is stored and read back in the
-- same round trip.
CREATE FUNCTION runledger.sample_queue_depths(p_max_age_seconds double precision)
RETURNS TABLE (job_type text, queue text, ready bigint, scheduled bigint, running bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    -- The samplers' lock: hashtextextended('runledger.queue_depth', 0).
    IF NOT runledger.queue_depth_sample_is_fresh(p_max_age_seconds)
       AND pg_try_advisory_xact_lock(-3894753067662248458) THEN
        -- Looked at again under the lock, with a new snapshot: the lock's previous holder may
        -- have stored a count since.
        IF NOT runledger.queue_depth_sample_is_fresh(p_max_age_seconds) THEN
            INSERT INTO runledger.queue_depth_sample AS s (singleton, sampled_at, depths)
            SELECT true, now(), coalesce(jsonb_agg(to_jsonb(c)), '[]'::jsonb)
            FROM runledger.count_queue_depths() c
            ON CONFLICT (singleton) DO UPDATE
            SET sampled_at = excluded.sampled_at, depths = excluded.depths;
        END IF;
    END IF;
    RETURN QUERY
    SELECT d.job_type, d.queue, d.ready, d.scheduled, d.running
    FROM runledger.queue_depth_sample s
    CROSS JOIN LATERAL jsonb_to_recordset(s.depths)
        AS d(job_type text, queue text, ready bigint, scheduled bigint, running bigint)
    ORDER BY d.job_type, d.queue;
END;
$$;
