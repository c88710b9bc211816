-- A workflow's edges keep one index instead of two: their primary key now leads with the
-- prerequisite, which is how the release reads them (the dependents of the steps that just
-- finished), and the separate index by prerequisite is dropped.
--
-- The primary key led with the dependent, for the few reads that start from a step and look
-- for its prerequisites: a run's step list, a step's read of a prerequisite's output, the
-- steps appended to a running run, and retention. Every edge joins two steps of one run, so
-- those reads start from the run's steps as prerequisites instead. Every enqueue wrote both
-- indexes for every edge: inserting the 2,000 edges of a 1 -> 1,000 -> 1 run took 4.6 to
-- 4.9 ms with one index against 5.8 to 6.5 ms with two (replayed on the 2-core machine of
-- docs/benchmarks.md, 40 runs each, twice), and four alternated `--only workflow` runs of the
-- bench gave the run's enqueue 17 to 20 ms at the median against 21 to 22.

ALTER TABLE runledger.workflow_step_dependencies DROP CONSTRAINT workflow_step_dependencies_pkey;
DROP INDEX runledger.workflow_step_dependencies_prerequisite_idx;
ALTER TABLE runledger.workflow_step_dependencies
    ADD CONSTRAINT workflow_step_dependencies_pkey PRIMARY KEY (depends_on_step_id, step_id);

-- Appended steps count their prerequisites that have already finished: the run's finished
-- steps other than the new ones, and their edges into the new steps.
CREATE OR REPLACE FUNCTION runledger.workflow_settle_new_steps(p_run uuid, p_steps uuid[])
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_ready uuid[];
    v_doomed uuid[];
BEGIN
    WITH counts AS (
        SELECT d.step_id,
               count(*) AS done,
               count(*) FILTER (WHERE d.condition = 'SUCCESS' AND p.status IN ('FAILED', 'CANCELED')) AS bad
        FROM runledger.workflow_steps p
        JOIN runledger.workflow_step_dependencies d ON d.depends_on_step_id = p.id
        WHERE p.workflow_run_id = p_run
          AND p.status IN ('SUCCEEDED', 'FAILED', 'CANCELED')
          AND NOT p.id = ANY(p_steps)
          AND d.step_id = ANY(p_steps)
        GROUP BY d.step_id
    )
    UPDATE runledger.workflow_steps s
    SET deps_pending = s.deps_pending - c.done, deps_unsatisfied = c.bad
    FROM counts c
    WHERE s.id = c.step_id;

    SELECT array_agg(id) FILTER (WHERE deps_unsatisfied = 0),
           array_agg(id) FILTER (WHERE deps_unsatisfied > 0)
    INTO v_ready, v_doomed
    FROM runledger.workflow_steps
    WHERE id = ANY(p_steps) AND status = 'BLOCKED' AND deps_pending = 0;

    PERFORM runledger.workflow_release_steps(v_ready);
    PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
    PERFORM runledger.workflow_release_dependents(v_doomed, v_doomed);
    RETURN runledger.workflow_refresh_run(p_run);
END;
$$;
