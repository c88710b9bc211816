//! The worker side of the queue: claim, heartbeat, progress and completion. Every write after
//! the claim is fenced by (job id, attempt, worker id, unexpired lease).
//!
//! The fences say `leased_at IS NOT NULL` rather than `status = 'LEASED'`: the table's
//! `job_queue_lease_matches_status` CHECK makes the two equivalent once `worker_id` and
//! `lease_expires_at` are set, but only the second lets the planner pick the partial lease
//! index, and with statistics taken while few jobs were leased it did, scanning every leased
//! row of every worker for each job of a batch. Left with the primary key, each row of a
//! batch is one index lookup.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Acquire, PgExecutor, Postgres};
use uuid::Uuid;

use crate::core::jobs::limits::{
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, is_storable_text, storable_text,
};
use crate::core::jobs::{
    JobContext, JobFailure, JobId, JobProgressUpdate, JobStatus, JobType, WorkflowRunId,
    WorkflowStepId,
};
use crate::core::trace::TraceContext;
use crate::postgres::error::{Error, Result};
use crate::postgres::input::check_json_field;

/// Longest error message stored with a failure, in characters.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 4_000;

/// What to claim and for how long.
///
/// ```
/// use std::time::Duration;
/// use runledger_engine::postgres::jobs::ClaimRequest;
///
/// let types = vec!["emails.send".to_owned()];
/// let request = ClaimRequest::new("worker-1", 32, Duration::from_secs(30)).job_types(&types);
/// assert_eq!(request.limit, 32);
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ClaimRequest<'a> {
    /// The claiming worker's id; every later write must present it.
    pub worker_id: &'a str,
    /// Only these job types (the ones the worker has handlers for); `None` claims any type.
    pub job_types: Option<&'a [String]>,
    /// Only jobs of these queues; `None` claims from every queue. Paused queues are skipped
    /// either way.
    pub queues: Option<&'a [String]>,
    /// At most this many jobs (the worker's free capacity).
    pub limit: i64,
    /// Lease length; heartbeats extend it.
    pub lease_ttl: Duration,
    /// Whether the claim's commit may return before its WAL is flushed (see
    /// [`ClaimRequest::unflushed_commit`]).
    pub unflushed_commit: bool,
}

impl<'a> ClaimRequest<'a> {
    /// A claim of up to `limit` jobs of any type.
    pub fn new(worker_id: &'a str, limit: i64, lease_ttl: Duration) -> Self {
        Self {
            worker_id,
            job_types: None,
            queues: None,
            limit,
            lease_ttl,
            unflushed_commit: false,
        }
    }

    /// Lets the claim's own transaction commit without waiting for its WAL to reach disk
    /// (`synchronous_commit = off` for that transaction only), as the runtime's claim loops do.
    /// A lease is the one write a server crash may then lose, and losing it only makes the job
    /// claimable again, as when a worker dies mid-run: the handler's outcome is written by a
    /// later, flushed commit, which also flushes the claim before it. Use it only on a pool
    /// connection, never inside a transaction of yours, whose commit it would relax too.
    pub fn unflushed_commit(mut self) -> Self {
        self.unflushed_commit = true;
        self
    }

    /// Restricts the claim to these job types.
    pub fn job_types(mut self, job_types: &'a [String]) -> Self {
        self.job_types = Some(job_types);
        self
    }

    /// Restricts the claim to jobs of these queues.
    pub fn queues(mut self, queues: &'a [String]) -> Self {
        self.queues = Some(queues);
        self
    }
}

