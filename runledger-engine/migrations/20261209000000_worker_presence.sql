-- Worker presence: which worker processes are alive and what they serve, for explain_job.
CREATE TABLE runledger.worker_presence (
    worker_id  text        NOT NULL,
    -- The job types its handlers run.
    job_types  text[]      NOT NULL,
    -- The queues it claims from; NULL: every queue.
    queues     text[],
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT worker_presence_pkey PRIMARY KEY (worker_id)
);
