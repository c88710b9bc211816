-- A step job's success reaches its step from the batch statement that records it, and the other
-- ends of a step job from a row trigger that fires for those rows only, instead of from a
-- statement trigger on every update of the job table.
--
-- `job_queue_workflow_status` fired after every UPDATE of `runledger.job_queue`: claims,
-- heartbeats, progress, continuations and the successes of plain jobs, none of which ends a
-- step. Each of those statements kept a copy of every row it wrote for the trigger, which then
-- ran a PL/pgSQL function to find that none was a step job that had ended. On an idle worker
-- that was part of every claim's time between a job's enqueue and its start (the peer harness's
-- pickup p50 1.46 to 1.52 ms without the trigger against 1.53 to 1.59 with it, four alternated
-- pairs).
--
-- Successes, the hot path of a workflow, are finished by `runledger.complete_jobs_success`
-- itself, one set-based `workflow_finish_steps` call per batch. A step job that is
-- dead-lettered (a failure on its last attempt, the reaper, the claim's refusal of a payload
-- it cannot decode) or canceled (a run's cancellation, which has ended its steps already) ends
-- its step through `job_queue_step_job_ended`: a row trigger whose WHEN clause PostgreSQL
-- checks on the row itself, so that other updates run no trigger function at all. Rows are
-- finished one by one there, on a path taken by failures only. Every writer is covered,
-- including a worker of the previous version whose failure statements name no step function.

CREATE OR REPLACE FUNCTION runledger.complete_jobs_success(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_outputs jsonb[], p_progress jsonb[]
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_ids uuid[];
    v_steps uuid[];
    v_outputs jsonb[];
    v_none text[];
BEGIN
    WITH succeeded AS (
        UPDATE runledger.job_queue q
        SET status = 'SUCCEEDED',
            output = s.output,
            progress = coalesce(s.progress, q.progress),
            started_at = coalesce(q.started_at, q.leased_at),
            lease_expires_at = NULL,
            finished_at = now(),
            updated_at = now()
        FROM unnest(p_ids, p_attempts, p_outputs, p_progress) AS s(id, attempt, output, progress)
        WHERE q.id = ANY (p_ids) AND q.id = s.id AND q.attempt = s.attempt
          AND q.worker_id = p_worker_id
          AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
        RETURNING q.id, q.workflow_step_id, q.output
    )
    SELECT array_agg(id),
           array_agg(workflow_step_id ORDER BY workflow_step_id)
               FILTER (WHERE workflow_step_id IS NOT NULL),
           array_agg(output ORDER BY workflow_step_id) FILTER (WHERE workflow_step_id IS NOT NULL)
    INTO v_ids, v_steps, v_outputs
    FROM succeeded;
    IF v_steps IS NOT NULL THEN
        v_none := array_fill(NULL::text, ARRAY[cardinality(v_steps)]);
        PERFORM runledger.workflow_finish_steps(
            v_steps, array_fill('SUCCEEDED'::text, ARRAY[cardinality(v_steps)]), v_outputs,
            v_none, v_none, v_none
        );
    END IF;
    RETURN QUERY SELECT unnest(v_ids);
END;
$$;

CREATE FUNCTION runledger.on_step_job_ended() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM runledger.workflow_finish_steps(
        ARRAY[NEW.workflow_step_id],
        ARRAY[CASE NEW.status WHEN 'DEAD_LETTERED' THEN 'FAILED' ELSE 'CANCELED' END],
        ARRAY[NULL::jsonb],
        ARRAY[CASE WHEN NEW.status = 'DEAD_LETTERED' THEN NEW.last_error_code END],
        ARRAY[CASE WHEN NEW.status = 'DEAD_LETTERED' THEN NEW.last_error_message END],
        ARRAY[CASE NEW.status WHEN 'DEAD_LETTERED' THEN 'job.dead_lettered'
                              ELSE 'job.canceled' END]
    );
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_step_job_ended
    AFTER UPDATE OF status ON runledger.job_queue
    FOR EACH ROW
    WHEN (NEW.workflow_step_id IS NOT NULL
          AND NEW.status IN ('DEAD_LETTERED', 'CANCELED')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION runledger.on_step_job_ended();

DROP TRIGGER job_queue_workflow_status ON runledger.job_queue;
DROP FUNCTION runledger.on_workflow_jobs_status();