/// A job leased to a worker.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClaimedJob {
    /// The job's id.
    pub id: JobId,
    /// Its type.
    pub job_type: String,
    /// The queue it was claimed from.
    pub queue: String,
    /// The execution resource it holds while leased, if any.
    pub resource_key: Option<String>,
    /// Its organization.
    pub organization_id: Option<Uuid>,
    /// The payload to hand to the handler.
    pub payload: Value,
    /// Its priority.
    pub priority: i32,
    /// The fencing token of this lease: attempts started over the job's whole life.
    pub attempt: i32,
    /// Which attempt this is since the job was (re)queued, starting at 1.
    pub attempt_number: i32,
    /// Attempts allowed since the job was (re)queued.
    pub max_attempts: i32,
    /// Per-attempt timeout.
    pub timeout_seconds: i32,
    /// The worker holding the lease.
    pub worker_id: String,
    /// When the lease expires unless renewed.
    pub lease_expires_at: DateTime<Utc>,
    /// When the job became due: its enqueue, `run_at` or retry time.
    pub due_at: DateTime<Utc>,
    /// When this lease was granted (the database's clock, like `due_at`).
    pub leased_at: DateTime<Utc>,
    /// The workflow run, when the job is a workflow step.
    pub workflow_run_id: Option<WorkflowRunId>,
    /// The workflow step, when the job is a workflow step.
    pub workflow_step_id: Option<WorkflowStepId>,
    /// The workflow step's key, when the job is a workflow step.
    pub workflow_step_key: Option<String>,
    /// The checkpoint the job's last continued run committed.
    pub checkpoint: Option<Value>,
    /// The trace context of the span that enqueued the job, when one was stored (see
    /// [`crate::core::trace`]).
    pub trace_context: Option<TraceContext>,
}

impl ClaimedJob {
    /// The fencing triple to present on every write for this attempt.
    pub fn lease(&self) -> JobLease<'_> {
        JobLease {
            job_id: self.id,
            attempt: self.attempt,
            worker_id: &self.worker_id,
        }
    }

    /// The context handed to the job's handler.
    pub fn context(&self) -> JobContext {
        let mut context = JobContext::new(
            self.id,
            JobType::from(self.job_type.clone()),
            self.attempt_number,
            self.max_attempts,
            self.worker_id.clone(),
        );
        context.organization_id = self.organization_id;
        context.lifetime_attempt = self.attempt;
        context.lease_expires_at = Some(self.lease_expires_at);
        context.workflow_run_id = self.workflow_run_id;
        context.workflow_step_id = self.workflow_step_id;
        context
            .workflow_step_key
            .clone_from(&self.workflow_step_key);
        context.checkpoint.clone_from(&self.checkpoint);
        context
    }
}

/// Identifies one lease: the job, the attempt and the worker. Writes presenting a lease that is
/// no longer current fail with `job.lease_owner_mismatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLease<'a> {
    /// The job.
    pub job_id: JobId,
    /// The attempt (fencing token) the lease was granted for.
    pub attempt: i32,
    /// The worker that holds it.
    pub worker_id: &'a str,
}

/// Claims up to `limit` claimable jobs in one statement: `PENDING` and due, in an open queue,
/// highest priority first, then oldest run time, skipping rows other workers are claiming. The
/// attempt in progress is recorded on the job row; its `job_attempts` row is written when it
/// ends. The jobs come back in claim order.
///
/// The statement is a call of `runledger.claim_jobs` (`runledger-engine/sql/06_claim.sql`),
/// whose own planner settings keep the claim on the claim index whatever the table's statistics
/// say (a backlog enqueued faster than autovacuum analyzes the table leaves statistics under
/// which a free planner sorts every pending row at each claim), so it runs the same on a pool or
/// inside a transaction of yours.
///
/// Jobs under a global concurrency limit (of their queue or their type) or holding an execution
/// resource key are left to [`claim_limited_jobs`]; a worker calls both. Jobs of a paused queue
/// stay pending.
///
/// A picked job whose stored payload a worker cannot decode (nested deeper than
/// [`MAX_JSON_DEPTH`](crate::core::jobs::limits::MAX_JSON_DEPTH), stored by other means than
/// `enqueue_job`, which refuses it) is dead-lettered with `job.payload_too_deep` by a second
/// statement on the same connection, keeping its attempt count (it never reached a handler), and
/// is not returned: it costs the other jobs of the batch nothing.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use std::time::Duration;
/// use runledger_engine::postgres::jobs::{claim_jobs, ClaimRequest};
///
/// let jobs = claim_jobs(&pool, &ClaimRequest::new("worker-1", 10, Duration::from_secs(30))).await?;
/// for job in &jobs {
///     println!("{} attempt {}", job.job_type, job.attempt_number);
/// }
/// # Ok(()) }
/// ```
pub async fn claim_jobs<'c, A>(acquire: A, request: &ClaimRequest<'_>) -> Result<Vec<ClaimedJob>>
where
    A: Acquire<'c, Database = Postgres>,
{
    let mut conn = acquire.acquire().await?;
    Ok(claim_on(&mut conn, request, false).await?.jobs)
}

