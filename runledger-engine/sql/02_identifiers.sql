-- The shape of a name: job types, queues, workflow types, step keys, schedule names, mutation
-- and configuration keys: not blank, at most 255 characters. The tables' CHECK constraints call
-- it as the last line of defence; the Rust side refuses a bad name before it writes
-- (`core::jobs::identifiers`, `postgres::input`), with an error code that names the field.
--
-- `job_queue_resource_key_valid` writes the rule out instead of calling this function: a CHECK
-- that calls an SQL function has it inlined, which means parsing the function's body, at every
-- statement that writes a job row.
CREATE FUNCTION runledger.is_valid_identifier(value text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT value IS NOT NULL AND btrim(value) <> '' AND char_length(value) <= 255
$$;
