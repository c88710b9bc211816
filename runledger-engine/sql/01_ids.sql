-- Identifiers: every primary key is a UUIDv7 (time-ordered), generated in Rust (`uuid` v7) or by
-- `runledger.uuidv7()`, so that PostgreSQL 14+ works without the built-in `uuidv7()` of
-- PostgreSQL 18.

-- A new UUIDv7: 48 bits of Unix epoch milliseconds, then random bits with the version and
-- variant set. The default of every uuid primary key. The clock is read as a float
-- (`date_part`), which is cheaper than `extract`'s numeric.
CREATE FUNCTION runledger.uuidv7() RETURNS uuid
LANGUAGE sql PARALLEL SAFE
AS $$
    SELECT encode(
        set_bit(
            set_bit(
                overlay(
                    uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(date_part('epoch', clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6
                ),
                52, 1
            ),
            53, 1
        ),
        'hex'
    )::uuid
$$;

-- The smallest UUIDv7 of the millisecond `at`: every id generated at or after `at` sorts at or
-- above it. Ids are UUIDv7, so `id < runledger.uuidv7_floor(t)` bounds a scan to rows created
-- before `t` through any index that leads with (or ends in) the id. Read by retention
-- (`prunable_jobs`, `prunable_workflow_runs`) and the activity chart
-- (`postgres::jobs::get_job_activity`).
CREATE FUNCTION runledger.uuidv7_floor(at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT encode(
        substring(int8send(floor(extract(epoch FROM at) * 1000)::bigint) FROM 3)
            || '\x00000000000000000000'::bytea,
        'hex'
    )::uuid
$$;