/// Claims up to `limit` jobs under a global concurrency limit or holding an execution resource
/// key, as [`claim_jobs`] does for the others, never leasing more jobs of a limited queue or job
/// type than its limit allows across all workers, nor a job whose resource key a leased job
/// holds (nor two jobs of one key at once). The key is held by the leased job row itself: any
/// end of the lease (success, failure or retry, cancel, the reaper) frees it.
///
/// When no such job is due it returns at once. Otherwise the claim takes one advisory lock
/// shared by every limited claim, held until its transaction ends, so that it counts the leased
/// jobs after the previous limited claim committed: call it on a pool (its own transaction), not
/// inside a long transaction of yours. Jobs over their limit or behind a busy key stay `PENDING`
/// and spend no attempt.
pub async fn claim_limited_jobs<'c, A>(
    acquire: A,
    request: &ClaimRequest<'_>,
) -> Result<Vec<ClaimedJob>>
where
    A: Acquire<'c, Database = Postgres>,
{
    let mut conn = acquire.acquire().await?;
    Ok(claim_on(&mut conn, request, true).await?.jobs)
}

/// A leased row as the claim returns it, its payload still text.
struct LeasedRow {
    id: JobId,
    job_type: String,
    queue: String,
    resource_key: Option<String>,
    organization_id: Option<Uuid>,
    payload: String,
    priority: i32,
    attempt: i32,
    attempt_number: i32,
    max_attempts: i32,
    timeout_seconds: i32,
    lease_expires_at: DateTime<Utc>,
    due_at: DateTime<Utc>,
    leased_at: DateTime<Utc>,
    workflow_run_id: Option<WorkflowRunId>,
    workflow_step_id: Option<WorkflowStepId>,
    workflow_step_key: Option<String>,
    checkpoint: Option<Value>,
    trace_context: Option<TraceContext>,
}

/// What one claim statement leased.
pub(crate) struct Claimed {
    /// The jobs to run, highest priority first.
    pub(crate) jobs: Vec<ClaimedJob>,
    /// How many rows the statement leased, counting those dead-lettered at once because their
    /// payload does not decode: a claim that leased its whole limit may have left more due.
    pub(crate) leased: usize,
}

