-- Reliability under hostile input: values that cannot be read back are never leased or
-- returned raw, retry delays stay within PostgreSQL's interval range, and idempotency keys are
-- scoped to their organization and type.

-- Whether a JSON document nests arrays and objects deeper than the 127 levels serde_json (and
-- so the Rust side) decodes: a container at level 127 (the root is level 0) means 128 levels.
-- Inlined by the planner; it walks the document once.
CREATE FUNCTION runledger.json_too_deep(value jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT jsonb_path_exists(
        value, 'strict $.**{127} ? (@.type() == "object" || @.type() == "array")'
    )
$$;

-- `value` as reads return it: a document too deep to decode is replaced by a small object
-- naming the problem, so one such row never fails a whole page.
CREATE FUNCTION runledger.readable_json(value jsonb, code text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN runledger.json_too_deep(value) THEN jsonb_build_object(
            'unreadable', code,
            'message', 'the stored JSON nests deeper than 127 levels; read the column with SQL'
        )
        ELSE value
    END
$$;

-- Retry delays are capped at 365 days whatever a definition row says, so a retryable failure
-- can always be recorded.
CREATE OR REPLACE FUNCTION runledger.retry_backoff(attempts_used integer, base_ms bigint, cap_ms bigint)
RETURNS interval
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT make_interval(secs => (capped / 2 + random() * capped / 2) / 1000.0)
    FROM (
        SELECT least(
            cap_ms::float8,
            31536000000::float8,
            base_ms::float8 * power(2::float8, least(greatest(attempts_used, 1) - 1, 62))
        ) AS capped
    ) AS delay
$$;

-- Idempotency keys belong to one organization (or to jobs without one) and one job type: a
-- key used by one tenant never collides with, or reveals, another tenant's job.
DROP INDEX runledger.job_queue_idempotency_key_key;
CREATE UNIQUE INDEX job_queue_idempotency_key_key
    ON runledger.job_queue (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        idempotency_key
    )
    WHERE idempotency_key IS NOT NULL;

DROP INDEX runledger.workflow_runs_idempotency_key_key;
CREATE UNIQUE INDEX workflow_runs_idempotency_key_key
    ON runledger.workflow_runs (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        workflow_type,
        idempotency_key
    )
    WHERE idempotency_key IS NOT NULL;
