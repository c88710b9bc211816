-- A step job's end reaches its step from the statement that ends the job, instead of from a
-- statement trigger on the job table.
--
-- `job_queue_workflow_status` fired after every UPDATE of `runledger.job_queue`: claims,
-- heartbeats, progress, continuations and the successes of plain jobs, none of which ends a
-- step. Each of those statements kept a copy of every row it wrote for the trigger, which then
-- ran a PL/pgSQL function to find that none was a step job that had ended. On an idle worker
-- that was part of every claim's time between a job's enqueue and its start (the peer harness's
-- pickup p50 1.46 to 1.52 ms without the trigger against 1.53 to 1.59 with it, four alternated
-- pairs). The statements that can end a job now pass the step jobs they ended to
-- `runledger.finish_step_jobs`: the batch of successes below, and from the client the failure
-- of a job, the reaper and the refusal of an unreadable payload. A run's cancellation ends its
-- steps itself; the cancellation of a single job leaves step jobs alone.

-- Ends the steps of the given jobs as their jobs ended: a succeeded job's step succeeds with its
-- output, a dead-lettered one's fails with its error, a canceled one's is canceled. Rows without
-- a step, or whose job has not ended (a failure scheduled for a retry), are skipped. One call per
-- statement, with the statement's rows as arrays, keeps the release set-based.
CREATE FUNCTION runledger.finish_step_jobs(
    p_step_ids uuid[],
    p_job_statuses text[],
    p_outputs jsonb[],
    p_error_codes text[],
    p_error_messages text[]
) RETURNS void
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
    SELECT array_agg(j.step_id ORDER BY j.step_id),
           array_agg(CASE j.status WHEN 'SUCCEEDED' THEN 'SUCCEEDED'
                                   WHEN 'DEAD_LETTERED' THEN 'FAILED'
                                   ELSE 'CANCELED' END ORDER BY j.step_id),
           array_agg(j.output ORDER BY j.step_id),
           array_agg(CASE WHEN j.status = 'DEAD_LETTERED' THEN j.error_code END
                     ORDER BY j.step_id),
           array_agg(CASE WHEN j.status = 'DEAD_LETTERED' THEN j.error_message END
                     ORDER BY j.step_id),
           array_agg(CASE j.status WHEN 'DEAD_LETTERED' THEN 'job.dead_lettered'
                                   WHEN 'CANCELED' THEN 'job.canceled' END
                     ORDER BY j.step_id)
    INTO v_steps, v_statuses, v_outputs, v_codes, v_messages, v_reasons
    FROM unnest(p_step_ids, p_job_statuses, p_outputs, p_error_codes, p_error_messages)
         AS j(step_id, status, output, error_code, error_message)
    WHERE j.step_id IS NOT NULL
      AND j.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED');
    IF v_steps IS NULL THEN
        RETURN;
    END IF;
    PERFORM runledger.workflow_finish_steps(
        v_steps, v_statuses, v_outputs, v_codes, v_messages, v_reasons
    );
END;
$$;

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
           array_agg(workflow_step_id) FILTER (WHERE workflow_step_id IS NOT NULL),
           array_agg(output) FILTER (WHERE workflow_step_id IS NOT NULL)
    INTO v_ids, v_steps, v_outputs
    FROM succeeded;
    IF v_steps IS NOT NULL THEN
        PERFORM runledger.finish_step_jobs(
            v_steps,
            array_fill('SUCCEEDED'::text, ARRAY[cardinality(v_steps)]),
            v_outputs,
            array_fill(NULL::text, ARRAY[cardinality(v_steps)]),
            array_fill(NULL::text, ARRAY[cardinality(v_steps)])
        );
    END IF;
    RETURN QUERY SELECT unnest(v_ids);
END;
$$;

DROP TRIGGER job_queue_workflow_status ON runledger.job_queue;
DROP FUNCTION runledger.on_workflow_jobs_status();