/// The claim on `conn`: `runledger.claim_jobs` for the plain jobs ([`claim_jobs`]) or (`gated`)
/// the limited ones ([`claim_limited_jobs`]), then the dead letter of any job whose payload does
/// not decode.
pub(crate) async fn claim_on(
    conn: &mut sqlx::PgConnection,
    request: &ClaimRequest<'_>,
    gated: bool,
) -> Result<Claimed> {
    validate_worker_id(request.worker_id)?;
    if request.limit <= 0 {
        return Ok(Claimed {
            jobs: Vec::new(),
            leased: 0,
        });
    }
    let rows = sqlx::query_as!(
        LeasedRow,
        r#"
        SELECT id AS "id!: JobId",
               job_type AS "job_type!",
               queue AS "queue!",
               resource_key,
               organization_id,
               payload AS "payload!",
               priority AS "priority!",
               attempt AS "attempt!",
               attempt_number AS "attempt_number!",
               max_attempts AS "max_attempts!",
               timeout_seconds AS "timeout_seconds!",
               lease_expires_at AS "lease_expires_at!",
               due_at AS "due_at!",
               leased_at AS "leased_at!",
               workflow_run_id AS "workflow_run_id: WorkflowRunId",
               workflow_step_id AS "workflow_step_id: WorkflowStepId",
               workflow_step_key,
               checkpoint,
               trace_context AS "trace_context: TraceContext"
        FROM runledger.claim_jobs($1, $2, $3, $4, $5, $6, $7)
        "#,
        request.worker_id,
        request.limit,
        request.lease_ttl.as_secs_f64(),
        request.job_types as Option<&[String]>,
        request.queues as Option<&[String]>,
        gated,
        request.unflushed_commit,
    )
    .fetch_all(&mut *conn)
    .await?;
    let leased = rows.len();
    let mut claimed = Vec::with_capacity(rows.len());
    let mut unreadable = Vec::new();
    for row in rows {
        match serde_json::from_str::<Value>(&row.payload) {
            Ok(payload) => claimed.push(row.into_claimed(payload, request.worker_id)),
            Err(err) => unreadable.push(Unreadable::new(row.id, row.attempt, &err)),
        }
    }
    if !unreadable.is_empty() {
        refuse_unreadable(conn, request.worker_id, &unreadable).await?;
    }
    claimed.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.due_at.cmp(&b.due_at))
            .then(a.id.0.cmp(&b.id.0))
    });
    Ok(Claimed {
        jobs: claimed,
        leased,
    })
}

impl LeasedRow {
    fn into_claimed(self, payload: Value, worker_id: &str) -> ClaimedJob {
        ClaimedJob {
            id: self.id,
            job_type: self.job_type,
            queue: self.queue,
            resource_key: self.resource_key,
            organization_id: self.organization_id,
            payload,
            priority: self.priority,
            attempt: self.attempt,
            attempt_number: self.attempt_number,
            max_attempts: self.max_attempts,
            timeout_seconds: self.timeout_seconds,
            worker_id: worker_id.to_owned(),
            lease_expires_at: self.lease_expires_at,
            due_at: self.due_at,
            leased_at: self.leased_at,
            workflow_run_id: self.workflow_run_id,
            workflow_step_id: self.workflow_step_id,
            workflow_step_key: self.workflow_step_key,
            checkpoint: self.checkpoint,
            trace_context: self.trace_context,
        }
    }
}

/// A just-leased job whose stored payload does not decode, and why.
struct Unreadable {
    id: JobId,
    attempt: i32,
    code: &'static str,
    message: String,
}

impl Unreadable {
    fn new(id: JobId, attempt: i32, err: &serde_json::Error) -> Self {
        // PostgreSQL only stores valid JSON: what serde_json refuses nests too deep for its
        // recursion limit, or holds a number outside the range of an f64.
        let (code, message) = if err.to_string().contains("recursion limit") {
            (
                "job.payload_too_deep",
                "the payload nests deeper than 127 levels and cannot be decoded; it was not run"
                    .to_owned(),
            )
        } else {
            (
                "job.payload_unreadable",
                format!("the stored payload cannot be decoded ({err}); it was not run"),
            )
        };
        Self {
            id,
            attempt,
            code,
            message,
        }
    }
}

