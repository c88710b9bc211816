//! Read APIs for jobs, their attempts, events and dead letters.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::core::jobs::{
    JobAttemptOutcome, JobEventType, JobFailureKind, JobId, JobStage, JobStatus, WorkflowRunId,
    WorkflowStepId,
};
use crate::postgres::error::Result;
use crate::postgres::jobs::scope::TenantScope;

/// Largest page any list call returns.
pub const MAX_PAGE_SIZE: i64 = 1_000;

/// One job as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobRecord {
    /// The job's id.
    pub id: JobId,
    /// Its type.
    pub job_type: String,
    /// The queue it is claimed from.
    pub queue: String,
    /// The resource it holds while leased: at most one job per key is leased at a time.
    pub resource_key: Option<String>,
    /// Its organization.
    pub organization_id: Option<Uuid>,
    /// Current status.
    pub status: JobStatus,
    /// Where the job is within its status (derived from the row; `Completed` once succeeded).
    pub stage: JobStage,
    /// The payload.
    pub payload: Value,
    /// Priority (higher runs first).
    pub priority: i32,
    /// Attempts started over the job's whole life (the current fencing token).
    pub attempt: i32,
    /// Attempts used since the job was last (re)queued.
    pub attempts_used: i32,
    /// Attempts allowed since the job was last (re)queued.
    pub max_attempts: i32,
    /// The job's run: 1 when enqueued, one more with each requeue (each run has its own
    /// attempt budget). Compare-and-requeue compares it.
    pub run_number: i32,
    /// Per-attempt timeout.
    pub timeout_seconds: i32,
    /// Earliest time of the next attempt.
    pub next_run_at: DateTime<Utc>,
    /// The worker holding the lease, while leased; after a success, the worker that ran it.
    pub worker_id: Option<String>,
    /// When the lease expires, while leased.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When the current (or last) attempt was leased.
    pub leased_at: Option<DateTime<Utc>>,
    /// When the current (or last) attempt's handler reported it started.
    pub started_at: Option<DateTime<Utc>>,
    /// Idempotency key, if keyed.
    pub idempotency_key: Option<String>,
    /// Last reported progress.
    pub progress: Option<Value>,
    /// The handler's output, once succeeded.
    pub output: Option<Value>,
    /// The checkpoint the last continued run committed (handed to the next run).
    pub checkpoint: Option<Value>,
    /// Code of the last failure.
    pub last_error_code: Option<String>,
    /// Message of the last failure.
    pub last_error_message: Option<String>,
    /// Workflow run, for workflow steps.
    pub workflow_run_id: Option<WorkflowRunId>,
    /// Workflow step, for workflow steps.
    pub workflow_step_id: Option<WorkflowStepId>,
    /// Who asked for the job.
    pub created_by_user_id: Option<Uuid>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it reached a terminal status.
    pub finished_at: Option<DateTime<Utc>>,
}

/// Reads one job within `scope`; `None` when it does not exist or belongs to another
/// organization than the scope's.
///
/// JSON nested deeper than [`MAX_JSON_DEPTH`](crate::core::jobs::limits::MAX_JSON_DEPTH)
/// (which only other writers than Runledger can store) is returned as
/// `{"unreadable": "<code>", "message": …}` in its field instead of failing the read.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger_engine::core::jobs::JobId)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{get_job_by_id, TenantScope};
///
/// let tenant = uuid::Uuid::now_v7();
/// let job = get_job_by_id(&pool, job_id, TenantScope::Organization(tenant)).await?;
/// # Ok(()) }
/// ```
pub async fn get_job_by_id<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
) -> Result<Option<JobRecord>> {
    let (scoped, organization) = scope.sql();
    let row = sqlx::query_as!(
        JobRecord,
        r#"
        SELECT id AS "id: JobId", job_type, queue, resource_key, organization_id,
               status AS "status: JobStatus",
               runledger.job_stage(status, attempt, attempt_floor, started_at) AS "stage!: JobStage",
               runledger.readable_json(payload, 'job.payload_too_deep') AS "payload!",
               priority, attempt, attempt - attempt_floor AS "attempts_used!",
               max_attempts, run_number, timeout_seconds, next_run_at, worker_id, lease_expires_at,
               leased_at, started_at, idempotency_key,
               runledger.readable_json(progress, 'job.invalid_progress') AS progress,
               runledger.readable_json(output, 'job.output_invalid') AS output,
               runledger.readable_json(checkpoint, 'job.invalid_checkpoint') AS checkpoint,
               last_error_code, last_error_message,
               workflow_run_id AS "workflow_run_id: WorkflowRunId",
               workflow_step_id AS "workflow_step_id: WorkflowStepId",
               created_by_user_id, created_at, updated_at, finished_at
        FROM runledger.job_queue
        WHERE id = $1 AND (NOT $2 OR organization_id IS NOT DISTINCT FROM $3)
        "#,
        job_id.0,
        scoped,
        organization,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row)
}

