-- Execution resource keys: a job (or a workflow step's job) may name a resource; at most one job
-- holding a given key is leased at a time across all workers.
--
-- A keyed job is `gated`: the limited claim takes it only while no leased job holds its key,
-- in the same statement that leases it. The key is held by the job row's `LEASED` status
-- itself, so whatever ends the lease (success, failure or retry, cancel, the reaper) frees it
-- with no bookkeeping to forget; the unique index below makes a second holder impossible.

ALTER TABLE runledger.job_queue
    ADD COLUMN resource_key text,
    ADD CONSTRAINT job_queue_resource_key_valid
        CHECK (resource_key IS NULL OR runledger.is_valid_identifier(resource_key));

ALTER TABLE runledger.workflow_steps
    ADD COLUMN resource_key text,
    ADD CONSTRAINT workflow_steps_resource_key_valid
        CHECK (resource_key IS NULL OR runledger.is_valid_identifier(resource_key));

ALTER TABLE runledger.job_enqueue_intents
    ADD COLUMN resource_key text,
    ADD CONSTRAINT job_enqueue_intents_resource_key_valid
        CHECK (resource_key IS NULL OR runledger.is_valid_identifier(resource_key));

-- The holders: at most one leased job per key. The limited claim reads it to skip busy keys.
CREATE UNIQUE INDEX job_queue_resource_holder_idx
    ON runledger.job_queue (resource_key) WHERE status = 'LEASED' AND resource_key IS NOT NULL;

CREATE OR REPLACE FUNCTION runledger.refresh_job_gates(p_queue text, p_job_types text[])
RETURNS void
LANGUAGE sql
AS $$
    UPDATE runledger.job_queue q
    SET gated = q.resource_key IS NOT NULL OR runledger.job_is_limited(q.job_type, q.queue)
    WHERE q.status = 'PENDING'
      AND (q.queue = p_queue OR q.job_type = ANY(p_job_types))
      AND q.gated IS DISTINCT FROM (
          q.resource_key IS NOT NULL OR runledger.job_is_limited(q.job_type, q.queue)
      )
$$;

-- Released workflow steps carry their resource key to their job.
CREATE OR REPLACE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH released AS (
        SELECT s.id AS step_id, runledger.uuidv7() AS job_id
        FROM runledger.workflow_steps s
        WHERE s.id = ANY(p_steps) AND s.status = 'BLOCKED' AND s.step_kind = 'JOB'
    ),
    jobs AS (
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            workflow_run_id, workflow_step_id, workflow_step_key, queue, resource_key, gated
        )
        SELECT r.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key, d.queue, s.resource_key,
               s.resource_key IS NOT NULL OR runledger.job_is_limited(d.job_type, d.queue)
        FROM released r
        JOIN runledger.workflow_steps s ON s.id = r.step_id
        JOIN runledger.workflow_runs w ON w.id = s.workflow_run_id
        JOIN runledger.job_definitions d ON d.job_type = s.job_type
        RETURNING id, workflow_step_id
    )
    UPDATE runledger.workflow_steps s
    SET status = 'ENQUEUED', job_id = jobs.id, updated_at = now()
    FROM jobs
    WHERE s.id = jobs.workflow_step_id;

    UPDATE runledger.workflow_steps
    SET status = 'WAITING_FOR_EXTERNAL', updated_at = now()
    WHERE id = ANY(p_steps) AND status = 'BLOCKED' AND step_kind = 'EXTERNAL';
END;
$$;
