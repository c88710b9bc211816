-- Handler continuation. A handler may end an attempt by asking to run again (now or after a
-- delay) instead of finishing: the attempt closes as a success, and the same job row starts its
-- next run (run_number + 1, a fresh attempt budget) carrying the last committed checkpoint.

-- The last checkpoint a continued attempt committed; handed to the next run's handler.
ALTER TABLE runledger.job_queue ADD COLUMN checkpoint jsonb;

-- Workflow steps opt in one by one: a step job may continue only when its step allows it.
ALTER TABLE runledger.workflow_steps
    ADD COLUMN continuation_allowed boolean NOT NULL DEFAULT false;

ALTER TABLE runledger.job_events DROP CONSTRAINT job_events_type_valid;
ALTER TABLE runledger.job_events ADD CONSTRAINT job_events_type_valid CHECK (
    event_type IN (
        'RETRY_SCHEDULED', 'DEAD_LETTERED', 'CANCELED', 'REQUEUED', 'LEASE_EXPIRED', 'CONTINUED'
    )
);

-- Metrics count continuations of the last 24 hours; only continuation events enter this index.
CREATE INDEX job_events_continued_recent_idx
    ON runledger.job_events (created_at)
    WHERE event_type = 'CONTINUED';

DROP VIEW runledger.job_metrics_rollup;
DROP FUNCTION runledger.job_metrics(uuid);

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

CREATE VIEW runledger.job_metrics_rollup AS
SELECT * FROM runledger.job_metrics(NULL);
