-- The stage of a job: a finer view of its status that tells a job waiting for its first attempt
-- from one waiting for a retry, and a leased job whose handler has not started yet from one
-- whose handler runs. It is derived from the row (stored, so that reads and indexes need no
-- computation) and can never disagree with the status: a succeeded job is always COMPLETED.
ALTER TABLE runledger.job_queue
    ADD COLUMN stage text NOT NULL GENERATED ALWAYS AS (
        CASE status
            WHEN 'PENDING' THEN CASE WHEN attempt > attempt_floor THEN 'RETRY_SCHEDULED'
                                     ELSE 'QUEUED' END
            WHEN 'LEASED' THEN CASE WHEN started_at IS NULL THEN 'LEASED' ELSE 'RUNNING' END
            WHEN 'SUCCEEDED' THEN 'COMPLETED'
            WHEN 'DEAD_LETTERED' THEN 'DEAD_LETTERED'
            ELSE 'CANCELED'
        END
    ) STORED;
