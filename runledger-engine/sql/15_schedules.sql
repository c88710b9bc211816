-- Schedules: the deterministic jitter of a fire.

-- The jitter of one fire, in [0, p_max_seconds] seconds: it depends only on the schedule's name
-- and the fire's nominal time, so every worker computes the same due time and a fire is never
-- delayed differently by different processes. Read by
-- `postgres::jobs::schedules::materialize_due_schedules`.
CREATE FUNCTION runledger.schedule_jitter(p_name text, p_fire timestamptz, p_max_seconds integer)
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_max_seconds IS NULL OR p_max_seconds <= 0 THEN interval '0'
        ELSE make_interval(secs => (
            (hashtextextended(p_name || '@' || extract(epoch FROM p_fire)::text, 0) % (p_max_seconds + 1)
             + (p_max_seconds + 1)) % (p_max_seconds + 1)
        )::double precision)
    END
$$;
