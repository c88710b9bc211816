-- A released step's job takes the step's own id instead of a new one.
--
-- A step is released once (BLOCKED to ENQUEUED, never back) and has one job in its life, so its
-- id, a UUIDv7 made when the run was enqueued, serves as the job's id too: ids of steps and of
-- jobs live in different tables. The release no longer calls `runledger.uuidv7()` for each
-- released step: about 3 us each, 2.5 to 3.5 ms of the statement that releases the 1,000
-- dependents of one step (a replay of that update on the 2-core machine of
-- docs/benchmarks.md), all of it between the step's completion and the first lease of its
-- dependents. `workflow_steps.job_id` still stays NULL until the step is released.

CREATE OR REPLACE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_jobs uuid[];
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH released AS (
        UPDATE runledger.workflow_steps
        SET status = runledger.workflow_released_status(step_kind),
            job_id = CASE step_kind WHEN 'JOB' THEN id END,
            updated_at = now()
        WHERE id = ANY(p_steps) AND status = 'BLOCKED'
        RETURNING id, step_kind
    )
    SELECT array_agg(id) FILTER (WHERE step_kind = 'JOB') INTO v_jobs FROM released;

    PERFORM runledger.workflow_insert_step_jobs(v_jobs);
END;
$$;

CREATE OR REPLACE FUNCTION runledger.workflow_release_dependents(p_finished uuid[], p_failed uuid[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_frontier uuid[] := p_finished;
    v_failed uuid[] := coalesce(p_failed, '{}');
    v_dependents uuid[];
    v_done int[];
    v_bad int[];
    v_jobs uuid[];
    v_doomed uuid[];
BEGIN
    WHILE v_frontier IS NOT NULL AND cardinality(v_frontier) > 0 LOOP
        SELECT array_agg(e.step_id), array_agg(e.done), array_agg(e.bad)
        INTO v_dependents, v_done, v_bad
        FROM (
            SELECT d.step_id,
                   count(*)::int AS done,
                   (count(*) FILTER (
                       WHERE d.condition = 'SUCCESS' AND d.depends_on_step_id = ANY(v_failed)
                   ))::int AS bad
            FROM runledger.workflow_step_dependencies d
            WHERE d.depends_on_step_id = ANY(v_frontier)
            GROUP BY d.step_id
        ) e;
        EXIT WHEN v_dependents IS NULL;

        WITH counted AS (
            UPDATE runledger.workflow_steps s
            SET deps_pending = s.deps_pending - e.done,
                deps_unsatisfied = s.deps_unsatisfied + e.bad,
                status = CASE WHEN s.deps_pending = e.done AND s.deps_unsatisfied + e.bad = 0
                              THEN runledger.workflow_released_status(s.step_kind)
                              ELSE s.status END,
                job_id = CASE WHEN s.deps_pending = e.done AND s.deps_unsatisfied + e.bad = 0
                                   AND s.step_kind = 'JOB'
                              THEN s.id ELSE s.job_id END,
                updated_at = now()
            FROM unnest(v_dependents, v_done, v_bad) AS e(step_id, done, bad)
            WHERE s.id = ANY (v_dependents) AND s.id = e.step_id AND s.status = 'BLOCKED'
            RETURNING s.id, s.status, s.deps_pending, s.deps_unsatisfied
        )
        SELECT array_agg(id) FILTER (WHERE status = 'ENQUEUED'),
               array_agg(id) FILTER (WHERE deps_pending = 0 AND deps_unsatisfied > 0)
        INTO v_jobs, v_doomed
        FROM counted;

        PERFORM runledger.workflow_insert_step_jobs(v_jobs);
        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
        -- Canceled steps finished without succeeding: their dependents count them as failed.
        v_frontier := v_doomed;
        v_failed := coalesce(v_doomed, '{}');
    END LOOP;
END;
$$;
