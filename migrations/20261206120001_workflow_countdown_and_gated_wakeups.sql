-- Less work per step on a workflow's path, and one claim less per job woken.
--
-- * The countdown reads each finished step's dependents once, grouped by dependent, instead of
--   collecting the dependents first and then looking up each one's finished prerequisites.
--   The finished steps that failed are known to the caller, which passes them.
-- * A new run releases its roots directly: none of its steps can have a finished prerequisite.
-- * The edges lose their index by run. Deleting a run's edges goes through its steps.
-- * `runledger.uuidv7()` reads the clock as a float instead of a numeric.
-- * Jobs under a global limit or holding a resource key (`gated`) wake workers on their own
--   channel, `runledger_gated_jobs`; other jobs keep `runledger_job_queue`. A worker's loop for
--   gated jobs listens to the first only, so a plain job no longer costs every listening worker
--   an empty claim of that loop beside the claim that leases it. Workers that predate the
--   channel find gated jobs by polling.

CREATE OR REPLACE FUNCTION runledger.uuidv7() RETURNS uuid
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

DROP INDEX runledger.workflow_step_dependencies_run_idx;

CREATE OR REPLACE FUNCTION runledger.delete_workflow_run_rows() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM runledger.job_queue q
    USING deleted_runs r
    WHERE q.workflow_run_id = r.id;
    -- Every edge joins two steps of one run: the edges into the run's steps are all of them.
    DELETE FROM runledger.workflow_step_dependencies d
    USING runledger.workflow_steps s, deleted_runs r
    WHERE s.workflow_run_id = r.id AND d.step_id = s.id;
    DELETE FROM runledger.workflow_steps s
    USING deleted_runs r
    WHERE s.workflow_run_id = r.id;
    RETURN NULL;
END;
$$;

