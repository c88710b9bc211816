-- Two per-row costs of every write of a job row that protected nothing on the hot path.
--
-- The keys from job_events, job_logs, job_dead_letters and job_replays to job_queue made each
-- update of a job row check, for each of the five keys, whether the row's id changed (it never
-- does), and each insert of an event, a dead letter or a log line look the job up and lock it
-- against a concurrent delete; those rows are only written by statements about the job they
-- name. What the keys did beyond that, deleting a job's rows with it, is the statement trigger
-- that already deletes its attempts (20261201150003), now for every table that names a job.
ALTER TABLE runledger.job_events DROP CONSTRAINT job_events_job_fkey;
ALTER TABLE runledger.job_logs DROP CONSTRAINT job_logs_job_fkey;
ALTER TABLE runledger.job_dead_letters DROP CONSTRAINT job_dead_letters_job_fkey;
ALTER TABLE runledger.job_replays DROP CONSTRAINT job_replays_source_fkey;
ALTER TABLE runledger.job_replays DROP CONSTRAINT job_replays_replay_fkey;

DROP TRIGGER job_queue_delete_attempts ON runledger.job_queue;
DROP FUNCTION runledger.delete_job_attempts();

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

-- The workflow trigger keeps only the new rows of an update: a step job that reached a terminal
-- status finishes its step, and finishing a step that already finished changes nothing
-- (runledger.workflow_finish_steps skips it), so the old rows it compared against were a copy of
-- every row of every claim and completion kept for nothing.
DROP TRIGGER job_queue_workflow_status ON runledger.job_queue;

CREATE OR REPLACE FUNCTION runledger.on_workflow_jobs_status() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_steps uuid[];
    v_statuses text[];
    v_outputs jsonb[];
    v_codes text[];
    v_messages text[];
    v_reasons text[];
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM new_jobs
        WHERE workflow_step_id IS NOT NULL
          AND status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
    ) THEN
        RETURN NULL;
    END IF;

    SELECT array_agg(n.workflow_step_id ORDER BY n.workflow_step_id),
           array_agg(CASE n.status WHEN 'SUCCEEDED' THEN 'SUCCEEDED'
                                   WHEN 'DEAD_LETTERED' THEN 'FAILED'
                                   ELSE 'CANCELED' END ORDER BY n.workflow_step_id),
           array_agg(n.output ORDER BY n.workflow_step_id),
           array_agg(CASE WHEN n.status = 'DEAD_LETTERED' THEN n.last_error_code END
                     ORDER BY n.workflow_step_id),
           array_agg(CASE WHEN n.status = 'DEAD_LETTERED' THEN n.last_error_message END
                     ORDER BY n.workflow_step_id),
           array_agg(CASE n.status WHEN 'DEAD_LETTERED' THEN 'job.dead_lettered'
                                   WHEN 'CANCELED' THEN 'job.canceled' END
                     ORDER BY n.workflow_step_id)
    INTO v_steps, v_statuses, v_outputs, v_codes, v_messages, v_reasons
    FROM new_jobs n
    WHERE n.workflow_step_id IS NOT NULL
      AND n.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED');

    PERFORM runledger.workflow_finish_steps(
        v_steps, v_statuses, v_outputs, v_codes, v_messages, v_reasons
    );
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_workflow_status
    AFTER UPDATE ON runledger.job_queue
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION runledger.on_workflow_jobs_status();
