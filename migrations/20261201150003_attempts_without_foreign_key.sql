-- Every completion writes one attempt row, and the foreign key from `job_attempts` to
-- `job_queue` checked each of them with a lookup and a KEY SHARE lock on a job row the same
-- statement had just updated: about a third of a batched success's cost. Attempt rows are only
-- written by the statements that end an attempt, for the job they update, so the key added no
-- protection there; what it did add, deleting a job's attempts with the job, is now a
-- statement-level trigger (one set-based delete per deleting statement, cascades from a
-- deleted workflow run included).
ALTER TABLE runledger.job_attempts DROP CONSTRAINT job_attempts_job_fkey;

CREATE FUNCTION runledger.delete_job_attempts() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM runledger.job_attempts a
    USING deleted_jobs d
    WHERE a.job_id = d.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_delete_attempts
    AFTER DELETE ON runledger.job_queue
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION runledger.delete_job_attempts();