/// Filters and page position for [`list_jobs`]. Jobs come newest first.
///
/// ```
/// use runledger_engine::core::jobs::JobStatus;
/// use runledger_engine::postgres::jobs::JobListFilter;
///
/// let filter = JobListFilter::new().status(JobStatus::DeadLettered).job_type("emails.send").limit(50);
/// assert_eq!(filter.limit, 50);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct JobListFilter {
    /// Only jobs in this status.
    pub status: Option<JobStatus>,
    /// Only jobs of this type.
    pub job_type: Option<String>,
    /// Only jobs of this organization.
    pub organization_id: Option<Uuid>,
    /// Only jobs older than this one (the previous page's `next_cursor`).
    pub after: Option<JobId>,
    /// Page size, 1 to [`MAX_PAGE_SIZE`]; 0 means 100.
    pub limit: i64,
    /// Only jobs whose type contains this text (case-insensitive). Resolved against the job
    /// definitions, so it stays index-backed on large queues.
    pub job_type_contains: Option<String>,
    /// Only steps of this workflow run.
    pub workflow_run_id: Option<WorkflowRunId>,
    /// Free-text search: a UUID matches the job id or its workflow run id; any other text
    /// matches the idempotency key or the last error code exactly. Blank text is ignored.
    pub search: Option<String>,
}

impl JobListFilter {
    /// No filter, first page of 100.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only jobs in this status.
    pub fn status(mut self, status: JobStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only jobs of this type.
    pub fn job_type(mut self, job_type: impl Into<String>) -> Self {
        self.job_type = Some(job_type.into());
        self
    }

    /// Only jobs of this organization.
    pub fn organization_id(mut self, organization_id: Uuid) -> Self {
        self.organization_id = Some(organization_id);
        self
    }

    /// Only jobs whose type contains this text (case-insensitive).
    pub fn job_type_contains(mut self, text: impl Into<String>) -> Self {
        self.job_type_contains = Some(text.into());
        self
    }

    /// Only steps of this workflow run.
    pub fn workflow_run_id(mut self, run_id: WorkflowRunId) -> Self {
        self.workflow_run_id = Some(run_id);
        self
    }

    /// Free-text search (see [`JobListFilter::search`]).
    pub fn search(mut self, text: impl Into<String>) -> Self {
        self.search = Some(text.into());
        self
    }

    /// The search split into its UUID and text forms, blank text ignored.
    fn search_terms(&self) -> (Option<Uuid>, Option<&str>) {
        match self.search.as_deref().map(str::trim) {
            None | Some("") => (None, None),
            Some(text) => match Uuid::parse_str(text) {
                Ok(id) => (Some(id), None),
                Err(_) => (None, Some(text)),
            },
        }
    }

    fn type_contains(&self) -> Option<&str> {
        self.job_type_contains
            .as_deref()
            .map(str::trim)
            .filter(|text| !text.is_empty())
    }

    /// Continue after this job (keyset pagination).
    pub fn after(mut self, cursor: JobId) -> Self {
        self.after = Some(cursor);
        self
    }

    /// Page size.
    pub fn limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }
}

