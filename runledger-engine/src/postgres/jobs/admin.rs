//! Operator and maintenance transitions: cancel, requeue, running waiting jobs now, and reaping
//! expired leases.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::core::jobs::{JobId, JobStatus};
use crate::postgres::error::{Error, Result};
use crate::postgres::jobs::reads::JobRecord;
use crate::postgres::jobs::scope::TenantScope;

/// Cancels a `PENDING` or `LEASED` direct job within `scope`. A worker still running a
/// canceled job gets `job.lease_owner_mismatch` when it reports back, and nothing changes.
///
/// Fails with `job.not_found` (also for a job outside `scope`), `job.cancel_invalid_state`
/// (already terminal) or `job.workflow_cancel_not_supported` (a workflow step: cancel the run
/// instead).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger_engine::core::jobs::JobId)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{cancel_job, TenantScope};
///
/// cancel_job(&pool, job_id, TenantScope::Admin).await?;
/// # Ok(()) }
/// ```
pub async fn cancel_job<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
) -> Result<()> {
    let (scoped, organization) = scope.sql();
    let row = sqlx::query!(
        r#"
        WITH current AS (
            SELECT id, status, attempt, workflow_run_id, worker_id, leased_at, started_at
            FROM runledger.job_queue
            WHERE id = $1 AND (NOT $2 OR organization_id IS NOT DISTINCT FROM $3)
            FOR UPDATE
        ),
        canceled AS (
            UPDATE runledger.job_queue q
            SET status = 'CANCELED', worker_id = NULL, lease_expires_at = NULL,
                finished_at = now(), updated_at = now()
            FROM current c
            WHERE q.id = c.id AND c.status IN ('PENDING', 'LEASED') AND c.workflow_run_id IS NULL
            RETURNING q.id, q.attempt, c.status AS previous_status, c.worker_id AS previous_worker_id,
                      c.leased_at, c.started_at
        ),
        attempt_row AS (
            INSERT INTO runledger.job_attempts (job_id, attempt, worker_id, outcome, leased_at, started_at)
            SELECT id, attempt, previous_worker_id, 'CANCELED', leased_at, started_at
            FROM canceled
            WHERE previous_status = 'LEASED'
        ),
        event AS (
            INSERT INTO runledger.job_events (job_id, event_type, attempt, details)
            SELECT id, 'CANCELED', attempt, jsonb_build_object('previous_status', previous_status)
            FROM canceled
        )
        SELECT c.status AS "status: JobStatus",
               (c.workflow_run_id IS NOT NULL) AS "in_workflow!",
               EXISTS (SELECT 1 FROM canceled) AS "canceled!"
        FROM current c
        "#,
        job_id.0,
        scoped,
        organization,
    )
    .fetch_optional(executor)
    .await?;
    transition_result(
        job_id,
        row.map(|r| (r.status, r.in_workflow, r.canceled)),
        "canceled",
        Error::WorkflowCancelNotSupported { job_id },
    )
}

/// Makes `PENDING` jobs of `job_types` that are waiting for a time up to `up_to` (a delay, or
/// the backoff before a retry) claimable now, and wakes the workers. Returns how many jobs
/// were moved.
///
/// Operators use it to run delayed work at once; tests use it to go through retries and
/// delays without sleeping (`runledger::testing::drain` does).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use chrono::{TimeDelta, Utc};
///
/// let types = vec!["emails.send".to_owned()];
/// let moved = runledger_engine::postgres::jobs::run_waiting_jobs_now(
///     &pool,
///     Utc::now() + TimeDelta::hours(1),
///     &types,
/// )
/// .await?;
/// # let _ = moved;
/// # Ok(()) }
/// ```
pub async fn run_waiting_jobs_now<'e>(
    executor: impl PgExecutor<'e>,
    up_to: DateTime<Utc>,
    job_types: &[String],
) -> Result<u64> {
    let row = sqlx::query!(
        r#"
        WITH moved AS (
            UPDATE runledger.job_queue
            SET next_run_at = now(), updated_at = now()
            WHERE status = 'PENDING' AND next_run_at > now() AND next_run_at <= $1
              AND job_type = ANY($2)
            RETURNING job_type, gated
        ),
        woken AS (
            SELECT pg_notify(runledger.job_wake_channel(gated), job_type)
            FROM (SELECT DISTINCT job_type, gated FROM moved) t
        )
        SELECT (SELECT count(*) FROM moved) AS "moved!", (SELECT count(*) FROM woken) AS "woken!"
        "#,
        up_to,
        job_types,
    )
    .fetch_one(executor)
    .await?;
    Ok(u64::try_from(row.moved).unwrap_or(0))
}

