-- Dependents are counted down by primary-key lookups. The previous form joined the steps table
-- to the grouped edges, and with statistics taken while the table was still small (a large
-- workflow enqueued just before autovacuum's analyze, as on a new installation) the planner
-- scanned every BLOCKED step once per dependent: releasing the 1,000 dependents of one step
-- compared a million pairs and took half a second. Now the dependents are collected first
-- (the prerequisite index), updated through the primary key, and each one's finished and
-- unsatisfied prerequisites are counted through the edges' primary key (step, prerequisite), so
-- the cost follows the number of edges touched whatever the statistics say.
CREATE OR REPLACE FUNCTION runledger.workflow_release_dependents(p_finished uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_frontier uuid[] := p_finished;
    v_failed uuid[];
    v_dependents uuid[];
    v_ready uuid[];
    v_doomed uuid[];
BEGIN
    WHILE v_frontier IS NOT NULL AND cardinality(v_frontier) > 0 LOOP
        SELECT array_agg(id) FILTER (WHERE status <> 'SUCCEEDED')
        INTO v_failed
        FROM runledger.workflow_steps
        WHERE id = ANY(v_frontier);

        v_dependents := ARRAY(
            SELECT DISTINCT step_id
            FROM runledger.workflow_step_dependencies
            WHERE depends_on_step_id = ANY(v_frontier)
        );

        WITH counted AS (
            UPDATE runledger.workflow_steps s
            SET deps_pending = s.deps_pending - (
                    SELECT count(*) FROM runledger.workflow_step_dependencies d
                    WHERE d.step_id = s.id AND d.depends_on_step_id = ANY(v_frontier)
                ),
                deps_unsatisfied = s.deps_unsatisfied + (
                    SELECT count(*) FROM runledger.workflow_step_dependencies d
                    WHERE d.step_id = s.id AND d.depends_on_step_id = ANY(v_failed)
                      AND d.condition = 'SUCCESS'
                ),
                updated_at = now()
            WHERE s.id = ANY(v_dependents) AND s.status = 'BLOCKED'
            RETURNING s.id, s.deps_pending, s.deps_unsatisfied
        )
        SELECT array_agg(id) FILTER (WHERE deps_pending = 0 AND deps_unsatisfied = 0),
               array_agg(id) FILTER (WHERE deps_pending = 0 AND deps_unsatisfied > 0)
        INTO v_ready, v_doomed
        FROM counted;

        PERFORM runledger.workflow_release_steps(v_ready);
        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
        v_frontier := v_doomed;
    END LOOP;
END;
$$;