/// One page of jobs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<JobRecord>,
    /// Pass to [`JobListFilter::after`] for the next page; `None` on the last page.
    pub next_cursor: Option<JobId>,
}

pub(crate) fn page_size(limit: i64) -> i64 {
    if limit <= 0 {
        100
    } else {
        limit.min(MAX_PAGE_SIZE)
    }
}

/// Lists jobs, newest first, with keyset pagination on the (time-ordered) id.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{list_jobs, JobListFilter};
///
/// let mut filter = JobListFilter::new().limit(200);
/// loop {
///     let page = list_jobs(&pool, &filter).await?;
///     // ... render page.jobs ...
///     match page.next_cursor {
///         Some(cursor) => filter = filter.after(cursor),
///         None => break,
///     }
/// }
/// # Ok(()) }
/// ```
pub async fn list_jobs<'e>(
    executor: impl PgExecutor<'e>,
    filter: &JobListFilter,
) -> Result<JobPage> {
    let limit = page_size(filter.limit);
    let (search_id, search_text) = filter.search_terms();
    let mut jobs = sqlx::query_as!(
        JobRecord,
        r#"
        SELECT id AS "id: JobId", job_type, queue, resource_key, organization_id,
               status AS "status: JobStatus",
               runledger.job_stage(status, attempt, attempt_floor, started_at) AS "stage!: JobStage",
               runledger.readable_json(payload, 'job.payload_too_deep') AS "payload!",
               priority, attempt, attempt - attempt_floor AS "attempts_used!",
               max_attempts, run_number, timeout_seconds, next_run_at, worker_id, lease_expires_at,
               leased_at, started_at, idempotency_key,
               runledger.readable_json(progress, 'job.invalid_progress') AS progress,
               runledger.readable_json(output, 'job.output_invalid') AS output,
               runledger.readable_json(checkpoint, 'job.invalid_checkpoint') AS checkpoint,
               last_error_code, last_error_message,
               workflow_run_id AS "workflow_run_id: WorkflowRunId",
               workflow_step_id AS "workflow_step_id: WorkflowStepId",
               created_by_user_id, created_at, updated_at, finished_at
        FROM runledger.job_queue
        WHERE ($1::text IS NULL OR status = $1)
          AND ($2::text IS NULL OR job_type = $2)
          AND ($3::uuid IS NULL OR organization_id = $3)
          AND ($4::uuid IS NULL OR id < $4)
          AND ($6::text IS NULL OR job_type IN (
                SELECT d.job_type FROM runledger.job_definitions d
                WHERE strpos(lower(d.job_type), lower($6)) > 0))
          AND ($7::uuid IS NULL OR id = ANY (ARRAY(
                SELECT s.job_id FROM runledger.workflow_steps s WHERE s.workflow_run_id = $7)))
          AND ($8::uuid IS NULL OR id = $8 OR id = ANY (ARRAY(
                SELECT s.job_id FROM runledger.workflow_steps s WHERE s.workflow_run_id = $8)))
          AND ($9::text IS NULL OR idempotency_key = $9 OR last_error_code = $9)
        ORDER BY id DESC
        LIMIT $5
        "#,
        filter.status.map(JobStatus::as_str),
        filter.job_type.as_deref(),
        filter.organization_id,
        filter.after.map(|id| id.0),
        limit + 1,
        filter.type_contains(),
        filter.workflow_run_id.map(|id| id.0),
        search_id,
        search_text,
    )
    .fetch_all(executor)
    .await?;
    let next_cursor = if jobs.len() as i64 > limit {
        jobs.truncate(limit as usize);
        jobs.last().map(|job| job.id)
    } else {
        None
    };
    Ok(JobPage { jobs, next_cursor })
}