/// Dead-letters just-leased jobs whose payload does not decode, handing their attempt back (no
/// handler saw them), with a dead-letter row keeping the stored payload and a `DEAD_LETTERED`
/// event. Only a row still leased is touched: a succeeded job keeps its worker and attempt, so
/// those alone do not fence it.
async fn refuse_unreadable(
    conn: &mut sqlx::PgConnection,
    worker_id: &str,
    refused: &[Unreadable],
) -> Result<()> {
    let ids: Vec<Uuid> = refused.iter().map(|job| job.id.0).collect();
    let attempts: Vec<i32> = refused.iter().map(|job| job.attempt).collect();
    let codes: Vec<&str> = refused.iter().map(|job| job.code).collect();
    let messages: Vec<&str> = refused.iter().map(|job| job.message.as_str()).collect();
    tracing::warn!(
        jobs = ids.len(),
        "dead-lettering claimed jobs whose payload cannot be decoded"
    );
    sqlx::query!(
        r#"
        WITH refused AS (
            UPDATE runledger.job_queue q
            SET status = 'DEAD_LETTERED',
                attempt = q.attempt - 1,
                worker_id = NULL,
                lease_expires_at = NULL,
                leased_at = NULL,
                started_at = NULL,
                last_error_code = r.code,
                last_error_message = r.message,
                finished_at = now(),
                updated_at = now()
            FROM unnest($1::uuid[], $2::int4[], $4::text[], $5::text[]) AS r(id, attempt, code, message)
            WHERE q.id = r.id AND q.attempt = r.attempt AND q.worker_id = $3
              AND q.status = 'LEASED'
            RETURNING q.id, q.job_type, q.organization_id, q.payload, q.attempt,
                      q.last_error_code, q.last_error_message
        ),
        letter AS (
            INSERT INTO runledger.job_dead_letters (
                job_id, job_type, organization_id, payload, attempt, failure_kind, error_code,
                error_message
            )
            SELECT id, job_type, organization_id, payload, attempt, 'TERMINAL', last_error_code,
                   last_error_message
            FROM refused
        )
        INSERT INTO runledger.job_events (job_id, event_type, attempt, details)
        SELECT id, 'DEAD_LETTERED', attempt,
               jsonb_build_object('failure_kind', 'TERMINAL', 'error_code', last_error_code)
        FROM refused
        "#,
        &ids,
        &attempts,
        worker_id,
        &codes as &[&str],
        &messages as &[&str],
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records that the handler of this lease started executing (the job's `started_at`; its
/// stage becomes `RUNNING`). Fails with `job.lease_owner_mismatch` when the lease is no longer
/// current.
pub async fn mark_job_running<'e>(
    executor: impl PgExecutor<'e>,
    lease: &JobLease<'_>,
) -> Result<()> {
    let marked =
        mark_jobs_running(executor, lease.worker_id, &[(lease.job_id, lease.attempt)]).await?;
    fenced(!marked.is_empty(), lease)
}

/// Records in one statement that the handlers of these leases of `worker_id` started (each
/// job's `started_at`, kept if already set; stage `RUNNING`). Returns the jobs whose lease
/// still held; the runtime calls it for handlers that have run a while, and
/// `WorkerLoop::run_once` for its whole batch before the handlers start.
pub async fn mark_jobs_running<'e>(
    executor: impl PgExecutor<'e>,
    worker_id: &str,
    leases: &[(JobId, i32)],
) -> Result<Vec<JobId>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = leases.iter().map(|(id, _)| id.0).collect();
    let attempts: Vec<i32> = leases.iter().map(|(_, attempt)| *attempt).collect();
    let marked = sqlx::query_scalar!(
        r#"
        SELECT id AS "id!: JobId" FROM runledger.mark_jobs_running($1, $2, $3) AS id
        "#,
        worker_id,
        &ids,
        &attempts,
    )
    .fetch_all(executor)
    .await?;
    Ok(marked)
}

