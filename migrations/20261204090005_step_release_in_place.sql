-- A workflow step's release updates its row in place.
--
-- workflow_steps_job_idx indexed the job of each step, which no query reads: a job names its
-- step (job_queue.workflow_step_id), and every read goes from the job or the run to the step.
-- Setting job_id when a step is released therefore added an entry to each of the step's
-- indexes; without this one the release's update touches no indexed column and stays on the
-- row's page (workflow_steps keeps half of each page free for that). Releasing the 1,000 middle
-- steps of a 1 -> 1,000 -> 1 workflow took 55 ms with the index and 34 ms without it.
DROP INDEX IF EXISTS runledger.workflow_steps_job_idx;