/// Counts the jobs [`list_jobs`] would list with `filter` (ignoring its page position and
/// size). With `up_to`, counting stops there: operator views show "10,000+" instead of paying
/// for an exact count of a huge status.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::core::jobs::JobStatus;
/// use runledger_engine::postgres::jobs::{count_jobs, JobListFilter};
///
/// let filter = JobListFilter::new().status(JobStatus::DeadLettered);
/// let dead = count_jobs(&pool, &filter, Some(10_000)).await?;
/// println!("{dead}{}", if dead == 10_000 { "+" } else { "" });
/// # Ok(()) }
/// ```
pub async fn count_jobs<'e>(
    executor: impl PgExecutor<'e>,
    filter: &JobListFilter,
    up_to: Option<i64>,
) -> Result<i64> {
    let (search_id, search_text) = filter.search_terms();
    let count = sqlx::query_scalar!(
        r#"
        SELECT count(*) AS "count!"
        FROM (
            SELECT 1
            FROM runledger.job_queue
            WHERE ($1::text IS NULL OR status = $1)
              AND ($2::text IS NULL OR job_type = $2)
              AND ($3::uuid IS NULL OR organization_id = $3)
              AND ($4::text IS NULL OR job_type IN (
                    SELECT d.job_type FROM runledger.job_definitions d
                    WHERE strpos(lower(d.job_type), lower($4)) > 0))
              AND ($5::uuid IS NULL OR id = ANY (ARRAY(
                    SELECT s.job_id FROM runledger.workflow_steps s WHERE s.workflow_run_id = $5)))
              AND ($6::uuid IS NULL OR id = $6 OR id = ANY (ARRAY(
                    SELECT s.job_id FROM runledger.workflow_steps s WHERE s.workflow_run_id = $6)))
              AND ($7::text IS NULL OR idempotency_key = $7 OR last_error_code = $7)
            LIMIT $8
        ) AS matching
        "#,
        filter.status.map(JobStatus::as_str),
        filter.job_type.as_deref(),
        filter.organization_id,
        filter.type_contains(),
        filter.workflow_run_id.map(|id| id.0),
        search_id,
        search_text,
        up_to.map(|cap| cap.max(0)),
    )
    .fetch_one(executor)
    .await?;
    Ok(count)
}

/// One finished attempt of a job (the attempt in progress is described by the job row).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct JobAttempt {
    /// The job.
    pub job_id: JobId,
    /// The attempt's fencing token (1, 2, … over the job's life).
    pub attempt: i32,
    /// The worker that ran it.
    pub worker_id: String,
    /// How it ended.
    pub outcome: JobAttemptOutcome,
    /// How it failed, when it failed.
    pub failure_kind: Option<JobFailureKind>,
    /// Failure code.
    pub error_code: Option<String>,
    /// Failure message.
    pub error_message: Option<String>,
    /// When the lease was granted.
    pub leased_at: DateTime<Utc>,
    /// When the handler started, if reported.
    pub started_at: Option<DateTime<Utc>>,
    /// When the attempt ended.
    pub finished_at: DateTime<Utc>,
}