/// Extends every listed lease of `worker_id` in one statement and returns the jobs whose lease
/// was renewed. A job missing from the result has lost its lease: its handler should stop.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, leases: Vec<(runledger_engine::core::jobs::JobId, i32)>)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use std::time::Duration;
/// use runledger_engine::postgres::jobs::heartbeat_jobs;
///
/// let renewed = heartbeat_jobs(&pool, "worker-1", &leases, Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
pub async fn heartbeat_jobs<'e>(
    executor: impl PgExecutor<'e>,
    worker_id: &str,
    leases: &[(JobId, i32)],
    lease_ttl: Duration,
) -> Result<Vec<JobId>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = leases.iter().map(|(id, _)| id.0).collect();
    let attempts: Vec<i32> = leases.iter().map(|(_, attempt)| *attempt).collect();
    let renewed = sqlx::query_scalar!(
        r#"
        SELECT id AS "id!: JobId" FROM runledger.heartbeat_jobs($1, $2, $3, $4) AS id
        "#,
        worker_id,
        &ids,
        &attempts,
        lease_ttl.as_secs_f64(),
    )
    .fetch_all(executor)
    .await?;
    Ok(renewed)
}

/// Extends one lease; `job.lease_owner_mismatch` when it is no longer current.
pub async fn heartbeat_job<'e>(
    executor: impl PgExecutor<'e>,
    lease: &JobLease<'_>,
    lease_ttl: Duration,
) -> Result<()> {
    let renewed = heartbeat_jobs(
        executor,
        lease.worker_id,
        &[(lease.job_id, lease.attempt)],
        lease_ttl,
    )
    .await?;
    fenced(!renewed.is_empty(), lease)
}

/// Stores in-flight progress on the job row (replacing the previous update). Progress
/// containing a NUL character is refused with `job.invalid_progress`.
pub async fn update_job_progress<'e>(
    executor: impl PgExecutor<'e>,
    lease: &JobLease<'_>,
    progress: &JobProgressUpdate,
) -> Result<()> {
    let progress = progress_json(progress)?;
    let updated = sqlx::query_scalar!(
        r#"
        UPDATE runledger.job_queue
        SET progress = $4, updated_at = now()
        WHERE id = $1 AND attempt = $2 AND worker_id = $3
          AND leased_at IS NOT NULL AND lease_expires_at > now()
        RETURNING id
        "#,
        lease.job_id.0,
        lease.attempt,
        lease.worker_id,
        progress,
    )
    .fetch_optional(executor)
    .await?;
    fenced(updated.is_some(), lease)
}

/// One successful attempt in a batch completion.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSuccess {
    /// The job.
    pub job_id: JobId,
    /// The attempt (fencing token) that succeeded.
    pub attempt: i32,
    /// The handler's output, if any.
    pub output: Option<Value>,
    /// The handler's final progress, replacing the stored one; `None` keeps the last update.
    pub progress: Option<JobProgressUpdate>,
}

/// Marks one leased job `SUCCEEDED` (stage `COMPLETED`) with an optional output.
/// Fails with `job.lease_owner_mismatch`, changing nothing, when the lease is not current.
pub async fn complete_job_success<'e>(
    executor: impl PgExecutor<'e>,
    lease: &JobLease<'_>,
    output: Option<&Value>,
) -> Result<()> {
    let success = JobSuccess {
        job_id: lease.job_id,
        attempt: lease.attempt,
        output: output.cloned(),
        progress: None,
    };
    let completed = complete_jobs_success(executor, lease.worker_id, &[success]).await?;
    fenced(!completed.is_empty(), lease)
}

