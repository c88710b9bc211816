-- Batch writes whose plans hold whatever the tables' size was when they were planned.
--
-- The lease-fenced writes (successes, heartbeats, the mark of long runners, continuations) and
-- the workflow release join an array of keys to a table. Their plans are generic: planned once
-- per connection and kept. A connection that first ran one of them while its table was small
-- (a new database, a queue just emptied) kept a plan that read the whole table and matched
-- each row against the array, since on a table of a few pages that is the cheaper plan: once
-- the table had grown, every batch read all of it (a batch of 512 successes on 20,000 jobs
-- took 53 ms instead of 4; the release of a workflow's 1,000 dependents 100 ms instead of 15).
--
-- Every table a batch reads is now bounded by the keys it is given, as an index condition
-- (`id = ANY (...)`), and the bounded rows are joined by hashing instead of a nested loop (a
-- nested loop over two sets of n rows compares n x n pairs when the planner takes the wrong
-- one as the outer side). Neither depends on the table's size or statistics. The workflow
-- functions keep one generic plan too, as the lease-fenced writes do.

CREATE OR REPLACE FUNCTION runledger.complete_jobs_success(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_outputs jsonb[], p_progress jsonb[]
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET status = 'SUCCEEDED',
        output = s.output,
        progress = coalesce(s.progress, q.progress),
        started_at = coalesce(q.started_at, q.leased_at),
        lease_expires_at = NULL,
        finished_at = now(),
        updated_at = now()
    FROM unnest(p_ids, p_attempts, p_outputs, p_progress) AS s(id, attempt, output, progress)
    WHERE q.id = ANY (p_ids) AND q.id = s.id AND q.attempt = s.attempt
      AND q.worker_id = p_worker_id
      AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
    RETURNING q.id;
END;
$$;

CREATE OR REPLACE FUNCTION runledger.heartbeat_jobs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_lease_seconds double precision
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET lease_expires_at = now() + make_interval(secs => p_lease_seconds)
    FROM unnest(p_ids, p_attempts) AS h(id, attempt)
    WHERE q.id = ANY (p_ids) AND q.id = h.id AND q.attempt = h.attempt
      AND q.worker_id = p_worker_id
      AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
    RETURNING q.id;
END;
$$;

CREATE OR REPLACE FUNCTION runledger.mark_jobs_running(
    p_worker_id text, p_ids uuid[], p_attempts integer[]
) RETURNS SETOF uuid
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    UPDATE runledger.job_queue q
    SET started_at = coalesce(q.started_at, now())
    FROM unnest(p_ids, p_attempts) AS m(id, attempt)
    WHERE q.id = ANY (p_ids) AND q.id = m.id AND q.attempt = m.attempt
      AND q.worker_id = p_worker_id
      AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
    RETURNING q.id;
END;
$$;

-- A step job's permission to continue is read per job, by its step's key.
CREATE OR REPLACE FUNCTION runledger.continue_jobs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_delays double precision[],
    p_checkpoints jsonb[], p_progress jsonb[]
) RETURNS TABLE (id uuid, allowed boolean, run_number integer, next_run_at timestamptz)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_nestloop = off
SET enable_hashjoin = on
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH current AS (
        SELECT q.id, c.delay_secs, c.checkpoint, c.progress,
               (q.workflow_step_id IS NULL OR coalesce((
                   SELECT s.continuation_allowed FROM runledger.workflow_steps s
                   WHERE s.id = q.workflow_step_id
               ), false)) AS allowed
        FROM unnest(p_ids, p_attempts, p_delays, p_checkpoints, p_progress)
             AS c(id, attempt, delay_secs, checkpoint, progress)
        JOIN runledger.job_queue q ON q.id = c.id
        WHERE q.id = ANY (p_ids) AND q.attempt = c.attempt AND q.worker_id = p_worker_id
          AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
        ORDER BY q.id
        FOR UPDATE OF q
    ),
    continued AS (
        UPDATE runledger.job_queue q
        SET status = 'PENDING',
            next_run_at = now() + make_interval(secs => c.delay_secs),
            attempt_floor = q.attempt,
            run_number = q.run_number + 1,
            checkpoint = coalesce(c.checkpoint, q.checkpoint),
            progress = coalesce(c.progress, q.progress),
            worker_id = NULL,
            lease_expires_at = NULL,
            updated_at = now()
        FROM current c
        WHERE q.id = ANY (p_ids) AND q.id = c.id AND c.allowed
        RETURNING q.id, q.job_type, q.gated, q.attempt, q.leased_at, q.started_at,
                  q.run_number, q.next_run_at
    ),
    attempt_row AS (
        INSERT INTO runledger.job_attempts (job_id, attempt, worker_id, outcome, leased_at, started_at)
        SELECT n.id, n.attempt, p_worker_id, 'SUCCEEDED', n.leased_at, coalesce(n.started_at, n.leased_at)
        FROM continued n
    ),
    event AS (
        INSERT INTO runledger.job_events (job_id, event_type, attempt, worker_id, details)
        SELECT n.id, 'CONTINUED', n.attempt, p_worker_id,
               jsonb_build_object('run_number', n.run_number, 'next_run_at', n.next_run_at)
        FROM continued n
    ),
    notified AS (
        SELECT pg_notify(runledger.job_wake_channel(t.gated), t.job_type)
        FROM (
            SELECT DISTINCT n.job_type, n.gated FROM continued n WHERE n.next_run_at <= now()
        ) t
    )
    SELECT c.id, c.allowed, n.run_number, n.next_run_at
    FROM current c
    LEFT JOIN continued n ON n.id = c.id
    -- Read so that the notifications are sent: a CTE nothing reads is not run.
    WHERE (SELECT count(*) FROM notified) >= 0;
END;
$$;

-- The jobs of released steps take their run's settings from the runs of those steps only.
CREATE OR REPLACE FUNCTION runledger.workflow_insert_step_jobs(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_types text[];
    v_gated_types text[];
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;

    WITH steps AS MATERIALIZED (
        SELECT s.id, s.job_id, s.job_type, s.organization_id, s.payload, s.priority,
               s.max_attempts, s.timeout_seconds, s.workflow_run_id, s.step_key, s.resource_key
        FROM runledger.workflow_steps s
        WHERE s.id = ANY(p_steps) AND s.step_kind = 'JOB' AND s.status = 'ENQUEUED'
    ),
    -- Whether a type's jobs are under a global limit is decided once per type.
    definitions AS MATERIALIZED (
        SELECT d.job_type, d.priority, d.max_attempts, d.timeout_seconds, d.queue,
               runledger.job_gated(d.global_concurrency IS NOT NULL, d.queue) AS limited
        FROM runledger.job_definitions d
        WHERE d.job_type = ANY (ARRAY(SELECT DISTINCT job_type FROM steps))
    ),
    runs AS MATERIALIZED (
        SELECT w.id, w.organization_id, w.trace_context
        FROM runledger.workflow_runs w
        WHERE w.id = ANY (ARRAY(SELECT DISTINCT workflow_run_id FROM steps))
    ),
    jobs AS (
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            workflow_run_id, workflow_step_id, workflow_step_key, queue, resource_key, gated,
            trace_context
        )
        SELECT s.job_id, s.job_type, coalesce(s.organization_id, w.organization_id), s.payload,
               coalesce(s.priority, d.priority), coalesce(s.max_attempts, d.max_attempts),
               coalesce(s.timeout_seconds, d.timeout_seconds), s.workflow_run_id, s.id,
               s.step_key, d.queue, s.resource_key,
               s.resource_key IS NOT NULL OR d.limited,
               w.trace_context
        FROM steps s
        JOIN runs w ON w.id = s.workflow_run_id
        JOIN definitions d ON d.job_type = s.job_type
        RETURNING job_type, gated
    )
    SELECT array_agg(DISTINCT job_type) FILTER (WHERE NOT gated),
           array_agg(DISTINCT job_type) FILTER (WHERE gated)
    INTO v_types, v_gated_types
    FROM jobs;

    -- A released step's job is due at once.
    PERFORM pg_notify(runledger.job_wake_channel(false), t.job_type)
    FROM unnest(v_types) AS t(job_type);
    PERFORM pg_notify(runledger.job_wake_channel(true), t.job_type)
    FROM unnest(v_gated_types) AS t(job_type);
END;
$$;

-- The countdown first reads the finished steps' edges, counted per dependent, then updates
-- those dependents by their keys.
CREATE OR REPLACE FUNCTION runledger.workflow_release_dependents(p_finished uuid[], p_failed uuid[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_frontier uuid[] := p_finished;
    v_failed uuid[] := coalesce(p_failed, '{}');
    v_dependents uuid[];
    v_done int[];
    v_bad int[];
    v_jobs uuid[];
    v_doomed uuid[];
BEGIN
    WHILE v_frontier IS NOT NULL AND cardinality(v_frontier) > 0 LOOP
        SELECT array_agg(e.step_id), array_agg(e.done), array_agg(e.bad)
        INTO v_dependents, v_done, v_bad
        FROM (
            SELECT d.step_id,
                   count(*)::int AS done,
                   (count(*) FILTER (
                       WHERE d.condition = 'SUCCESS' AND d.depends_on_step_id = ANY(v_failed)
                   ))::int AS bad
            FROM runledger.workflow_step_dependencies d
            WHERE d.depends_on_step_id = ANY(v_frontier)
            GROUP BY d.step_id
        ) e;
        EXIT WHEN v_dependents IS NULL;

        WITH counted AS (
            UPDATE runledger.workflow_steps s
            SET deps_pending = s.deps_pending - e.done,
                deps_unsatisfied = s.deps_unsatisfied + e.bad,
                status = CASE WHEN s.deps_pending = e.done AND s.deps_unsatisfied + e.bad = 0
                              THEN runledger.workflow_released_status(s.step_kind)
                              ELSE s.status END,
                job_id = CASE WHEN s.deps_pending = e.done AND s.deps_unsatisfied + e.bad = 0
                                   AND s.step_kind = 'JOB'
                              THEN runledger.uuidv7() ELSE s.job_id END,
                updated_at = now()
            FROM unnest(v_dependents, v_done, v_bad) AS e(step_id, done, bad)
            WHERE s.id = ANY (v_dependents) AND s.id = e.step_id AND s.status = 'BLOCKED'
            RETURNING s.id, s.status, s.deps_pending, s.deps_unsatisfied
        )
        SELECT array_agg(id) FILTER (WHERE status = 'ENQUEUED'),
               array_agg(id) FILTER (WHERE deps_pending = 0 AND deps_unsatisfied > 0)
        INTO v_jobs, v_doomed
        FROM counted;

        PERFORM runledger.workflow_insert_step_jobs(v_jobs);
        PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
        -- Canceled steps finished without succeeding: their dependents count them as failed.
        v_frontier := v_doomed;
        v_failed := coalesce(v_doomed, '{}');
    END LOOP;
END;
$$;

-- Marks steps terminal (those that are not already) and drives their runs forward; steps of a
-- canceled run are recorded but release nothing. Returns the steps it finished.
CREATE OR REPLACE FUNCTION runledger.workflow_finish_steps(
    p_steps uuid[],
    p_statuses text[],
    p_outputs jsonb[],
    p_error_codes text[],
    p_error_messages text[],
    p_reasons text[]
) RETURNS uuid[]
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_nestloop = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_finished uuid[];
    v_failed uuid[];
    v_runs uuid[];
    v_live uuid[];
    v_live_runs uuid[];
    v_run uuid;
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN '{}';
    END IF;

    WITH input AS (
        SELECT *
        FROM unnest(p_steps, p_statuses, p_outputs, p_error_codes, p_error_messages, p_reasons)
             AS i(step_id, status, output, error_code, error_message, reason)
    ),
    finished AS (
        UPDATE runledger.workflow_steps s
        SET status = i.status,
            output = CASE WHEN i.status = 'SUCCEEDED' THEN i.output END,
            last_error_code = i.error_code,
            last_error_message = i.error_message,
            status_reason = i.reason,
            finished_at = now(),
            updated_at = now()
        FROM input i
        WHERE s.id = ANY (p_steps) AND s.id = i.step_id
          AND s.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')
        RETURNING s.id, s.workflow_run_id, s.status
    )
    SELECT array_agg(id),
           array_agg(id) FILTER (WHERE status <> 'SUCCEEDED'),
           array_agg(DISTINCT workflow_run_id)
    INTO v_finished, v_failed, v_runs
    FROM finished;
    IF v_finished IS NULL THEN
        RETURN '{}';
    END IF;

    -- From here on the runs' other steps are read: under their rows' locks, taken in id order,
    -- so batches of one run, appends and cancellations see each other's committed work.
    PERFORM 1 FROM runledger.workflow_runs WHERE id = ANY(v_runs) ORDER BY id FOR UPDATE;

    -- After a cancellation nothing is released.
    SELECT array_agg(w.id) INTO v_live_runs
    FROM runledger.workflow_runs w
    WHERE w.id = ANY(v_runs) AND w.status <> 'CANCELED';
    IF v_live_runs IS NOT NULL THEN
        IF cardinality(v_live_runs) = cardinality(v_runs) THEN
            v_live := v_finished;
        ELSE
            SELECT array_agg(s.id) INTO v_live
            FROM runledger.workflow_steps s
            WHERE s.id = ANY(v_finished) AND s.workflow_run_id = ANY(v_live_runs);
        END IF;
        PERFORM runledger.workflow_release_dependents(v_live, v_failed);
        FOREACH v_run IN ARRAY v_live_runs LOOP
            PERFORM runledger.workflow_refresh_run(v_run);
        END LOOP;
    END IF;
    RETURN v_finished;
END;
$$;
