//! Retention: deleting finished direct jobs and finished workflow runs once their retention
//! has passed, in bounded batches, one pruner at a time; and counting what would go.

use sqlx::{PgExecutor, PgPool};

use crate::core::jobs::Retention;
use crate::postgres::error::Result;

/// What a prune deleted, or a dry run would delete, by how the work ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PruneCounts {
    /// Succeeded direct jobs.
    pub succeeded_jobs: u64,
    /// Dead-lettered direct jobs.
    pub dead_lettered_jobs: u64,
    /// Canceled direct jobs.
    pub canceled_jobs: u64,
    /// Succeeded workflow runs (with their steps and step jobs).
    pub succeeded_runs: u64,
    /// Workflow runs completed with errors.
    pub completed_with_errors_runs: u64,
    /// Canceled workflow runs.
    pub canceled_runs: u64,
}

impl PruneCounts {
    /// Direct jobs in all.
    pub fn jobs(&self) -> u64 {
        self.succeeded_jobs + self.dead_lettered_jobs + self.canceled_jobs
    }

    /// Workflow runs in all.
    pub fn runs(&self) -> u64 {
        self.succeeded_runs + self.completed_with_errors_runs + self.canceled_runs
    }

    /// Adds `other` to these counts.
    pub fn add(&mut self, other: &Self) {
        self.succeeded_jobs += other.succeeded_jobs;
        self.dead_lettered_jobs += other.dead_lettered_jobs;
        self.canceled_jobs += other.canceled_jobs;
        self.succeeded_runs += other.succeeded_runs;
        self.completed_with_errors_runs += other.completed_with_errors_runs;
        self.canceled_runs += other.canceled_runs;
    }
}

/// The result of one [`prune_batch`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneBatch {
    /// What was deleted.
    pub deleted: PruneCounts,
    /// Another pruner held the lock, so nothing was tried.
    pub locked_out: bool,
}

/// The advisory lock that lets one pruner at a time work, across every worker process.
const PRUNER_LOCK: &str = "runledger.pruner";

fn seconds(retention: &Retention) -> (f64, f64, f64) {
    (
        retention.succeeded.as_secs_f64(),
        retention.dead_lettered.as_secs_f64(),
        retention.canceled.as_secs_f64(),
    )
}

fn count(value: Option<i64>) -> u64 {
    u64::try_from(value.unwrap_or(0)).unwrap_or(0)
}

