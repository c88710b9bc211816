-- Fewer index entries on the hot path. A status change cannot be a HOT update, so every index
-- of `job_queue` gets a new entry at each transition (enqueue, claim, completion), whether or
-- not its columns changed. Two full indexes served only operator reads and the pruner; they
-- are replaced by partial indexes that a job enters once, when it finishes (or, for the
-- status index, only when it fails). Pending and leased jobs are read through the claim and
-- lease indexes the queue keeps anyway. On the claim-and-complete loop this is about a quarter
-- of the statements' cost.
DROP INDEX runledger.job_queue_status_idx;
DROP INDEX runledger.job_queue_type_idx;

-- Finished jobs by type, oldest or newest first: the queue screen's type filter and the
-- pruner's per-type scan below a cutoff id.
CREATE INDEX job_queue_finished_type_idx
    ON runledger.job_queue (job_type, id)
    WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED');

-- Failed jobs by status, newest first (successes are the bulk of the history and are read
-- through the primary key).
CREATE INDEX job_queue_failed_idx
    ON runledger.job_queue (status, id) WHERE status IN ('DEAD_LETTERED', 'CANCELED');

-- Enqueue already refuses a job type without an enabled definition, in the same statement,
-- and definitions are never deleted: the foreign key only added a lookup and a KEY SHARE lock
-- on the definition row for every inserted job, which also made concurrent enqueuers of one
-- type contend on that row.
ALTER TABLE runledger.job_queue DROP CONSTRAINT job_queue_definition_fkey;