/// Marks many leased jobs of one worker `SUCCEEDED` in one statement, each row still
/// lease-fenced. Returns the jobs that were completed; the others had lost their lease and are
/// left untouched. A succeeded job keeps the worker that ran it, and its row is the record of
/// its last attempt ([`list_job_attempts`](crate::postgres::jobs::list_job_attempts) lists it);
/// no `job_attempts` row is written.
pub async fn complete_jobs_success<'e>(
    executor: impl PgExecutor<'e>,
    worker_id: &str,
    successes: &[JobSuccess],
) -> Result<Vec<JobId>> {
    if successes.is_empty() {
        return Ok(Vec::new());
    }
    // The statement locks its rows in whatever order the plan reads them; a workflow
    // cancellation never waits for one of its run's jobs while holding another
    // (runledger-engine/sql/10_workflow_cancellation.sql), so the two cannot deadlock.
    let ids: Vec<Uuid> = successes.iter().map(|s| s.job_id.0).collect();
    let attempts: Vec<i32> = successes.iter().map(|s| s.attempt).collect();
    let outputs: Vec<Option<Value>> = successes.iter().map(|s| s.output.clone()).collect();
    let progress: Vec<Option<Value>> = successes
        .iter()
        .map(|s| s.progress.as_ref().map(progress_json).transpose())
        .collect::<Result<_>>()?;
    let completed = sqlx::query_scalar!(
        r#"
        SELECT id AS "id!: JobId"
        FROM runledger.complete_jobs_success($1, $2, $3, $4, $5) AS id
        "#,
        worker_id,
        &ids,
        &attempts,
        &outputs as &[Option<Value>],
        &progress as &[Option<Value>],
    )
    .fetch_all(executor)
    .await?;
    Ok(completed)
}

/// What happened to a job after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobFailureDisposition {
    /// Back to `PENDING`; the next attempt is not before this time.
    RetryScheduled {
        /// When the job becomes claimable again.
        next_run_at: DateTime<Utc>,
    },
    /// Moved to `DEAD_LETTERED` with a dead-letter row keeping the payload.
    DeadLettered,
}

