-- A workflow step's RUNNING is read from its job instead of written at each claim. The statement
-- trigger on job_queue moved a step to RUNNING when its job was leased and back to ENQUEUED when
-- the job was retried: one more UPDATE of workflow_steps inside every claim and every retry of a
-- step job (on a 1 -> 1,000 -> 1 workflow, 85 ms of the server's time spread over its claims).
-- The stored status now stays ENQUEUED while the job runs; reads show RUNNING when the job is
-- leased (runledger.workflow_step_status). Steps stored as RUNNING before this migration keep
-- that status until they finish, which every reader and writer accepts as before.
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
    JOIN old_jobs o ON o.id = n.id
    WHERE n.workflow_step_id IS NOT NULL
      AND n.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
      AND o.status IS DISTINCT FROM n.status;

    PERFORM runledger.workflow_finish_steps(
        v_steps, v_statuses, v_outputs, v_codes, v_messages, v_reasons
    );
    RETURN NULL;
END;
$$;

-- A step's status as reads show it: ENQUEUED while its job waits, RUNNING while its job is
-- leased, the stored status otherwise.
CREATE FUNCTION runledger.workflow_step_status(p_status text, p_job_id uuid) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_status = 'ENQUEUED' AND EXISTS (
            SELECT 1 FROM runledger.job_queue j WHERE j.id = p_job_id AND j.status = 'LEASED'
        ) THEN 'RUNNING'
        ELSE p_status
    END
$$;

-- A step row is written three times after its insert (released with its job, finished, and for
-- a fan-in step its counters at each prerequisite's end); only the release changes an indexed
-- column (job_id). Room on each page lets the other updates stay on their page as heap-only
-- tuples, with no new entry in the step indexes.
ALTER TABLE runledger.workflow_steps SET (fillfactor = 50);

-- Releasing steps decides once per job type whether its jobs are under a global limit (before,
-- once per released step: a PL/pgSQL call for each of 1,000 steps released at once).
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
    definitions AS MATERIALIZED (
        SELECT d.job_type, d.priority, d.max_attempts, d.timeout_seconds, d.queue,
               runledger.job_is_limited(d.job_type, d.queue) AS limited
        FROM runledger.job_definitions d
        WHERE d.job_type IN (
            SELECT s.job_type FROM released r JOIN runledger.workflow_steps s ON s.id = r.step_id
        )
    ),
    jobs AS (
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            workflow_run_id, workflow_step_id, workflow_step_key, queue, resource_key, gated,
            trace_context
        )
        SELECT r.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key, d.queue, s.resource_key,
               s.resource_key IS NOT NULL OR d.limited,
               w.trace_context
        FROM released r
        JOIN runledger.workflow_steps s ON s.id = r.step_id
        JOIN runledger.workflow_runs w ON w.id = s.workflow_run_id
        JOIN definitions d ON d.job_type = s.job_type
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
