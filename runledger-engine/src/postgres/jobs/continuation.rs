//! Continuing jobs: an attempt that ends by asking to run again closes as a success and the
//! same job row starts its next run, in one lease-fenced statement per batch.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::core::jobs::limits::check_json;
use crate::core::jobs::{JobContinuation, JobId};
use crate::postgres::error::{Error, Result};

/// Longest delay a continuation may ask for; longer ones are clamped to it.
pub const MAX_CONTINUATION_DELAY: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// One continued attempt of a batch.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobContinued {
    /// The job.
    pub job_id: JobId,
    /// The attempt (fencing token) that continued.
    pub attempt: i32,
    /// What the handler asked for.
    pub continuation: JobContinuation,
}

impl JobContinued {
    /// The continuation of `attempt` of `job_id`.
    pub fn new(job_id: JobId, attempt: i32, continuation: JobContinuation) -> Self {
        Self {
            job_id,
            attempt,
            continuation,
        }
    }
}

/// What became of one continued attempt whose lease still held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobContinuationOutcome {
    /// The attempt closed as a success and the job's next run is scheduled.
    Continued {
        /// The run that starts next.
        run_number: i32,
        /// When it becomes claimable.
        next_run_at: DateTime<Utc>,
    },
    /// The job is a workflow step that did not opt in to continuation; nothing was written.
    NotAllowed,
}

/// Continues many leased jobs of one worker in one statement: each attempt whose lease still
/// holds is recorded as a success, and its job goes back to `PENDING` with `run_number` + 1, a
/// fresh attempt budget, `next_run_at` after the asked delay, the new checkpoint and progress
/// (each kept when not given), a `CONTINUED` event and a notification for idle workers. A
/// workflow step whose step did not opt in is left untouched
/// ([`JobContinuationOutcome::NotAllowed`]); a continued step stays open and releases nothing.
/// Jobs missing from the result had lost their lease. A checkpoint or progress PostgreSQL
/// cannot store is refused before any SQL with `job.invalid_checkpoint` or
/// `job.invalid_progress`.
pub async fn continue_jobs<'e>(
    executor: impl PgExecutor<'e>,
    worker_id: &str,
    continued: &[JobContinued],
) -> Result<Vec<(JobId, JobContinuationOutcome)>> {
    if continued.is_empty() {
        return Ok(Vec::new());
    }
    let mut ordered: Vec<&JobContinued> = continued.iter().collect();
    ordered.sort_unstable_by_key(|c| c.job_id.0);
    let ids: Vec<Uuid> = ordered.iter().map(|c| c.job_id.0).collect();
    let attempts: Vec<i32> = ordered.iter().map(|c| c.attempt).collect();
    let delays: Vec<f64> = ordered
        .iter()
        .map(|c| {
            c.continuation
                .delay
                .min(MAX_CONTINUATION_DELAY)
                .as_secs_f64()
        })
        .collect();
    let mut checkpoints = Vec::with_capacity(ordered.len());
    let mut progress = Vec::with_capacity(ordered.len());
    for c in &ordered {
        if let Some(checkpoint) = &c.continuation.checkpoint {
            check_json(checkpoint).map_err(|problem| {
                Error::invalid_input(
                    "job.invalid_checkpoint",
                    format!("the checkpoint {problem}"),
                )
            })?;
        }
        checkpoints.push(c.continuation.checkpoint.clone());
        progress.push(
            c.continuation
                .progress
                .as_ref()
                .map(super::lease::progress_json)
                .transpose()?,
        );
    }
    let rows = sqlx::query!(
        r#"
        SELECT id AS "id!: JobId", allowed AS "allowed!", run_number, next_run_at
        FROM runledger.continue_jobs($1, $2, $3, $4, $5, $6)
        "#,
        worker_id,
        &ids,
        &attempts,
        &delays,
        &checkpoints as &[Option<Value>],
        &progress as &[Option<Value>],
    )
    .fetch_all(executor)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let outcome = match (row.allowed, row.run_number, row.next_run_at) {
                (true, Some(run_number), Some(next_run_at)) => JobContinuationOutcome::Continued {
                    run_number,
                    next_run_at,
                },
                _ => JobContinuationOutcome::NotAllowed,
            };
            (row.id, outcome)
        })
        .collect())
}