/// Lists a job's finished attempts in order; empty when the job is outside `scope`. A succeeded
/// job's last attempt is read from the job row itself (`runledger.job_attempt_history`).
pub async fn list_job_attempts<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
) -> Result<Vec<JobAttempt>> {
    let (scoped, organization) = scope.sql();
    let rows = sqlx::query_as!(
        JobAttempt,
        r#"
        SELECT job_id AS "job_id!: JobId", attempt AS "attempt!", worker_id AS "worker_id!",
               outcome AS "outcome!: JobAttemptOutcome",
               failure_kind AS "failure_kind: JobFailureKind",
               error_code, error_message, leased_at AS "leased_at!", started_at,
               finished_at AS "finished_at!"
        FROM runledger.job_attempt_history
        WHERE job_id = $1
          AND EXISTS (
              SELECT 1 FROM runledger.job_queue q
              WHERE q.id = $1 AND (NOT $2 OR q.organization_id IS NOT DISTINCT FROM $3)
          )
        ORDER BY attempt
        "#,
        job_id.0,
        scoped,
        organization,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// One row of a job's event history.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobEvent {
    /// Sequence number (increasing).
    pub id: i64,
    /// The job.
    pub job_id: JobId,
    /// What happened.
    pub event_type: JobEventType,
    /// The attempt it concerns.
    pub attempt: Option<i32>,
    /// The worker involved.
    pub worker_id: Option<String>,
    /// Details (failure kind, next run time, previous status, …).
    pub details: Value,
    /// When it happened.
    pub created_at: DateTime<Utc>,
}

/// Lists a job's events in order; empty when the job is outside `scope`.
pub async fn list_job_events<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
) -> Result<Vec<JobEvent>> {
    let (scoped, organization) = scope.sql();
    let rows = sqlx::query_as!(
        JobEvent,
        r#"
        SELECT id, job_id AS "job_id: JobId", event_type AS "event_type: JobEventType",
               attempt, worker_id, details, created_at
        FROM runledger.job_events
        WHERE job_id = $1
          AND EXISTS (
              SELECT 1 FROM runledger.job_queue q
              WHERE q.id = $1 AND (NOT $2 OR q.organization_id IS NOT DISTINCT FROM $3)
          )
        ORDER BY id
        "#,
        job_id.0,
        scoped,
        organization,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// A dead-lettered attempt, keeping the payload as it was.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobDeadLetter {
    /// Sequence number (increasing).
    pub id: i64,
    /// The job.
    pub job_id: JobId,
    /// Its type.
    pub job_type: String,
    /// Its organization.
    pub organization_id: Option<Uuid>,
    /// The payload at the time.
    pub payload: Value,
    /// The final attempt.
    pub attempt: i32,
    /// How it failed.
    pub failure_kind: JobFailureKind,
    /// Failure code.
    pub error_code: Option<String>,
    /// Failure message.
    pub error_message: Option<String>,
    /// When it was dead-lettered.
    pub dead_lettered_at: DateTime<Utc>,
}

/// Filters for [`list_dead_letters`], newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterListFilter {
    /// Only this job type.
    pub job_type: Option<String>,
    /// Only this job.
    pub job_id: Option<JobId>,
    /// Only rows older than this sequence number (keyset pagination).
    pub before_id: Option<i64>,
    /// Page size, 1 to [`MAX_PAGE_SIZE`]; 0 means 100.
    pub limit: i64,
}

impl DeadLetterListFilter {
    /// No filter, first page of 100.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only this job type.
    pub fn job_type(mut self, job_type: impl Into<String>) -> Self {
        self.job_type = Some(job_type.into());
        self
    }

    /// Only this job.
    pub fn job_id(mut self, job_id: JobId) -> Self {
        self.job_id = Some(job_id);
        self
    }

    /// Only rows older than this sequence number.
    pub fn before_id(mut self, id: i64) -> Self {
        self.before_id = Some(id);
        self
    }

    /// Page size.
    pub fn limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }
}

/// Lists dead letters, newest first.
pub async fn list_dead_letters<'e>(
    executor: impl PgExecutor<'e>,
    filter: &DeadLetterListFilter,
) -> Result<Vec<JobDeadLetter>> {
    let rows = sqlx::query_as!(
        JobDeadLetter,
        r#"
        SELECT id, job_id AS "job_id: JobId", job_type, organization_id,
               runledger.readable_json(payload, 'job.payload_too_deep') AS "payload!", attempt,
               failure_kind AS "failure_kind: JobFailureKind", error_code, error_message,
               dead_lettered_at
        FROM runledger.job_dead_letters
        WHERE ($1::text IS NULL OR job_type = $1)
          AND ($2::uuid IS NULL OR job_id = $2)
          AND ($3::bigint IS NULL OR id < $3)
        ORDER BY id DESC
        LIMIT $4
        "#,
        filter.job_type.as_deref(),
        filter.job_id.map(|id| id.0),
        filter.before_id,
        page_size(filter.limit),
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
