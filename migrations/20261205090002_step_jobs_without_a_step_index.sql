-- No query looks a job up by its step: a step names its job (workflow_steps.job_id), a job names
-- its step and run, and a run's jobs are found and deleted through job_queue_workflow_run_idx.
-- The step index was kept for the foreign key from jobs to steps, which is gone
-- (20261202090002_workflow_keys_without_foreign_keys), and a status change of a step job is not
-- a heap-only update, so the index took an entry at the job's insert, claim, completion and
-- every retry. Releasing the 1,000 middle steps of a 1 -> 1,000 -> 1 workflow and completing
-- them wrote 3,000 entries into it.
DROP INDEX runledger.job_queue_workflow_step_idx;
