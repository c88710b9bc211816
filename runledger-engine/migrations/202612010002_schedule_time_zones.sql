-- Schedules: the IANA time zone a schedule's cron expression is evaluated in. Existing
-- schedules keep firing in UTC. The engine validates names against the IANA database before it
-- writes them.
ALTER TABLE runledger.job_schedules
    ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC'
        CONSTRAINT job_schedules_time_zone_not_blank CHECK (btrim(time_zone) <> '');
