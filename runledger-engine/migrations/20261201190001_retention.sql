-- Retention: finished jobs and workflow runs are deleted by the pruner once older than their
-- retention.

-- A definition's own retention of its finished jobs, whatever their end (NULL: the process's
-- defaults per status, JOBS_RETAIN_*).
ALTER TABLE runledger.job_definitions
    ADD COLUMN retention_seconds integer,
    ADD CONSTRAINT job_definitions_retention_positive CHECK (retention_seconds IS NULL OR retention_seconds > 0);

-- The smallest UUIDv7 of the millisecond `at`: every id generated at or after `at` sorts at or
-- above it. Ids are UUIDv7, so `id < runledger.uuidv7_floor(t)` bounds a scan to rows created
-- before `t` through any index that leads with (or ends in) the id.
CREATE FUNCTION runledger.uuidv7_floor(at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT encode(
        substring(int8send(floor(extract(epoch FROM at) * 1000)::bigint) FROM 3)
            || '\x00000000000000000000'::bytea,
        'hex'
    )::uuid
$$;

-- Deleting a workflow run cascades to its steps, and each deleted step to the job rows that
-- point at it; deleting a run also cascades to its edges by run. These lookups need an index
-- each, or every pruned run would scan both tables. Only workflow step jobs enter the first
-- (direct jobs pay nothing), and the second only grows with workflow enqueues.
CREATE INDEX job_queue_workflow_step_idx
    ON runledger.job_queue (workflow_step_id) WHERE workflow_step_id IS NOT NULL;
CREATE INDEX workflow_step_dependencies_run_idx
    ON runledger.workflow_step_dependencies (workflow_run_id);

-- Direct jobs whose retention has passed, up to `p_limit` (NULL: all), oldest first per type.
-- A definition's own retention applies to every finished status of its type; otherwise the
-- status's default (in seconds) does. Each type's scan reads the type index only below the id
-- of its earliest cutoff, so its cost follows what is prunable, not the history kept. Workflow
-- step jobs are left to their run.
CREATE FUNCTION runledger.prunable_jobs(
    p_succeeded_seconds double precision,
    p_dead_lettered_seconds double precision,
    p_canceled_seconds double precision,
    p_limit bigint
)
RETURNS TABLE (id uuid, status text)
LANGUAGE sql STABLE
AS $$
    SELECT picked.id, picked.status
    FROM runledger.job_definitions d
    CROSS JOIN LATERAL (
        SELECT q.id, q.status
        FROM runledger.job_queue q
        WHERE q.job_type = d.job_type
          AND q.id < runledger.uuidv7_floor(now() - make_interval(secs => coalesce(
                d.retention_seconds,
                least(p_succeeded_seconds, p_dead_lettered_seconds, p_canceled_seconds))))
          AND q.workflow_run_id IS NULL
          AND q.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
          AND q.finished_at < now() - make_interval(secs => coalesce(
                d.retention_seconds,
                CASE q.status
                    WHEN 'SUCCEEDED' THEN p_succeeded_seconds
                    WHEN 'DEAD_LETTERED' THEN p_dead_lettered_seconds
                    ELSE p_canceled_seconds
                END))
        ORDER BY q.id
        LIMIT p_limit
    ) picked
    LIMIT p_limit
$$;

-- Finished workflow runs whose retention has passed (succeeded runs keep the succeeded
-- retention, runs completed with errors the dead-lettered one, canceled runs the canceled one),
-- up to `p_limit` (NULL: all). A run with a job still pending or leased is never prunable.
CREATE FUNCTION runledger.prunable_workflow_runs(
    p_succeeded_seconds double precision,
    p_dead_lettered_seconds double precision,
    p_canceled_seconds double precision,
    p_limit bigint
)
RETURNS TABLE (id uuid, status text)
LANGUAGE sql STABLE
AS $$
    SELECT w.id, w.status
    FROM runledger.workflow_runs w
    WHERE w.status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
      AND w.id < runledger.uuidv7_floor(now() - make_interval(
            secs => least(p_succeeded_seconds, p_dead_lettered_seconds, p_canceled_seconds)))
      AND w.finished_at < now() - make_interval(secs => CASE w.status
            WHEN 'SUCCEEDED' THEN p_succeeded_seconds
            WHEN 'COMPLETED_WITH_ERRORS' THEN p_dead_lettered_seconds
            ELSE p_canceled_seconds
        END)
      AND NOT EXISTS (
          SELECT 1 FROM runledger.job_queue q
          WHERE q.workflow_run_id = w.id AND q.status IN ('PENDING', 'LEASED')
      )
    LIMIT p_limit
$$;