/// Records a failed attempt. Retryable failures (`RETRYABLE`, `TIMEOUT`) go back to `PENDING`
/// after the definition's exponential, capped, jittered backoff, or later if the failure asks
/// for a later time; terminal and panicked failures, and any failure of the last allowed
/// attempt, dead-letter the job. Fails with `job.lease_owner_mismatch`, changing nothing, when
/// the lease is not current.
///
/// Whatever the handler reported is recorded: NUL characters in the code and message are
/// replaced by U+FFFD, and a retry time outside the years 1 to 9999 is clamped into them.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job: runledger_engine::postgres::jobs::ClaimedJob)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::core::jobs::JobFailure;
/// use runledger_engine::postgres::jobs::{complete_job_failure, JobFailureDisposition};
///
/// let failure = JobFailure::retryable("upstream.timeout", "crawler timed out");
/// match complete_job_failure(&pool, &job.lease(), &failure).await? {
///     JobFailureDisposition::RetryScheduled { next_run_at } => println!("retry at {next_run_at}"),
///     JobFailureDisposition::DeadLettered => println!("gave up"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
pub async fn complete_job_failure<'e>(
    executor: impl PgExecutor<'e>,
    lease: &JobLease<'_>,
    failure: &JobFailure,
) -> Result<JobFailureDisposition> {
    // Whatever a handler reports must be recordable: NUL characters become U+FFFD and a
    // retry time outside the storable range is clamped, so the failure is never lost.
    let message = storable_text(truncate_chars(&failure.message, MAX_ERROR_MESSAGE_CHARS));
    let code = storable_text(&failure.code);
    let retry_not_before = failure
        .retry_not_before
        .map(|at| at.clamp(EARLIEST_TIMESTAMP, LATEST_TIMESTAMP));
    let row = sqlx::query!(
        r#"
        WITH current AS (
            SELECT q.id, q.attempt, q.attempt_floor, q.max_attempts,
                   d.retry_base_delay_ms, d.retry_max_delay_ms
            FROM runledger.job_queue q
            JOIN runledger.job_definitions d ON d.job_type = q.job_type
            WHERE q.id = $1 AND q.attempt = $2 AND q.worker_id = $3
              AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
            FOR UPDATE OF q
        ),
        decided AS (
            SELECT id,
                   ($4 NOT IN ('RETRYABLE', 'TIMEOUT', 'LEASE_EXPIRED')
                    OR attempt - attempt_floor >= max_attempts) AS dead,
                   greatest(
                       now() + runledger.retry_backoff(attempt - attempt_floor, retry_base_delay_ms, retry_max_delay_ms),
                       $7::timestamptz
                   ) AS retry_at
            FROM current
        ),
        updated AS (
            UPDATE runledger.job_queue q
            SET status = CASE WHEN d.dead THEN 'DEAD_LETTERED' ELSE 'PENDING' END,
                next_run_at = CASE WHEN d.dead THEN q.next_run_at ELSE d.retry_at END,
                finished_at = CASE WHEN d.dead THEN now() END,
                started_at = coalesce(q.started_at, q.leased_at),
                worker_id = NULL,
                lease_expires_at = NULL,
                last_error_code = $5,
                last_error_message = $6,
                updated_at = now()
            FROM decided d
            WHERE q.id = d.id
            RETURNING q.id, q.job_type, q.organization_id, q.payload, q.attempt, q.status,
                      q.next_run_at, q.leased_at, q.started_at
        ),
        attempt_row AS (
            INSERT INTO runledger.job_attempts (
                job_id, attempt, worker_id, outcome, failure_kind, error_code, error_message,
                leased_at, started_at
            )
            SELECT id, attempt, $3, 'FAILED', $4, $5, $6, leased_at, started_at FROM updated
        ),
        dead_letter AS (
            INSERT INTO runledger.job_dead_letters (
                job_id, job_type, organization_id, payload, attempt, failure_kind, error_code,
                error_message
            )
            SELECT id, job_type, organization_id, payload, attempt, $4, $5, $6
            FROM updated
            WHERE status = 'DEAD_LETTERED'
        ),
        event AS (
            INSERT INTO runledger.job_events (job_id, event_type, attempt, worker_id, details)
            SELECT id,
                   CASE WHEN status = 'DEAD_LETTERED' THEN 'DEAD_LETTERED' ELSE 'RETRY_SCHEDULED' END,
                   attempt, $3,
                   jsonb_build_object('failure_kind', $4::text, 'error_code', $5::text)
                   || CASE WHEN status = 'PENDING'
                           THEN jsonb_build_object('next_run_at', next_run_at)
                           ELSE '{}'::jsonb END
            FROM updated
        )
        SELECT status AS "status!: JobStatus", next_run_at AS "next_run_at!" FROM updated
        "#,
        lease.job_id.0,
        lease.attempt,
        lease.worker_id,
        failure.kind.as_str(),
        &*code,
        &*message,
        retry_not_before,
    )
    .fetch_optional(executor)
    .await?;
    match row {
        None => Err(Error::LeaseOwnerMismatch {
            job_id: lease.job_id,
        }),
        Some(row) if row.status == JobStatus::DeadLettered => {
            Ok(JobFailureDisposition::DeadLettered)
        }
        Some(row) => Ok(JobFailureDisposition::RetryScheduled {
            next_run_at: row.next_run_at,
        }),
    }
}

/// A progress update as stored; one containing a NUL character is refused with
/// `job.invalid_progress`.
pub(super) fn progress_json(progress: &JobProgressUpdate) -> Result<Value> {
    let progress = serde_json::to_value(progress).map_err(Error::corrupt)?;
    check_json_field(&progress, "job.invalid_progress", "the progress update")?;
    Ok(progress)
}

fn fenced(ok: bool, lease: &JobLease<'_>) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::LeaseOwnerMismatch {
            job_id: lease.job_id,
        })
    }
}

fn validate_worker_id(worker_id: &str) -> Result<()> {
    if worker_id.trim().is_empty()
        || worker_id.chars().count() > 255
        || !is_storable_text(worker_id)
    {
        return Err(Error::invalid_input(
            "job.invalid_worker_id",
            "worker id must be 1 to 255 characters, not blank, without NUL characters",
        ));
    }
    Ok(())
}

pub(crate) fn truncate_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((index, _)) => &text[..index],
        None => text,
    }
}
