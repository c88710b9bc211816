-- Admin reads for operator surfaces (the TUI, service dashboards).
--
-- The indexes below keep every admin read proportional to what it shows rather than to the
-- size of the job history. Each one is partial, so the hot path (enqueue, claim, succeed) pays
-- for at most one of them: a success appends one entry at the right edge of
-- `job_queue_succeeded_recent_idx`.

-- Successes by finish time, for "succeeded in the last 24 h" and duration percentiles.
CREATE INDEX job_queue_succeeded_recent_idx
    ON runledger.job_queue (finished_at)
    INCLUDE (job_type, leased_at, started_at)
    WHERE status = 'SUCCEEDED';

-- Organization-scoped job lists; jobs without an organization cost nothing.
CREATE INDEX job_queue_organization_idx
    ON runledger.job_queue (organization_id, id)
    WHERE organization_id IS NOT NULL;

-- Search by failure code; only failed jobs carry one.
CREATE INDEX job_queue_last_error_code_idx
    ON runledger.job_queue (last_error_code, id)
    WHERE last_error_code IS NOT NULL;

-- Dead letters by time, for "dead-lettered in the last 24 h".
CREATE INDEX job_dead_letters_recent_idx
    ON runledger.job_dead_letters (dead_lettered_at)
    INCLUDE (job_type, organization_id);

-- Workflow runs by type (type filter and counts); the status index already serves status.
CREATE INDEX workflow_runs_type_idx ON runledger.workflow_runs (workflow_type, id);

-- Per-type metrics, optionally for one organization. Every part reads an index range:
-- pending and leased rows through the claim and lease-expiry partial indexes (cost grows with
-- the backlog, not the history), successes and dead letters of the last 24 hours through the
-- indexes above. Durations are those of the successful (last) attempt, from lease (or handler
-- start, when reported) to finish.
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
    p95_duration_ms    double precision
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
           s.p95_duration_ms
    FROM runledger.job_definitions d
    LEFT JOIN active a ON a.job_type = d.job_type
    LEFT JOIN succeeded s ON s.job_type = d.job_type
    LEFT JOIN dead x ON x.job_type = d.job_type
$$;

-- The rollup view keeps its name and now shows the global figures of `job_metrics`. The
-- previous definition aggregated the whole history on every read.
DROP VIEW runledger.job_metrics_rollup;
CREATE VIEW runledger.job_metrics_rollup AS
SELECT * FROM runledger.job_metrics(NULL);
