//! Activity over the last hour, minute by minute: what the operator dashboard charts.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::postgres::error::Result;

/// One minute of queue activity.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct JobActivityMinute {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Jobs that succeeded during the minute.
    pub succeeded: i64,
    /// Jobs dead-lettered during the minute.
    pub dead_lettered: i64,
    /// Jobs enqueued during the minute.
    pub enqueued: i64,
    /// Jobs pending or leased at the minute's end (for the current minute: now). Derived from
    /// today's backlog and the jobs enqueued and finished since, so no sampling is needed.
    pub queue_depth: i64,
}

/// The last 60 minutes of activity, oldest first, for one organization or (with `None`) all.
///
/// One statement over index ranges of the last hour: successes through the succeeded-by-finish
/// index, dead letters through theirs, enqueues through the primary key (ids are UUIDv7, so
/// the hour's jobs are one key range), and the current backlog through the claim and lease
/// indexes. Its cost follows the hour's traffic, not the history kept.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::get_job_activity;
///
/// for minute in get_job_activity(&pool, None).await? {
///     println!("{} ok {} dead {} depth {}", minute.minute, minute.succeeded, minute.dead_lettered, minute.queue_depth);
/// }
/// # Ok(()) }
/// ```
pub async fn get_job_activity<'e>(
    executor: impl PgExecutor<'e>,
    organization_id: Option<Uuid>,
) -> Result<Vec<JobActivityMinute>> {
    let rows = sqlx::query_as!(
        JobActivityMinute,
        r#"
        WITH bounds AS (
            SELECT date_trunc('minute', now()) - interval '59 minutes' AS since
        ),
        minutes AS (
            SELECT generate_series(b.since, b.since + interval '59 minutes', interval '1 minute') AS minute
            FROM bounds b
        ),
        succeeded AS (
            SELECT date_trunc('minute', q.finished_at) AS minute, count(*) AS n
            FROM runledger.job_queue q, bounds b
            WHERE q.status = 'SUCCEEDED' AND q.finished_at >= b.since
              AND ($1::uuid IS NULL OR q.organization_id = $1)
            GROUP BY 1
        ),
        dead AS (
            SELECT date_trunc('minute', l.dead_lettered_at) AS minute, count(*) AS n
            FROM runledger.job_dead_letters l, bounds b
            WHERE l.dead_lettered_at >= b.since
              AND ($1::uuid IS NULL OR l.organization_id = $1)
            GROUP BY 1
        ),
        canceled AS (
            SELECT date_trunc('minute', q.finished_at) AS minute, count(*) AS n
            FROM runledger.job_queue q, bounds b
            WHERE q.status = 'CANCELED' AND q.finished_at >= b.since
              AND ($1::uuid IS NULL OR q.organization_id = $1)
            GROUP BY 1
        ),
        enqueued AS (
            SELECT date_trunc('minute', q.created_at) AS minute, count(*) AS n
            FROM runledger.job_queue q, bounds b
            WHERE q.id >= runledger.uuidv7_floor(b.since) AND q.created_at >= b.since
              AND ($1::uuid IS NULL OR q.organization_id = $1)
            GROUP BY 1
        ),
        backlog AS (
            SELECT count(*) AS n
            FROM runledger.job_queue q
            WHERE q.status IN ('PENDING', 'LEASED')
              AND ($1::uuid IS NULL OR q.organization_id = $1)
        ),
        counted AS (
            SELECT m.minute,
                   coalesce(s.n, 0) AS succeeded,
                   coalesce(d.n, 0) AS dead_lettered,
                   coalesce(e.n, 0) AS enqueued,
                   coalesce(s.n, 0) + coalesce(d.n, 0) + coalesce(c.n, 0) - coalesce(e.n, 0) AS drained
            FROM minutes m
            LEFT JOIN succeeded s ON s.minute = m.minute
            LEFT JOIN dead d ON d.minute = m.minute
            LEFT JOIN canceled c ON c.minute = m.minute
            LEFT JOIN enqueued e ON e.minute = m.minute
        )
        SELECT c.minute AS "minute!",
               c.succeeded AS "succeeded!",
               c.dead_lettered AS "dead_lettered!",
               c.enqueued AS "enqueued!",
               greatest((SELECT n FROM backlog) + coalesce(sum(c.drained) OVER (
                   ORDER BY c.minute DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
               ), 0), 0)::bigint AS "queue_depth!"
        FROM counted c
        ORDER BY c.minute
        "#,
        organization_id,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
