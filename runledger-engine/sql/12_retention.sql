-- Retention: what the pruner may delete, and what deleting a job or a run takes with it.
--
-- The pruner (`postgres::jobs::retention::prune_batch`, one pruner at a time under an advisory
-- lock) deletes finished direct jobs and finished workflow runs once their retention has
-- passed, in bounded batches; `count_prunable` counts the same selection for a dry run. Both
-- read the two functions below, which the planner inlines into their statements.

-- Direct jobs whose retention has passed, up to `p_limit` (NULL: all), oldest first per type.
-- A definition's own retention applies to every finished status of its type; otherwise the
-- status's default (in seconds) does. Each type's scan reads `job_queue_finished_type_idx` only
-- below the id of its earliest cutoff, so its cost follows what is prunable, not the history
-- kept. Workflow step jobs are left to their run.
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
-- up to `p_limit` (NULL: all). A run with a job still pending or leased is never prunable; its
-- jobs are found through its steps.
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
          SELECT 1
          FROM runledger.workflow_steps s
          JOIN runledger.job_queue q ON q.id = s.job_id
          WHERE s.workflow_run_id = w.id AND q.status IN ('PENDING', 'LEASED')
      )
    LIMIT p_limit
$$;

-- What a job's deletion takes with it: its attempts, events, logs, dead letters and replay
-- lineage, which name the job without a foreign key (a key check on every insert of those rows
-- and every update of a job row cost more than it protected: they are written only by the
-- statements about the job they name). One set-based delete per table and deleting statement,
-- through a statement trigger with a transition table; the jobs of a deleted run included.
CREATE FUNCTION runledger.delete_job_rows() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM runledger.job_attempts a USING deleted_jobs d WHERE a.job_id = d.id;
    DELETE FROM runledger.job_events e USING deleted_jobs d WHERE e.job_id = d.id;
    DELETE FROM runledger.job_logs l USING deleted_jobs d WHERE l.job_id = d.id;
    DELETE FROM runledger.job_dead_letters l USING deleted_jobs d WHERE l.job_id = d.id;
    DELETE FROM runledger.job_replays r USING deleted_jobs d
    WHERE r.source_job_id = d.id OR r.replay_job_id = d.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_delete_rows
    AFTER DELETE ON runledger.job_queue
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION runledger.delete_job_rows();

-- What a run's deletion takes with it: its step jobs (found through its steps, by the job
-- table's primary key), its edges and its steps, in that order (the steps last, since the
-- others are found through them). The workflow tables carry no foreign keys (03_tables.sql);
-- the run's mutations go by their own key's ON DELETE CASCADE.
CREATE FUNCTION runledger.delete_workflow_run_rows() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM runledger.job_queue q
    WHERE q.id = ANY (ARRAY(
        SELECT s.job_id
        FROM runledger.workflow_steps s
        JOIN deleted_runs r ON s.workflow_run_id = r.id
    ));
    -- Every edge joins two steps of one run: the edges out of the run's steps are all of them,
    -- found by prerequisite, the leading column of the edges' primary key.
    DELETE FROM runledger.workflow_step_dependencies d
    USING runledger.workflow_steps s, deleted_runs r
    WHERE s.workflow_run_id = r.id AND d.depends_on_step_id = s.id;
    DELETE FROM runledger.workflow_steps s
    USING deleted_runs r
    WHERE s.workflow_run_id = r.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER workflow_runs_delete_rows
    AFTER DELETE ON runledger.workflow_runs
    REFERENCING OLD TABLE AS deleted_runs
    FOR EACH STATEMENT
    EXECUTE FUNCTION runledger.delete_workflow_run_rows();
