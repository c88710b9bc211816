//! Per-type queue metrics for dashboards (`runledger.job_metrics_rollup`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::postgres::error::Result;

/// Queue figures for one job type: the live backlog and the last 24 hours.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobMetrics {
    /// The job type (one row per job definition).
    pub job_type: String,
    /// Whether the definition is enabled.
    pub is_enabled: bool,
    /// Jobs waiting, including delayed ones and retries not yet due.
    pub pending: i64,
    /// Pending jobs that are due now (claimable).
    pub pending_ready: i64,
    /// The earliest `next_run_at` among due pending jobs: how long the oldest claimable job
    /// has been waiting.
    pub oldest_ready_at: Option<DateTime<Utc>>,
    /// Jobs leased by a worker.
    pub leased: i64,
    /// Leased jobs whose lease has expired (the worker is gone; the reaper will take them back).
    pub stale_leases: i64,
    /// Jobs that succeeded in the last 24 hours.
    pub succeeded_24h: i64,
    /// Jobs dead-lettered in the last 24 hours.
    pub dead_lettered_24h: i64,
    /// Median duration of the successful attempts of the last 24 hours.
    pub p50_duration_ms: Option<f64>,
    /// 95th percentile duration of the successful attempts of the last 24 hours.
    pub p95_duration_ms: Option<f64>,
    /// Attempts whose handler panicked in the last 24 hours (each also dead-letters its job).
    pub panicked_24h: i64,
    /// Continuations of the last 24 hours (attempts that scheduled their job's next run).
    pub continued_24h: i64,
}

/// Reads [`JobMetrics`] for every job definition, by job type; for one organization's jobs
/// when `organization_id` is given. The global figures are also the rows of the view
/// `runledger.job_metrics_rollup`.
///
/// Every part reads an index range: the backlog through the claim and lease-expiry partial
/// indexes, successes and dead letters through finish-time indexes. Its cost grows with the
/// backlog and the last day's volume, not with the job history.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// for row in runledger_engine::postgres::jobs::get_job_metrics(&pool, None).await? {
///     println!("{}: {} ready, {} stale leases", row.job_type, row.pending_ready, row.stale_leases);
/// }
/// # Ok(()) }
/// ```
pub async fn get_job_metrics<'e>(
    executor: impl PgExecutor<'e>,
    organization_id: Option<Uuid>,
) -> Result<Vec<JobMetrics>> {
    let rows = sqlx::query_as!(
        JobMetrics,
        r#"
        SELECT job_type AS "job_type!", is_enabled AS "is_enabled!", pending AS "pending!",
               pending_ready AS "pending_ready!", oldest_ready_at, leased AS "leased!",
               stale_leases AS "stale_leases!", succeeded_24h AS "succeeded_24h!",
               dead_lettered_24h AS "dead_lettered_24h!", p50_duration_ms, p95_duration_ms,
               panicked_24h AS "panicked_24h!", continued_24h AS "continued_24h!"
        FROM runledger.job_metrics($1)
        ORDER BY job_type
        "#,
        organization_id,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// Unfinished jobs of one type, by state: what [`get_queue_depths`] and [`sample_queue_depths`]
/// return.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct QueueDepth {
    /// The job type.
    pub job_type: String,
    /// The queue.
    pub queue: String,
    /// Pending jobs that are due (claimable now).
    pub ready: i64,
    /// Pending jobs due later (delayed, or waiting for a retry).
    pub scheduled: i64,
    /// Leased jobs.
    pub running: i64,
}

/// Counts unfinished jobs by type, queue and state now: one statement that reads the pending
/// and the leased jobs only, so its cost grows with the backlog, never with the finished
/// history. A type and queue with no unfinished job are absent.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// for depth in runledger_engine::postgres::jobs::get_queue_depths(&pool).await? {
///     println!("{}: {} ready, {} running", depth.job_type, depth.ready, depth.running);
/// }
/// # Ok(()) }
/// ```
pub async fn get_queue_depths<'e>(executor: impl PgExecutor<'e>) -> Result<Vec<QueueDepth>> {
    let rows = sqlx::query_as!(
        QueueDepth,
        r#"
        SELECT job_type AS "job_type!", queue AS "queue!", ready AS "ready!",
               scheduled AS "scheduled!", running AS "running!"
        FROM runledger.count_queue_depths()
        "#,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// The queue depth as every worker process of the database shares it: the count stored by the
/// last sample when it is younger than `max_age`, else a new count, stored for the others. What
/// the Supervisors' queue depth samplers read, so that the database counts the backlog once per
/// interval, not once per process. While one caller counts, the others get the stored count (on
/// the first sample of a database, an empty one). Any `max_age` is valid: `Duration::MAX` reads
/// the stored count whatever its age, once there is one.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use std::time::Duration;
///
/// let depths = runledger_engine::postgres::jobs::sample_queue_depths(&pool, Duration::from_secs(5))
///     .await?;
/// let ready: i64 = depths.iter().map(|depth| depth.ready).sum();
/// println!("{ready} jobs due");
/// # Ok(()) }
/// ```
pub async fn sample_queue_depths<'e>(
    executor: impl PgExecutor<'e>,
    max_age: Duration,
) -> Result<Vec<QueueDepth>> {
    let rows = sqlx::query_as!(
        QueueDepth,
        r#"
        SELECT job_type AS "job_type!", queue AS "queue!", ready AS "ready!",
               scheduled AS "scheduled!", running AS "running!"
        FROM runledger.sample_queue_depths($1)
        "#,
        max_age.as_secs_f64(),
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
