//! Operator settings of named queues: pausing, resuming and a global concurrency limit.
//!
//! A queue needs no row to exist: jobs name it and workers serve it. A row keeps what an
//! operator changed about it, and survives restarts and deploys.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::postgres::error::{Error, Result};
use crate::postgres::jobs::definitions::check_queue_name;

/// The stored settings of one queue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct QueueSettings {
    /// The queue's name.
    pub name: String,
    /// Whether claims skip the queue's jobs (they stay `PENDING` until it is resumed).
    pub is_paused: bool,
    /// Most of the queue's jobs running at once across all workers (`None`: no global limit).
    pub global_concurrency: Option<i32>,
    /// When an operator last changed the settings.
    pub updated_at: DateTime<Utc>,
}

/// Pauses a queue: no worker claims its jobs until [`resume_queue`]. Jobs already running
/// finish; new ones can still be enqueued. Pausing a paused queue changes nothing.
/// `job.invalid_queue` for a blank name or one over 255 characters.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{pause_queue, resume_queue};
///
/// let settings = pause_queue(&pool, "emails").await?;
/// assert!(settings.is_paused);
/// resume_queue(&pool, "emails").await?;
/// # Ok(()) }
/// ```
pub async fn pause_queue<'e>(executor: impl PgExecutor<'e>, name: &str) -> Result<QueueSettings> {
    set_queue_paused(executor, name, true).await
}

/// Resumes a paused queue: its pending jobs are claimable again at the next claim. Resuming an
/// open queue changes nothing. `job.invalid_queue` for an invalid name.
pub async fn resume_queue<'e>(executor: impl PgExecutor<'e>, name: &str) -> Result<QueueSettings> {
    set_queue_paused(executor, name, false).await
}

async fn set_queue_paused<'e>(
    executor: impl PgExecutor<'e>,
    name: &str,
    paused: bool,
) -> Result<QueueSettings> {
    check_queue_name(name)?;
    let settings = sqlx::query_as!(
        QueueSettings,
        r#"
        INSERT INTO runledger.job_queues AS c (name, is_paused)
        VALUES ($1, $2)
        ON CONFLICT (name) DO UPDATE SET
            is_paused = EXCLUDED.is_paused,
            updated_at = CASE WHEN c.is_paused = EXCLUDED.is_paused THEN c.updated_at ELSE now() END
        RETURNING name, is_paused, global_concurrency, updated_at
        "#,
        name,
        paused,
    )
    .fetch_one(executor)
    .await?;
    Ok(settings)
}

/// Sets (or, with `None`, removes) a queue's global concurrency limit: at most `limit` of its
/// jobs are leased at once across all workers. The queue's pending jobs are flagged for the
/// limited claim in the same statement, which reads every pending job of the queue: set limits
/// when deploying rather than in a loop. `job.invalid_global_concurrency` for a limit below 1,
/// `job.invalid_queue` for an invalid name.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::set_queue_global_concurrency;
///
/// let settings = set_queue_global_concurrency(&pool, "emails", Some(5)).await?;
/// assert_eq!(settings.global_concurrency, Some(5));
/// # Ok(()) }
/// ```
pub async fn set_queue_global_concurrency<'e>(
    executor: impl PgExecutor<'e>,
    name: &str,
    limit: Option<i32>,
) -> Result<QueueSettings> {
    check_queue_name(name)?;
    if limit.is_some_and(|limit| limit < 1) {
        return Err(Error::invalid_input(
            "job.invalid_global_concurrency",
            "a global concurrency limit must be at least 1",
        ));
    }
    let settings = sqlx::query_as!(
        QueueSettings,
        r#"
        WITH previous AS (
            SELECT global_concurrency FROM runledger.job_queues WHERE name = $1
        ),
        upserted AS (
            INSERT INTO runledger.job_queues AS c (name, global_concurrency)
            VALUES ($1, $2)
            ON CONFLICT (name) DO UPDATE SET
                global_concurrency = EXCLUDED.global_concurrency,
                updated_at = now()
            RETURNING name, is_paused, global_concurrency, updated_at
        ),
        -- This statement cannot see its own upsert: pending jobs whose flag differs from what
        -- the new limit makes it are flipped.
        regated AS (
            UPDATE runledger.job_queue q
            SET gated = NOT q.gated
            WHERE q.status = 'PENDING' AND q.queue = $1
              AND (SELECT global_concurrency FROM previous) IS DISTINCT FROM $2
              AND q.gated IS DISTINCT FROM (
                  q.resource_key IS NOT NULL OR $2::int4 IS NOT NULL OR EXISTS (
                      SELECT 1 FROM runledger.job_definitions d
                      WHERE d.job_type = q.job_type AND d.global_concurrency IS NOT NULL
                  )
              )
        )
        SELECT name AS "name!", is_paused AS "is_paused!", global_concurrency,
               updated_at AS "updated_at!"
        FROM upserted
        "#,
        name,
        limit,
    )
    .fetch_one(executor)
    .await?;
    Ok(settings)
}

/// Every queue an operator changed, by name.
pub async fn list_queue_settings<'e>(executor: impl PgExecutor<'e>) -> Result<Vec<QueueSettings>> {
    let rows = sqlx::query_as!(
        QueueSettings,
        r#"
        SELECT name, is_paused, global_concurrency, updated_at
        FROM runledger.job_queues
        ORDER BY name
        "#,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