/// Deletes, in one transaction, up to `job_limit` finished direct jobs and up to `run_limit`
/// finished workflow runs whose retention has passed, with everything they own: attempts,
/// events, logs and dead letters; a run's steps, edges, mutations and step jobs. A job's own
/// definition retention (`retention_seconds`) replaces `retention` for its type; runs follow
/// `retention` by their status. The idempotency keys of deleted jobs and runs are free again.
///
/// Only one pruner works at a time, across processes: while another transaction holds the
/// pruner lock, this returns at once with `locked_out` set and nothing deleted. Call again
/// while a batch comes back full.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::core::jobs::Retention;
/// use runledger_engine::postgres::jobs::prune_batch;
///
/// let batch = prune_batch(&pool, &Retention::default(), 1_000, 50).await?;
/// println!("deleted {} jobs and {} runs", batch.deleted.jobs(), batch.deleted.runs());
/// # Ok(()) }
/// ```
pub async fn prune_batch(
    pool: &PgPool,
    retention: &Retention,
    job_limit: i64,
    run_limit: i64,
) -> Result<PruneBatch> {
    let (succeeded, dead_lettered, canceled) = seconds(retention);
    let mut tx = pool.begin().await?;
    let locked = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock(hashtext($1)) AS "locked!""#,
        PRUNER_LOCK,
    )
    .fetch_one(&mut *tx)
    .await?;
    if !locked {
        return Ok(PruneBatch {
            deleted: PruneCounts::default(),
            locked_out: true,
        });
    }
    // The status is checked again on the row being deleted: a job requeued since the
    // selection's snapshot is kept.
    let jobs = sqlx::query!(
        r#"
        WITH deleted AS (
            DELETE FROM runledger.job_queue q
            USING runledger.prunable_jobs($1, $2, $3, $4) p
            WHERE q.id = p.id AND q.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
            RETURNING q.status
        )
        SELECT count(*) FILTER (WHERE status = 'SUCCEEDED') AS succeeded,
               count(*) FILTER (WHERE status = 'DEAD_LETTERED') AS dead_lettered,
               count(*) FILTER (WHERE status = 'CANCELED') AS canceled
        FROM deleted
        "#,
        succeeded,
        dead_lettered,
        canceled,
        job_limit.max(0),
    )
    .fetch_one(&mut *tx)
    .await?;
    let runs = sqlx::query!(
        r#"
        WITH deleted AS (
            DELETE FROM runledger.workflow_runs w
            USING runledger.prunable_workflow_runs($1, $2, $3, $4) p
            WHERE w.id = p.id AND w.finished_at IS NOT NULL
            RETURNING w.status
        )
        SELECT count(*) FILTER (WHERE status = 'SUCCEEDED') AS succeeded,
               count(*) FILTER (WHERE status = 'COMPLETED_WITH_ERRORS') AS completed_with_errors,
               count(*) FILTER (WHERE status = 'CANCELED') AS canceled
        FROM deleted
        "#,
        succeeded,
        dead_lettered,
        canceled,
        run_limit.max(0),
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(PruneBatch {
        deleted: PruneCounts {
            succeeded_jobs: count(jobs.succeeded),
            dead_lettered_jobs: count(jobs.dead_lettered),
            canceled_jobs: count(jobs.canceled),
            succeeded_runs: count(runs.succeeded),
            completed_with_errors_runs: count(runs.completed_with_errors),
            canceled_runs: count(runs.canceled),
        },
        locked_out: false,
    })
}

/// Counts what a prune with `retention` would delete now (the operators' dry run): the same
/// selection as [`prune_batch`], without a limit and without deleting or locking anything.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::core::jobs::Retention;
/// use runledger_engine::postgres::jobs::count_prunable;
///
/// let due = count_prunable(&pool, &Retention::default()).await?;
/// println!("{} jobs and {} runs are past their retention", due.jobs(), due.runs());
/// # Ok(()) }
/// ```
pub async fn count_prunable<'e>(
    executor: impl PgExecutor<'e>,
    retention: &Retention,
) -> Result<PruneCounts> {
    let (succeeded, dead_lettered, canceled) = seconds(retention);
    let row = sqlx::query!(
        r#"
        WITH jobs AS (
            SELECT status FROM runledger.prunable_jobs($1, $2, $3, NULL)
        ),
        runs AS (
            SELECT status FROM runledger.prunable_workflow_runs($1, $2, $3, NULL)
        )
        SELECT (SELECT count(*) FROM jobs WHERE status = 'SUCCEEDED') AS succeeded_jobs,
               (SELECT count(*) FROM jobs WHERE status = 'DEAD_LETTERED') AS dead_lettered_jobs,
               (SELECT count(*) FROM jobs WHERE status = 'CANCELED') AS canceled_jobs,
               (SELECT count(*) FROM runs WHERE status = 'SUCCEEDED') AS succeeded_runs,
               (SELECT count(*) FROM runs WHERE status = 'COMPLETED_WITH_ERRORS') AS completed_with_errors_runs,
               (SELECT count(*) FROM runs WHERE status = 'CANCELED') AS canceled_runs
        "#,
        succeeded,
        dead_lettered,
        canceled,
    )
    .fetch_one(executor)
    .await?;
    Ok(PruneCounts {
        succeeded_jobs: count(row.succeeded_jobs),
        dead_lettered_jobs: count(row.dead_lettered_jobs),
        canceled_jobs: count(row.canceled_jobs),
        succeeded_runs: count(row.succeeded_runs),
        completed_with_errors_runs: count(row.completed_with_errors_runs),
        canceled_runs: count(row.canceled_runs),
    })
}