-- The channel that wakes workers for a job: gated jobs (under a global limit or holding a
-- resource key) have their own, listened to only by the workers' loops for such jobs.
CREATE FUNCTION runledger.job_wake_channel(p_gated boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_gated THEN 'runledger_gated_jobs' ELSE 'runledger_job_queue' END
$$;

-- Inserts the jobs of job steps that were just marked ENQUEUED with their job's id and wakes
-- the workers of their types, on the channel of each job. The one place where a step becomes a
-- job row.
CREATE OR REPLACE FUNCTION runledger.workflow_insert_step_jobs(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
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
        WHERE d.job_type IN (SELECT job_type FROM steps)
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
        JOIN runledger.workflow_runs w ON w.id = s.workflow_run_id
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

-- Cancels BLOCKED steps whose after_success prerequisite did not succeed.
CREATE OR REPLACE FUNCTION runledger.workflow_cancel_unsatisfied(p_steps uuid[]) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_steps IS NULL OR cardinality(p_steps) = 0 THEN
        RETURN;
    END IF;
    UPDATE runledger.workflow_steps
    SET status = 'CANCELED',
        status_reason = 'workflow.dependency_unsatisfied',
        last_error_code = 'workflow.dependency_unsatisfied',
        last_error_message = 'a prerequisite required to succeed did not succeed',
        finished_at = now(),
        updated_at = now()
    WHERE id = ANY(p_steps);
END;
$$;

-- After the steps in p_finished became terminal (those in p_failed without succeeding): count
-- down their dependents' prerequisites, release in the same row update the dependents that are
-- now free, and cancel (cascading) those whose after_success prerequisite did not succeed. The
-- edges out of the finished steps are read once and counted per dependent.
DROP FUNCTION runledger.workflow_release_dependents(uuid[]);
CREATE FUNCTION runledger.workflow_release_dependents(p_finished uuid[], p_failed uuid[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_frontier uuid[] := p_finished;
    v_failed uuid[] := coalesce(p_failed, '{}');
    v_jobs uuid[];
    v_doomed uuid[];
BEGIN
    WHILE v_frontier IS NOT NULL AND cardinality(v_frontier) > 0 LOOP
        WITH edges AS (
            SELECT d.step_id,
                   count(*)::int AS done,
                   (count(*) FILTER (
                       WHERE d.condition = 'SUCCESS' AND d.depends_on_step_id = ANY(v_failed)
                   ))::int AS bad
            FROM runledger.workflow_step_dependencies d
            WHERE d.depends_on_step_id = ANY(v_frontier)
            GROUP BY d.step_id
        ),
        counted AS (
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
            FROM edges e
            WHERE s.id = e.step_id AND s.status = 'BLOCKED'
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
        WHERE s.id = i.step_id AND s.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')
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

-- Settles steps appended to a run: counts the prerequisites outside them that are already
-- terminal, releases the steps that are free, cancels (with cascade) those whose
-- after_success prerequisite already failed, and refreshes the run. Prerequisites among the new
-- steps are BLOCKED and count for nothing.
CREATE OR REPLACE FUNCTION runledger.workflow_settle_new_steps(p_run uuid, p_steps uuid[])
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_ready uuid[];
    v_doomed uuid[];
BEGIN
    WITH counts AS (
        SELECT d.step_id,
               count(*) FILTER (WHERE p.status IN ('SUCCEEDED', 'FAILED', 'CANCELED')) AS done,
               count(*) FILTER (WHERE d.condition = 'SUCCESS' AND p.status IN ('FAILED', 'CANCELED')) AS bad
        FROM runledger.workflow_step_dependencies d
        JOIN runledger.workflow_steps p ON p.id = d.depends_on_step_id
        WHERE d.step_id = ANY(p_steps) AND NOT d.depends_on_step_id = ANY(p_steps)
        GROUP BY d.step_id
    )
    UPDATE runledger.workflow_steps s
    SET deps_pending = s.deps_pending - c.done, deps_unsatisfied = c.bad
    FROM counts c
    WHERE s.id = c.step_id AND (c.done > 0 OR c.bad > 0);

    SELECT array_agg(id) FILTER (WHERE deps_unsatisfied = 0),
           array_agg(id) FILTER (WHERE deps_unsatisfied > 0)
    INTO v_ready, v_doomed
    FROM runledger.workflow_steps
    WHERE id = ANY(p_steps) AND status = 'BLOCKED' AND deps_pending = 0;

    PERFORM runledger.workflow_release_steps(v_ready);
    PERFORM runledger.workflow_cancel_unsatisfied(v_doomed);
    PERFORM runledger.workflow_release_dependents(v_doomed, v_doomed);
    RETURN runledger.workflow_refresh_run(p_run);
END;
$$;

-- Starts a run just inserted: releases its roots (the steps without prerequisites) and
-- computes its status. No step of a new run has a finished prerequisite to count.
CREATE FUNCTION runledger.workflow_start_run(p_run uuid, p_roots uuid[]) RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM runledger.workflow_release_steps(p_roots);
    RETURN runledger.workflow_refresh_run(p_run);
END;
$$;

-- A continuation due at once wakes the workers of its job's channel.
CREATE OR REPLACE FUNCTION runledger.continue_jobs(
    p_worker_id text, p_ids uuid[], p_attempts integer[], p_delays double precision[],
    p_checkpoints jsonb[], p_progress jsonb[]
) RETURNS TABLE (id uuid, allowed boolean, run_number integer, next_run_at timestamptz)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH current AS (
        SELECT q.id, c.delay_secs, c.checkpoint, c.progress,
               (q.workflow_step_id IS NULL OR coalesce(s.continuation_allowed, false)) AS allowed
        FROM unnest(p_ids, p_attempts, p_delays, p_checkpoints, p_progress)
             AS c(id, attempt, delay_secs, checkpoint, progress)
        JOIN runledger.job_queue q ON q.id = c.id
        LEFT JOIN runledger.workflow_steps s ON s.id = q.workflow_step_id
        WHERE q.attempt = c.attempt AND q.worker_id = p_worker_id
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
        WHERE q.id = c.id AND c.allowed
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
