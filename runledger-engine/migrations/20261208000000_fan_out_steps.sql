-- Fan-outs close in the release: a FAN_OUT step, filled by one of its prerequisites with
-- children (`fill_fan_out`), finishes when they have, without a job of its own.
ALTER TABLE runledger.workflow_steps
    DROP CONSTRAINT workflow_steps_kind_valid,
    DROP CONSTRAINT workflow_steps_job_type_matches_kind,
    ADD CONSTRAINT workflow_steps_kind_valid CHECK (step_kind IN ('JOB', 'EXTERNAL', 'FAN_OUT')),
    ADD CONSTRAINT workflow_steps_job_type_matches_kind CHECK (
        (step_kind = 'JOB' AND runledger.is_valid_identifier(job_type))
        OR (step_kind IN ('EXTERNAL', 'FAN_OUT') AND job_type IS NULL)
    );

ALTER TABLE runledger.workflow_run_mutations
    DROP CONSTRAINT workflow_run_mutations_type_valid,
    ADD CONSTRAINT workflow_run_mutations_type_valid CHECK (mutation_type IN ('APPEND_STEPS', 'FILL_FAN_OUT'));

CREATE FUNCTION runledger.workflow_close_fan_outs(
    p_steps uuid[], OUT closed uuid[], OUT failed uuid[]
)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = on
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH gates AS MATERIALIZED (
        SELECT g.id, g.workflow_run_id, g.step_key,
               coalesce((g.payload ->> 'children')::int, 0) AS children
        FROM runledger.workflow_steps g
        WHERE g.id = ANY (p_steps) AND g.step_kind = 'FAN_OUT'
          AND g.status = 'WAITING_FOR_EXTERNAL'
    ),
    children AS MATERIALIZED (
        SELECT g.id AS gate, i.n, c.status, c.output
        FROM gates g
        CROSS JOIN LATERAL generate_series(0, g.children - 1) AS i(n)
        LEFT JOIN runledger.workflow_steps c
          ON c.workflow_run_id = g.workflow_run_id AND c.step_key = g.step_key || '/' || i.n
    ),
    verdicts AS MATERIALIZED (
        SELECT g.id, g.children,
               (count(c.n) FILTER (WHERE c.status IS DISTINCT FROM 'SUCCEEDED'))::int AS bad,
               coalesce(sum(pg_column_size(c.output)), 0) <= 16777216 AS collectable
        FROM gates g
        LEFT JOIN children c ON c.gate = g.id
        GROUP BY g.id, g.children
    ),
    outputs AS (
        SELECT c.gate, jsonb_agg(c.output ORDER BY c.n) AS output
        FROM children c
        JOIN verdicts v ON v.id = c.gate
        WHERE v.bad = 0 AND v.collectable
        GROUP BY c.gate
    ),
    finished AS (
        UPDATE runledger.workflow_steps s
        SET status = CASE WHEN v.bad = 0 THEN 'SUCCEEDED' ELSE 'FAILED' END,
            output = CASE WHEN v.bad = 0 AND v.collectable
                          THEN coalesce(o.output, '[]'::jsonb) END,
            status_reason = CASE WHEN v.bad = 0 AND NOT v.collectable
                                 THEN 'workflow.fan_out_outputs_not_collected' END,
            last_error_code = CASE WHEN v.bad > 0 THEN 'workflow.fan_out_failed' END,
            last_error_message = CASE WHEN v.bad > 0
                THEN format('%s of the %s children of `%s` did not succeed',
                            v.bad, v.children, s.step_key) END,
            finished_at = now(),
            updated_at = now()
        FROM verdicts v
        LEFT JOIN outputs o ON o.gate = v.id
        WHERE s.id = ANY (p_steps) AND s.id = v.id
        RETURNING s.id, s.status
    )
    SELECT array_agg(f.id), array_agg(f.id) FILTER (WHERE f.status = 'FAILED')
    INTO closed, failed
    FROM finished f;
END;
$$;

CREATE OR REPLACE FUNCTION runledger.workflow_count_down_dependents(p_finished uuid[], p_failed uuid[])
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
    v_jobs runledger.workflow_steps[];
    v_doomed uuid[];
    v_fan_outs uuid[];
    v_closed uuid[];
    v_closed_failed uuid[];
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
            RETURNING s AS step
        )
        SELECT array_agg(step) FILTER (WHERE (step).status = 'ENQUEUED'),
               array_agg((step).id) FILTER (WHERE (step).deps_pending = 0
                                             AND (step).deps_unsatisfied > 0),
               array_agg((step).id) FILTER (WHERE (step).step_kind = 'FAN_OUT'
                                             AND (step).status = 'WAITING_FOR_EXTERNAL')
        INTO v_jobs, v_doomed, v_fan_outs
        FROM counted;

        PERFORM runledger.workflow_insert_step_jobs(v_jobs);
        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
        v_closed := NULL;
        v_closed_failed := NULL;
        IF v_fan_outs IS NOT NULL THEN
            SELECT c.closed, c.failed INTO v_closed, v_closed_failed
            FROM runledger.workflow_close_fan_outs(v_fan_outs) AS c;
        END IF;
        -- Canceled steps finished without succeeding: their dependents count them as failed;
        -- so do they a fan-out that failed.
        v_frontier := coalesce(v_doomed, '{}') || coalesce(v_closed, '{}');
        v_failed := coalesce(v_doomed, '{}') || coalesce(v_closed_failed, '{}');
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION runledger.workflow_release_steps(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_jobs runledger.workflow_steps[];
    v_fan_outs uuid[];
    v_closed uuid[];
    v_closed_failed uuid[];
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH released AS (
        UPDATE runledger.workflow_steps s
        SET status = runledger.workflow_released_status(s.step_kind),
            job_id = CASE s.step_kind WHEN 'JOB' THEN s.id END,
            updated_at = now()
        WHERE s.id = ANY(p_steps) AND s.status = 'BLOCKED'
        RETURNING s AS step
    )
    SELECT array_agg(step) FILTER (WHERE (step).step_kind = 'JOB'),
           array_agg((step).id) FILTER (WHERE (step).step_kind = 'FAN_OUT')
    INTO v_jobs, v_fan_outs
    FROM released;

    PERFORM runledger.workflow_insert_step_jobs(v_jobs);
    SELECT c.closed, c.failed INTO v_closed, v_closed_failed
    FROM runledger.workflow_close_fan_outs(v_fan_outs) AS c;
    PERFORM runledger.workflow_count_down_dependents(v_closed, v_closed_failed);
END;
$$;