/// Turns the outcome of a guarded operator transition into the caller's result.
fn transition_result(
    job_id: JobId,
    found: Option<(JobStatus, bool, bool)>,
    operation: &'static str,
    workflow_error: Error,
) -> Result<()> {
    match found {
        None => Err(Error::JobNotFound { job_id }),
        Some((_, _, true)) => Ok(()),
        Some((_, true, false)) => Err(workflow_error),
        Some((status, false, false)) => Err(Error::InvalidJobState {
            job_id,
            status,
            operation,
        }),
    }
}

/// Puts a `DEAD_LETTERED` or `CANCELED` direct job within `scope` back in the queue, due now,
/// with a fresh allowance of attempts: a new run (its `run_number` grows by one). Its history
/// (attempts, events, dead letters) is kept.
///
/// Fails with `job.not_found` (also for a job outside `scope`), `job.requeue_invalid_state`,
/// or `job.workflow_requeue_not_supported` for a workflow step (requeuing it would bypass the
/// DAG). [`requeue_job_if`] requeues only while the state the caller saw still holds.
pub async fn requeue_job<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
) -> Result<()> {
    requeue(executor, job_id, scope, None).await.map(|_| ())
}

/// The state a caller saw before deciding to requeue a job: its status and run number (a
/// requeue starts a new run, so the pair identifies one failure of one run).
///
/// ```
/// use runledger_engine::core::jobs::JobStatus;
/// use runledger_engine::postgres::jobs::JobRequeueExpectation;
///
/// let seen = JobRequeueExpectation::new(JobStatus::DeadLettered, 1);
/// assert_eq!(seen.run_number, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobRequeueExpectation {
    /// The status the caller saw (`DEAD_LETTERED` or `CANCELED` for a requeue to happen).
    pub status: JobStatus,
    /// The run number the caller saw.
    pub run_number: i32,
}

impl JobRequeueExpectation {
    /// The caller saw the job in `status` during run `run_number`.
    pub fn new(status: JobStatus, run_number: i32) -> Self {
        Self { status, run_number }
    }
}

impl From<&JobRecord> for JobRequeueExpectation {
    fn from(job: &JobRecord) -> Self {
        Self::new(job.status, job.run_number)
    }
}

/// What [`requeue_job_if`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobRequeueOutcome {
    /// The job was requeued and is in this new run.
    Requeued {
        /// The run the requeue started.
        run_number: i32,
    },
    /// The job is no longer in the state the caller saw (someone else requeued it, or it ran
    /// again); nothing changed.
    ExpectationMismatch {
        /// Its status now.
        status: JobStatus,
        /// Its run number now.
        run_number: i32,
    },
}

/// Compare-and-requeue: requeues a `DEAD_LETTERED` or `CANCELED` direct job within `scope` only
/// while its status and run number are still those the caller saw, so two operators acting on
/// the same failure (or one acting on a stale screen) requeue it once. Otherwise returns
/// [`JobRequeueOutcome::ExpectationMismatch`] with the current state and changes nothing.
///
/// Fails like [`requeue_job`]: `job.not_found`, `job.workflow_requeue_not_supported`, and
/// `job.requeue_invalid_state` when the expectation holds but names a status that cannot be
/// requeued.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger_engine::core::jobs::JobId)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{
///     JobRequeueExpectation, JobRequeueOutcome, TenantScope, get_job_by_id, requeue_job_if,
/// };
///
/// if let Some(job) = get_job_by_id(&pool, job_id, TenantScope::Admin).await? {
///     // ... an operator looks at the failure and decides ...
///     match requeue_job_if(&pool, job_id, TenantScope::Admin, (&job).into()).await? {
///         JobRequeueOutcome::Requeued { run_number } => println!("run {run_number} started"),
///         _ => println!("someone else acted first"),
///     }
/// }
/// # Ok(()) }
/// ```
pub async fn requeue_job_if<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
    expected: JobRequeueExpectation,
) -> Result<JobRequeueOutcome> {
    requeue(executor, job_id, scope, Some(expected)).await
}

