-- External steps: gates a run waits on until something outside completes them.

-- Completes the external step `p_step_key` of run `p_run` as `p_status` (SUCCEEDED with its
-- output, FAILED or CANCELED, with an optional reason and error), through the path a batch of
-- step jobs takes (runledger.workflow_finish_steps): the step's dependents are released, the
-- run refreshed. With `p_scoped`, the run must belong to `p_org` (NULL: a run without
-- organization). Idempotent: a retry with the same completion answers `already_completed`.
--
-- Returns one of: completed, already_completed, conflicting_completion, conflicting_output,
-- run_not_found, run_canceled, step_not_found, step_not_external, step_not_waiting; the caller
-- (`postgres::jobs::workflows::complete_external_workflow_step`) maps each to its outcome or
-- error code, in the statement that has just taken the run's release lock shared.
--
-- PL/pgSQL: the step is read after the run's row is locked, with a snapshot that sees what the
-- previous holder of that lock committed (a concurrent completion of the same step), and the
-- verdict decides whether to write, all in one round trip. In one SQL statement the step would
-- be read with the snapshot taken before the lock was granted.
CREATE FUNCTION runledger.workflow_complete_external(
    p_run uuid,
    p_scoped boolean,
    p_org uuid,
    p_step_key text,
    p_status text,
    p_reason text,
    p_error_code text,
    p_error_message text,
    p_output jsonb
) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_run runledger.workflow_runs%ROWTYPE;
    v_step runledger.workflow_steps%ROWTYPE;
BEGIN
    SELECT * INTO v_run FROM runledger.workflow_runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND OR (p_scoped AND v_run.organization_id IS DISTINCT FROM p_org) THEN
        RETURN 'run_not_found';
    END IF;
    SELECT * INTO v_step FROM runledger.workflow_steps
    WHERE workflow_run_id = p_run AND step_key = p_step_key;
    IF NOT FOUND THEN
        RETURN 'step_not_found';
    END IF;
    IF v_step.step_kind <> 'EXTERNAL' THEN
        RETURN 'step_not_external';
    END IF;
    IF v_step.status IN ('SUCCEEDED', 'FAILED', 'CANCELED') THEN
        IF v_step.status = p_status
           AND v_step.status_reason IS NOT DISTINCT FROM p_reason
           AND v_step.last_error_code IS NOT DISTINCT FROM p_error_code
           AND v_step.last_error_message IS NOT DISTINCT FROM p_error_message THEN
            IF p_status = 'SUCCEEDED' AND v_step.output IS DISTINCT FROM p_output THEN
                RETURN 'conflicting_output';
            END IF;
            RETURN 'already_completed';
        END IF;
        IF v_run.status = 'CANCELED' THEN
            RETURN 'run_canceled';
        END IF;
        RETURN 'conflicting_completion';
    END IF;
    IF v_run.status = 'CANCELED' THEN
        RETURN 'run_canceled';
    END IF;
    IF v_step.status <> 'WAITING_FOR_EXTERNAL' THEN
        RETURN 'step_not_waiting';
    END IF;
    PERFORM runledger.workflow_finish_steps(
        ARRAY[v_step.id], ARRAY[p_status], ARRAY[p_output], ARRAY[p_error_code],
        ARRAY[p_error_message], ARRAY[p_reason]
    );
    RETURN 'completed';
END;
$$;
