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
        WITH current AS (
            SELECT q.id, c.delay_secs, c.checkpoint, c.progress,
                   (q.workflow_step_id IS NULL OR coalesce(s.continuation_allowed, false)) AS allowed
            FROM unnest($1::uuid[], $2::int4[], $3::float8[], $4::jsonb[], $5::jsonb[])
                 AS c(id, attempt, delay_secs, checkpoint, progress)
            JOIN runledger.job_queue q ON q.id = c.id
            LEFT JOIN runledger.workflow_steps s ON s.id = q.workflow_step_id
            WHERE q.attempt = c.attempt AND q.worker_id = $6
              AND q.leased_at IS NOT NULL AND q.lease_expires_at > now()
            ORDER BY q.id
            FOR UPDATE OF q
        ),
        continued AS (
            UPDATE runledger.job_queue q
            SET status = 'PENDING',
                next_run_at = now() + make_interval(secs => c.delay_secs),
                attempt_floor = q.attempt,
                run_number = q.run_number + 1,
                checkpoint = coalesce(c.checkpoint, q.checkpoint),
                progress = coalesce(c.progress, q.progress),
                worker_id = NULL,
                lease_expires_at = NULL,
                updated_at = now()
            FROM current c
            WHERE q.id = c.id AND c.allowed
            RETURNING q.id, q.job_type, q.attempt, q.leased_at, q.started_at, q.run_number,
                      q.next_run_at
        ),
        attempt_row AS (
            INSERT INTO runledger.job_attempts (job_id, attempt, worker_id, outcome, leased_at, started_at)
            SELECT id, attempt, $6, 'SUCCEEDED', leased_at, coalesce(started_at, leased_at)
            FROM continued
        ),
        event AS (
            INSERT INTO runledger.job_events (job_id, event_type, attempt, worker_id, details)
            SELECT id, 'CONTINUED', attempt, $6,
                   jsonb_build_object('run_number', run_number, 'next_run_at', next_run_at)
            FROM continued
        ),
        notified AS (
            SELECT pg_notify('runledger_job_queue', job_type)
            FROM (SELECT DISTINCT job_type FROM continued WHERE next_run_at <= now()) t
        )
        SELECT c.id AS "id!: JobId",
               c.allowed AS "allowed!",
               n.run_number AS "run_number?",
               n.next_run_at AS "next_run_at?",
               (SELECT count(*) FROM notified) AS "notified!"
        FROM current c
        LEFT JOIN continued n ON n.id = c.id
        "#,
        &ids,
        &attempts,
        &delays,
        &checkpoints as &[Option<Value>],
        &progress as &[Option<Value>],
        worker_id,
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
