-- Durable enqueue intents: an outbox. A caller records the wish to enqueue a job inside its own
-- transaction, without the job's definition having to exist yet; the intent promoter of every
-- worker that runs the job type turns pending intents into jobs. The idempotency key is
-- mandatory and scoped like the queue's (organization, job type), so the job an intent becomes
-- carries the same key and the same request snapshot as a direct keyed enqueue would.
CREATE TABLE runledger.job_enqueue_intents (
    id                 uuid        NOT NULL DEFAULT runledger.uuidv7(),
    job_type           text        NOT NULL,
    organization_id    uuid,
    idempotency_key    text        NOT NULL,
    payload            jsonb       NOT NULL,
    priority           integer,
    max_attempts       integer,
    timeout_seconds    integer,
    run_at             timestamptz,
    delay_ms           bigint,
    created_by_user_id uuid,
    -- The canonical request, compared on a retry of the same key (same shape as the queue's).
    enqueue_request    jsonb       NOT NULL,
    status             text        NOT NULL DEFAULT 'PENDING',
    job_id             uuid,
    -- Promotion tries that failed and were deferred.
    attempts           integer     NOT NULL DEFAULT 0,
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    last_error_code    text,
    last_error_message text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    CONSTRAINT job_enqueue_intents_pkey PRIMARY KEY (id),
    CONSTRAINT job_enqueue_intents_job_type_valid CHECK (runledger.is_valid_identifier(job_type)),
    CONSTRAINT job_enqueue_intents_key_not_blank CHECK (btrim(idempotency_key) <> ''),
    CONSTRAINT job_enqueue_intents_status_valid CHECK (status IN ('PENDING', 'PROMOTED', 'CONFLICTED')),
    CONSTRAINT job_enqueue_intents_attempts_valid CHECK (attempts >= 0),
    CONSTRAINT job_enqueue_intents_promoted_has_job CHECK ((status = 'PROMOTED') = (job_id IS NOT NULL)),
    CONSTRAINT job_enqueue_intents_finished_when_terminal CHECK (
        (status IN ('PROMOTED', 'CONFLICTED')) = (finished_at IS NOT NULL)
    )
);

CREATE UNIQUE INDEX job_enqueue_intents_idempotency_key_key
    ON runledger.job_enqueue_intents (
        coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
        job_type,
        idempotency_key
    );

-- The promoter's index: only pending intents, per job type, in the order they become due. A
-- pass reads only the types its worker runs, however many intents other types have waiting.
CREATE INDEX job_enqueue_intents_pending_idx
    ON runledger.job_enqueue_intents (job_type, next_attempt_at)
    WHERE status = 'PENDING';

-- Finished intents by finish time, for "promoted / conflicted in the last 24 h".
CREATE INDEX job_enqueue_intents_finished_idx
    ON runledger.job_enqueue_intents (finished_at)
    INCLUDE (job_type, organization_id, status)
    WHERE status <> 'PENDING';

-- Intent figures per job type, optionally for one organization: the pending backlog (through
-- the promoter's index) and the last day's outcomes (through the finish-time index).
CREATE FUNCTION runledger.job_intent_metrics(p_organization_id uuid)
RETURNS TABLE (
    job_type          text,
    pending           bigint,
    pending_due       bigint,
    deferred          bigint,
    oldest_pending_at timestamptz,
    promoted_24h      bigint,
    conflicted_24h    bigint
)
LANGUAGE sql STABLE
AS $$
    WITH pending AS (
        SELECT i.job_type,
               count(*) AS pending,
               count(*) FILTER (WHERE i.next_attempt_at <= now()) AS pending_due,
               count(*) FILTER (WHERE i.attempts > 0) AS deferred,
               min(i.created_at) AS oldest_pending_at
        FROM runledger.job_enqueue_intents i
        WHERE i.status = 'PENDING'
          AND (p_organization_id IS NULL OR i.organization_id = p_organization_id)
        GROUP BY i.job_type
    ),
    finished AS (
        SELECT i.job_type,
               count(*) FILTER (WHERE i.status = 'PROMOTED') AS promoted_24h,
               count(*) FILTER (WHERE i.status = 'CONFLICTED') AS conflicted_24h
        FROM runledger.job_enqueue_intents i
        WHERE i.status <> 'PENDING'
          AND i.finished_at > now() - interval '24 hours'
          AND (p_organization_id IS NULL OR i.organization_id = p_organization_id)
        GROUP BY i.job_type
    )
    SELECT coalesce(p.job_type, f.job_type),
           coalesce(p.pending, 0),
           coalesce(p.pending_due, 0),
           coalesce(p.deferred, 0),
           p.oldest_pending_at,
           coalesce(f.promoted_24h, 0),
           coalesce(f.conflicted_24h, 0)
    FROM pending p
    FULL JOIN finished f ON f.job_type = p.job_type
$$;
