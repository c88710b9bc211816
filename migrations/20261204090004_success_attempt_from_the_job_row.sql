-- A job's successful last attempt is read from its row instead of copied into job_attempts. A
-- succeeded job is final (a replay is another job; requeue takes dead-lettered and canceled jobs
-- only), and its row already holds everything its attempt row said: the attempt number, when it
-- was leased, started and finished, and now which worker ran it (worker_id stays set when the
-- job succeeds; its lease is gone, lease_expires_at is cleared). Writing the copy was a heap
-- insert and a primary-key entry for every job, about a tenth of a completion's cost.
--
-- Attempts that did not end the job (failures, continued runs, cancellations, expired leases)
-- are rows of job_attempts as before. runledger.job_attempt_history lists both; jobs that
-- succeeded before this migration kept their stored row and no worker on the job, and are
-- listed once.
CREATE VIEW runledger.job_attempt_history AS
SELECT job_id, attempt, worker_id, outcome, failure_kind, error_code, error_message, leased_at,
       started_at, finished_at
FROM runledger.job_attempts
UNION ALL
SELECT q.id, q.attempt, q.worker_id, 'SUCCEEDED', NULL, NULL, NULL, q.leased_at, q.started_at,
       q.finished_at
FROM runledger.job_queue q
WHERE q.status = 'SUCCEEDED' AND q.worker_id IS NOT NULL AND q.leased_at IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM runledger.job_attempts a WHERE a.job_id = q.id AND a.attempt = q.attempt
  );