/// One statement for both requeues; `expected: None` requeues whatever the run.
async fn requeue<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
    expected: Option<JobRequeueExpectation>,
) -> Result<JobRequeueOutcome> {
    let (scoped, organization) = scope.sql();
    let row = sqlx::query!(
        r#"
        WITH current AS (
            SELECT id, status, run_number, workflow_run_id, organization_id, job_type, attempt,
                   unique_key, unique_while
            FROM runledger.job_queue
            WHERE id = $1 AND (NOT $2 OR organization_id IS NOT DISTINCT FROM $3)
            FOR UPDATE
        ),
        -- A unique key taken meanwhile by another job: the requeue would make two holders (a
        -- queued singleton holds its key again only if it never started).
        holder AS (
            SELECT h.id
            FROM current c
            CROSS JOIN LATERAL runledger.unique_key_holder(
                c.organization_id, c.job_type, c.unique_key, c.unique_while
            ) AS h
            WHERE h.id <> c.id AND (c.unique_while <> 'QUEUED' OR c.attempt = 0)
        ),
        requeued AS (
            UPDATE runledger.job_queue q
            SET status = 'PENDING', next_run_at = now(), attempt_floor = q.attempt,
                run_number = q.run_number + 1, finished_at = NULL, output = NULL,
                progress = NULL, updated_at = now(),
                gated = q.resource_key IS NOT NULL
                        OR runledger.job_is_limited(q.job_type, q.queue)
            FROM current c
            WHERE q.id = c.id AND c.status IN ('DEAD_LETTERED', 'CANCELED')
              AND c.workflow_run_id IS NULL
              AND ($4::text IS NULL OR (c.status = $4 AND c.run_number = $5))
              AND NOT EXISTS (SELECT 1 FROM holder)
            RETURNING q.id, q.attempt, q.job_type, q.gated, q.run_number,
                      c.status AS previous_status
        ),
        event AS (
            INSERT INTO runledger.job_events (job_id, event_type, attempt, details)
            SELECT id, 'REQUEUED', attempt,
                   jsonb_build_object('previous_status', previous_status, 'run_number', run_number)
            FROM requeued
        )
        SELECT c.status AS "status: JobStatus",
               c.run_number,
               (c.workflow_run_id IS NOT NULL) AS "in_workflow!",
               (SELECT run_number FROM requeued) AS requeued_run,
               (SELECT id FROM holder) AS holder,
               (SELECT pg_notify(runledger.job_wake_channel(gated), job_type) IS NULL
                FROM requeued) AS notified
        FROM current c
        "#,
        job_id.0,
        scoped,
        organization,
        expected.map(|e| e.status.as_str()),
        expected.map_or(0, |e| e.run_number),
    )
    .fetch_optional(executor)
    .await
    .map_err(|err| unique_key_taken(err, job_id))?;
    let Some(row) = row else {
        return Err(Error::JobNotFound { job_id });
    };
    if let Some(run_number) = row.requeued_run {
        return Ok(JobRequeueOutcome::Requeued { run_number });
    }
    if row.in_workflow {
        return Err(Error::WorkflowRequeueNotSupported { job_id });
    }
    let requeuable = matches!(row.status, JobStatus::DeadLettered | JobStatus::Canceled);
    if let (true, Some(holder)) = (requeuable, row.holder) {
        return Err(Error::UniqueKeyTaken {
            job_id,
            holder: Some(JobId(holder)),
        });
    }
    match expected {
        Some(seen) if seen.status != row.status || seen.run_number != row.run_number => {
            Ok(JobRequeueOutcome::ExpectationMismatch {
                status: row.status,
                run_number: row.run_number,
            })
        }
        _ => Err(Error::InvalidJobState {
            job_id,
            status: row.status,
            operation: "requeued",
        }),
    }
}

/// A requeue that met a singleton's unique index: a job enqueued with the key while the
/// requeue ran took it first (the requeue's own check did not see it yet).
fn unique_key_taken(err: sqlx::Error, job_id: JobId) -> Error {
    let taken = err
        .as_database_error()
        .and_then(|db| db.constraint())
        .is_some_and(|name| name.starts_with("job_queue_unique_"));
    if taken {
        Error::UniqueKeyTaken {
            job_id,
            holder: None,
        }
    } else {
        err.into()
    }
}

