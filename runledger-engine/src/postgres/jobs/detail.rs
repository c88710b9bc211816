//! Everything an operator needs about one job, in one call.

use sqlx::{Acquire, Postgres};

use crate::core::jobs::JobId;
use crate::postgres::error::Result;

use super::logs::{JobLogListFilter, JobLogRecord, list_job_logs};
use super::reads::{
    DeadLetterListFilter, JobAttempt, JobDeadLetter, JobEvent, JobRecord, get_job_by_id,
    list_dead_letters, list_job_attempts, list_job_events,
};
use super::scope::TenantScope;

/// Most log lines [`get_job_detail`] returns (the newest ones).
pub const JOB_DETAIL_LOG_LINES: i64 = 500;

/// A job with its history: attempts, events, dead letters and the newest log lines. Serialized,
/// the job's fields sit beside `attempts`, `events`, `dead_letters` and `logs`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobDetail {
    /// The job row.
    #[serde(flatten)]
    pub job: JobRecord,
    /// Finished attempts, in order.
    pub attempts: Vec<JobAttempt>,
    /// Events, in order.
    pub events: Vec<JobEvent>,
    /// Dead-letter rows (one per time the job was dead-lettered), newest first.
    pub dead_letters: Vec<JobDeadLetter>,
    /// The newest [`JOB_DETAIL_LOG_LINES`] log lines, oldest first.
    pub logs: Vec<JobLogRecord>,
}

/// Reads a job and its history on one connection; `None` when the job does not exist or is
/// outside `scope`. Each part is an index lookup by job id.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger_engine::core::jobs::JobId)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{get_job_detail, TenantScope};
///
/// if let Some(detail) = get_job_detail(&pool, job_id, TenantScope::Admin).await? {
///     println!("{} attempts, {} log lines", detail.attempts.len(), detail.logs.len());
/// }
/// # Ok(()) }
/// ```
pub async fn get_job_detail<'c, A>(
    acquire: A,
    job_id: JobId,
    scope: TenantScope,
) -> Result<Option<JobDetail>>
where
    A: Acquire<'c, Database = Postgres>,
{
    let mut conn = acquire.acquire().await?;
    let Some(job) = get_job_by_id(&mut *conn, job_id, scope).await? else {
        return Ok(None);
    };
    // The job is inside the scope: its history may be read unscoped.
    let attempts = list_job_attempts(&mut *conn, job_id, TenantScope::Admin).await?;
    let events = list_job_events(&mut *conn, job_id, TenantScope::Admin).await?;
    let dead_letters = list_dead_letters(
        &mut *conn,
        &DeadLetterListFilter::new().job_id(job_id).limit(100),
    )
    .await?;
    let logs = list_job_logs(
        &mut *conn,
        job_id,
        TenantScope::Admin,
        &JobLogListFilter::tail(JOB_DETAIL_LOG_LINES),
    )
    .await?;
    Ok(Some(JobDetail {
        job,
        attempts,
        events,
        dead_letters,
        logs,
    }))
}
