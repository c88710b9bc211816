//! Job logs: batched writes from the runtime, and reads for operators.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::core::jobs::limits::{storable_json, storable_text};
use crate::core::jobs::{JobId, JobLogLevel, JobLogLine};
use crate::postgres::error::Result;

use super::reads::page_size;
use super::scope::TenantScope;

/// Stores log lines in one statement, numbered in the order given. Lines of jobs that no
/// longer exist are skipped; NUL characters in messages and fields are replaced by U+FFFD, and
/// fields PostgreSQL cannot store (nested too deep) by `{"unstorable": "<why>"}`. Returns the
/// number of lines stored. The worker calls this for lines handlers write through
/// [`JobContext::log`](crate::core::jobs::JobContext::log); call it yourself only to attach
/// lines from outside a handler.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger_engine::core::jobs::JobId)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::core::jobs::{JobLogLevel, JobLogLine};
/// use runledger_engine::postgres::jobs::append_job_logs;
///
/// let line = JobLogLine::new(job_id, 1, JobLogLevel::Info, "imported by the admin console");
/// append_job_logs(&pool, &[line]).await?;
/// # Ok(()) }
/// ```
pub async fn append_job_logs<'e>(
    executor: impl PgExecutor<'e>,
    lines: &[JobLogLine],
) -> Result<u64> {
    if lines.is_empty() {
        return Ok(0);
    }
    let job_ids: Vec<Uuid> = lines.iter().map(|line| line.job_id.0).collect();
    let attempts: Vec<i32> = lines.iter().map(|line| line.attempt).collect();
    let levels: Vec<&str> = lines.iter().map(|line| line.level.as_str()).collect();
    // Log lines are best effort but must never fail a batch: NUL characters become U+FFFD and
    // fields PostgreSQL cannot store are replaced by the reason.
    let messages: Vec<Cow<'_, str>> = lines
        .iter()
        .map(|line| storable_text(&line.message))
        .collect();
    let messages: Vec<&str> = messages.iter().map(|message| &**message).collect();
    let fields: Vec<Value> = lines
        .iter()
        .map(|line| storable_json(&line.fields).into_owned())
        .collect();
    let logged_at: Vec<DateTime<Utc>> = lines.iter().map(|line| line.logged_at).collect();
    let done = sqlx::query!(
        r#"
        INSERT INTO runledger.job_logs (job_id, attempt, level, message, fields, created_at)
        SELECT l.job_id, l.attempt, l.level, l.message, coalesce(l.fields, '{}'::jsonb), l.created_at
        FROM unnest($1::uuid[], $2::int4[], $3::text[], $4::text[], $5::jsonb[], $6::timestamptz[])
            WITH ORDINALITY AS l(job_id, attempt, level, message, fields, created_at, n)
        WHERE EXISTS (SELECT 1 FROM runledger.job_queue q WHERE q.id = l.job_id)
        ORDER BY l.n
        "#,
        &job_ids,
        &attempts,
        &levels as &[&str],
        &messages as &[&str],
        &fields,
        &logged_at,
    )
    .execute(executor)
    .await?;
    Ok(done.rows_affected())
}

/// One stored log line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobLogRecord {
    /// Sequence number (increasing).
    pub id: i64,
    /// The job.
    pub job_id: JobId,
    /// The attempt's fencing token, when known.
    pub attempt: Option<i32>,
    /// Severity.
    pub level: JobLogLevel,
    /// The message.
    pub message: String,
    /// Structured fields.
    pub fields: Value,
    /// When the handler wrote it.
    pub created_at: DateTime<Utc>,
}

/// Which lines [`list_job_logs`] returns; lines always come oldest first.
///
/// ```
/// use runledger_engine::postgres::jobs::JobLogListFilter;
///
/// let tail = JobLogListFilter::tail(200);
/// assert!(tail.tail);
/// let more = JobLogListFilter::new().after_id(41).limit(100);
/// assert_eq!(more.after_id, Some(41));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobLogListFilter {
    /// Only lines after this sequence number (follow a log as it grows).
    pub after_id: Option<i64>,
    /// Return the newest `limit` lines instead of the oldest.
    pub tail: bool,
    /// Page size, 1 to [`MAX_PAGE_SIZE`](super::MAX_PAGE_SIZE); 0 means 100.
    pub limit: i64,
}

impl JobLogListFilter {
    /// The first 100 lines.
    pub fn new() -> Self {
        Self::default()
    }

    /// The newest `limit` lines (still returned oldest first).
    pub fn tail(limit: i64) -> Self {
        Self {
            tail: true,
            limit,
            ..Self::default()
        }
    }

    /// Only lines after this sequence number.
    pub fn after_id(mut self, id: i64) -> Self {
        self.after_id = Some(id);
        self
    }

    /// Page size.
    pub fn limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }
}

/// Lists a job's log lines, oldest first, through the `(job_id, id)` index; empty when the
/// job is outside `scope`.
pub async fn list_job_logs<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
    filter: &JobLogListFilter,
) -> Result<Vec<JobLogRecord>> {
    let limit = page_size(filter.limit);
    let (scoped, organization) = scope.sql();
    if !filter.tail {
        let rows = sqlx::query_as!(
            JobLogRecord,
            r#"
            SELECT id, job_id AS "job_id: JobId", attempt, level AS "level: JobLogLevel",
                   message, runledger.readable_json(fields, 'job.invalid_log_fields') AS "fields!",
                   created_at
            FROM runledger.job_logs
            WHERE job_id = $1 AND ($2::bigint IS NULL OR id > $2)
              AND EXISTS (
                  SELECT 1 FROM runledger.job_queue q
                  WHERE q.id = $1 AND (NOT $4 OR q.organization_id IS NOT DISTINCT FROM $5)
              )
            ORDER BY id
            LIMIT $3
            "#,
            job_id.0,
            filter.after_id,
            limit,
            scoped,
            organization,
        )
        .fetch_all(executor)
        .await?;
        return Ok(rows);
    }
    let mut rows = sqlx::query_as!(
        JobLogRecord,
        r#"
        SELECT id, job_id AS "job_id: JobId", attempt, level AS "level: JobLogLevel", message,
               runledger.readable_json(fields, 'job.invalid_log_fields') AS "fields!", created_at
        FROM runledger.job_logs
        WHERE job_id = $1 AND ($2::bigint IS NULL OR id > $2)
          AND EXISTS (
              SELECT 1 FROM runledger.job_queue q
              WHERE q.id = $1 AND (NOT $4 OR q.organization_id IS NOT DISTINCT FROM $5)
          )
        ORDER BY id DESC
        LIMIT $3
        "#,
        job_id.0,
        filter.after_id,
        limit,
        scoped,
        organization,
    )
    .fetch_all(executor)
    .await?;
    rows.reverse();
    Ok(rows)
}
