-- The workflow tables reference each other without foreign keys. Their rows are written only by
-- Runledger's own functions, a run's steps and edges in the statement that creates the run, and
-- a step's job in the statement that releases it, so the keys are right by construction; the
-- checks cost one lookup per key per row (enqueueing a 1 -> 1,000 -> 1 workflow ran 7,000 of
-- them, 43 ms of its 90 ms, and releasing 1,000 steps another 3,000). What the keys did on
-- delete, removing a run's steps, edges and jobs with it, a statement trigger on the runs does
-- (each through its run index: the steps' unique (run, key), the edges' and the jobs' run
-- indexes).
ALTER TABLE runledger.workflow_step_dependencies
    DROP CONSTRAINT workflow_step_dependencies_run_fkey,
    DROP CONSTRAINT workflow_step_dependencies_step_fkey,
    DROP CONSTRAINT workflow_step_dependencies_prerequisite_fkey;
ALTER TABLE runledger.workflow_steps
    DROP CONSTRAINT workflow_steps_run_fkey,
    DROP CONSTRAINT workflow_steps_job_fkey;
ALTER TABLE runledger.job_queue
    DROP CONSTRAINT job_queue_workflow_run_fkey,
    DROP CONSTRAINT job_queue_workflow_step_fkey;

CREATE FUNCTION runledger.delete_workflow_run_rows() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM runledger.job_queue q
    USING deleted_runs r
    WHERE q.workflow_run_id = r.id;
    DELETE FROM runledger.workflow_step_dependencies d
    USING deleted_runs r
    WHERE d.workflow_run_id = r.id;
    DELETE FROM runledger.workflow_steps s
    USING deleted_runs r
    WHERE s.workflow_run_id = r.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER workflow_runs_delete_rows
    AFTER DELETE ON runledger.workflow_runs
    REFERENCING OLD TABLE AS deleted_runs
    FOR EACH STATEMENT
    EXECUTE FUNCTION runledger.delete_workflow_run_rows();