/// A lease the reaper took back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReapedLease {
    /// The job.
    pub job_id: JobId,
    /// Its type.
    pub job_type: String,
    /// Its queue.
    pub queue: String,
    /// The attempt whose lease expired.
    pub attempt: i32,
    /// The worker that held it.
    pub worker_id: String,
    /// Whether the handler had been marked running before the lease expired.
    pub started: bool,
    /// What happened to the job.
    pub status: JobStatus,
    /// When a retried job becomes claimable again.
    pub next_run_at: DateTime<Utc>,
}

/// Takes back up to `limit` expired leases in one statement: each job is retried after
/// `retry_delay`, or dead-lettered with `LEASE_EXPIRED` when it has used all its attempts.
/// Rows other reapers are processing are skipped. Call again while the result is full.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use std::time::Duration;
/// use runledger_engine::postgres::jobs::reap_expired_leases;
///
/// loop {
///     let reaped = reap_expired_leases(&pool, 500, Duration::from_secs(1)).await?;
///     if reaped.len() < 500 {
///         break;
///     }
/// }
/// # Ok(()) }
/// ```
pub async fn reap_expired_leases<'e>(
    executor: impl PgExecutor<'e>,
    limit: i64,
    retry_delay: Duration,
) -> Result<Vec<ReapedLease>> {
    if limit <= 0 {
        return Ok(Vec::new());
    }
    let rows = sqlx::query_as!(
        ReapedLease,
        r#"
        WITH expired AS (
            SELECT id, worker_id, leased_at, started_at
            FROM runledger.job_queue
            WHERE status = 'LEASED' AND lease_expires_at <= now()
            ORDER BY lease_expires_at
            LIMIT $1
            FOR UPDATE SKIP LOCKED
        ),
        reaped AS (
            UPDATE runledger.job_queue q
            SET status = CASE WHEN q.attempt - q.attempt_floor >= q.max_attempts
                              THEN 'DEAD_LETTERED' ELSE 'PENDING' END,
                next_run_at = CASE WHEN q.attempt - q.attempt_floor >= q.max_attempts
                                   THEN q.next_run_at
                                   ELSE now() + make_interval(secs => $2) END,
                finished_at = CASE WHEN q.attempt - q.attempt_floor >= q.max_attempts
                                   THEN now() END,
                worker_id = NULL,
                lease_expires_at = NULL,
                last_error_code = 'job.lease_expired',
                last_error_message = 'the worker stopped renewing its lease',
                updated_at = now()
            FROM expired e
            WHERE q.id = e.id
            RETURNING q.id, q.job_type, q.queue, q.organization_id, q.payload, q.attempt,
                      q.status, q.next_run_at, e.worker_id AS previous_worker_id, e.leased_at,
                      e.started_at
        ),
        attempt_row AS (
            INSERT INTO runledger.job_attempts (
                job_id, attempt, worker_id, outcome, failure_kind, error_code, error_message,
                leased_at, started_at
            )
            SELECT id, attempt, previous_worker_id, 'FAILED', 'LEASE_EXPIRED', 'job.lease_expired',
                   'the worker stopped renewing its lease', leased_at, started_at
            FROM reaped
        ),
        dead_letter AS (
            INSERT INTO runledger.job_dead_letters (
                job_id, job_type, organization_id, payload, attempt, failure_kind, error_code,
                error_message
            )
            SELECT id, job_type, organization_id, payload, attempt, 'LEASE_EXPIRED',
                   'job.lease_expired', 'the worker stopped renewing its lease'
            FROM reaped
            WHERE status = 'DEAD_LETTERED'
        ),
        event AS (
            INSERT INTO runledger.job_events (job_id, event_type, attempt, worker_id, details)
            SELECT id, 'LEASE_EXPIRED', attempt, previous_worker_id, '{}'::jsonb FROM reaped
            UNION ALL
            SELECT id, CASE WHEN status = 'DEAD_LETTERED' THEN 'DEAD_LETTERED' ELSE 'RETRY_SCHEDULED' END,
                   attempt, previous_worker_id,
                   jsonb_build_object('failure_kind', 'LEASE_EXPIRED')
            FROM reaped
        )
        SELECT r.id AS "job_id: JobId",
               r.job_type,
               r.queue,
               r.attempt,
               r.previous_worker_id AS "worker_id!",
               (r.started_at IS NOT NULL) AS "started!",
               r.status AS "status: JobStatus",
               r.next_run_at
        FROM reaped r
        "#,
        limit,
        retry_delay.as_secs_f64(),
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
