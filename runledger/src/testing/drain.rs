//! Running queued work inline, pass after pass, until nothing is due.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::PgPool;

use super::error::TestingError;
use crate::engine::core::jobs::{JobFailureKind, JobId};
use crate::engine::postgres::jobs::{
    IntentPromotion, promote_job_enqueue_intents, run_waiting_jobs_now,
};
use crate::engine::runtime::observer::JobLifecycleObservers;
use crate::engine::runtime::worker::{PassOutcome, PassedJob, WorkerConfig, WorkerLoop};
use crate::engine::runtime::{JobFailureDisposition, config::JobsConfig};
use crate::{Error, Job, SchemaMode, Worker};

/// The most passes [`drain`] runs by default before it reports that work never settles.
pub const DEFAULT_MAX_PASSES: usize = 1_000;

/// How [`drain_with`] drains.
///
/// ```
/// use std::time::Duration;
/// use runledger::testing::DrainOptions;
///
/// // Also run jobs waiting up to an hour (delays and retry backoffs), without sleeping.
/// let options = DrainOptions::new().include_delayed_for(Duration::from_secs(3600));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct DrainOptions {
    delayed_until: Option<DateTime<Utc>>,
    max_passes: usize,
}

impl Default for DrainOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl DrainOptions {
    /// Only jobs due now; at most [`DEFAULT_MAX_PASSES`] passes.
    pub fn new() -> Self {
        Self {
            delayed_until: None,
            max_passes: DEFAULT_MAX_PASSES,
        }
    }

    /// Also runs jobs that wait for a time up to `until` (delayed jobs and retries waiting out
    /// their backoff): before each pass they are made due at once.
    pub fn include_delayed_until(mut self, until: DateTime<Utc>) -> Self {
        self.delayed_until = Some(until);
        self
    }

    /// [`include_delayed_until`](Self::include_delayed_until) now plus `window`.
    pub fn include_delayed_for(self, window: Duration) -> Self {
        let window = TimeDelta::from_std(window).unwrap_or(TimeDelta::MAX);
        let until = Utc::now()
            .checked_add_signed(window)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        self.include_delayed_until(until)
    }

    /// Stops with `testing.drain_did_not_settle` after `passes` passes that still found work.
    pub fn max_passes(mut self, passes: usize) -> Self {
        self.max_passes = passes;
        self
    }
}

/// How one run of a job ended during a drain.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DrainOutcome {
    /// It succeeded; its output is stored.
    Succeeded,
    /// It failed and will be retried at `next_run_at`.
    Retrying {
        /// The failure's code.
        code: String,
        /// The failure's message.
        message: String,
        /// How it failed.
        kind: JobFailureKind,
        /// When the next attempt may start.
        next_run_at: DateTime<Utc>,
    },
    /// It failed for good and was dead-lettered.
    DeadLettered {
        /// The failure's code.
        code: String,
        /// The failure's message.
        message: String,
        /// How it failed.
        kind: JobFailureKind,
    },
    /// It continued: the attempt closed as a success and the job's next run is scheduled.
    Continued {
        /// The run that starts next.
        run_number: i32,
        /// When it becomes claimable.
        next_run_at: DateTime<Utc>,
    },
    /// Its outcome could not be recorded (its lease was lost meanwhile).
    NotRecorded,
}

/// One handler run of a drain.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DrainedRun {
    /// The job.
    pub job_id: JobId,
    /// Its type.
    pub job_type: String,
    /// Which attempt this was (1 for the first).
    pub attempt: i32,
    /// How it ended.
    pub outcome: DrainOutcome,
}

impl From<PassedJob> for DrainedRun {
    fn from(passed: PassedJob) -> Self {
        let outcome = match passed.outcome {
            PassOutcome::Succeeded => DrainOutcome::Succeeded,
            PassOutcome::Continued {
                run_number,
                next_run_at,
            } => DrainOutcome::Continued {
                run_number,
                next_run_at,
            },
            PassOutcome::Failed {
                kind,
                code,
                message,
                disposition,
            } => match disposition {
                JobFailureDisposition::RetryScheduled { next_run_at } => DrainOutcome::Retrying {
                    code,
                    message,
                    kind,
                    next_run_at,
                },
                _ => DrainOutcome::DeadLettered {
                    code,
                    message,
                    kind,
                },
            },
            _ => DrainOutcome::NotRecorded,
        };
        Self {
            job_id: passed.job.job_id,
            job_type: passed.job.job_type,
            attempt: passed.job.attempt_number,
            outcome,
        }
    }
}

/// Everything a drain ran, in order.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Every handler run, pass by pass.
    pub runs: Vec<DrainedRun>,
    /// Passes that found work.
    pub passes: usize,
}

impl DrainReport {
    /// Runs that succeeded.
    pub fn succeeded(&self) -> usize {
        self.count(|o| matches!(o, DrainOutcome::Succeeded))
    }

    /// Runs that continued their job (see [`Continuation`](crate::Continuation)).
    pub fn continued(&self) -> usize {
        self.count(|o| matches!(o, DrainOutcome::Continued { .. }))
    }

    /// Runs that failed and were scheduled for a retry.
    pub fn retried(&self) -> usize {
        self.count(|o| matches!(o, DrainOutcome::Retrying { .. }))
    }

    /// Runs that dead-lettered their job.
    pub fn dead_lettered(&self) -> usize {
        self.count(|o| matches!(o, DrainOutcome::DeadLettered { .. }))
    }

    /// The runs of job type `J`, in order.
    pub fn runs_of<J: Job>(&self) -> Vec<&DrainedRun> {
        self.runs
            .iter()
            .filter(|run| run.job_type == J::NAME)
            .collect()
    }

    fn count(&self, wanted: impl Fn(&DrainOutcome) -> bool) -> usize {
        self.runs.iter().filter(|run| wanted(&run.outcome)).count()
    }
}

/// Syncs the definitions and schedules of everything registered in this binary (`#[job]`,
/// `#[schedule]`), as a worker does when it starts, so that enqueueing works in a test that
/// starts no worker. [`TestDatabase::new`](super::TestDatabase::new) does it already; call it on
/// the pool `#[sqlx::test]` gives.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::testing::TestingError> {
/// runledger::testing::prepare(&pool).await?;
/// # Ok(()) }
/// ```
pub async fn prepare(pool: &PgPool) -> Result<(), TestingError> {
    Worker::builder(pool)
        .schema(SchemaMode::Skip)
        .build()?
        .prepare()
        .await?;
    Ok(())
}

/// Runs every due job and workflow step of the jobs registered in this binary (`#[job]`), in
/// the test's own process, pass after pass (each pass promotes the pending enqueue intents of
/// those jobs, then claims and runs up to 100 jobs at once and records their outcomes), until
/// a pass finds nothing due. Workflow steps released by a
/// pass run in the next one, so a whole DAG drains in one call; gates stay open until the
/// test completes them. Syncs the job definitions first.
///
/// Delayed jobs and retries waiting for their backoff are left alone unless
/// [`DrainOptions::include_delayed_until`] says otherwise (see [`drain_with`]). Handlers run
/// as under a worker: with their timeouts, panics caught and recorded.
///
/// ```no_run
/// # use runledger::prelude::*;
/// # #[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::testing::TestingError> {
/// Crawl { url: "https://example.com".into() }.enqueue(&pool).await?;
/// let report = runledger::testing::drain(&pool).await?;
/// assert_eq!(report.succeeded(), 1);
/// # Ok(()) }
/// ```
pub async fn drain(pool: &PgPool) -> Result<DrainReport, TestingError> {
    drain_with(pool, DrainOptions::new()).await
}

/// [`drain`] with options: include delayed work up to a time, bound the passes.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::testing::TestingError> {
/// use runledger::testing::{DrainOptions, drain_with};
///
/// // A job failing once with a retryable error runs twice, without waiting for its backoff.
/// let report = drain_with(&pool, DrainOptions::new().include_delayed_for(Duration::from_secs(3600)))
///     .await?;
/// assert_eq!((report.retried(), report.succeeded()), (1, 1));
/// # Ok(()) }
/// ```
pub async fn drain_with(pool: &PgPool, options: DrainOptions) -> Result<DrainReport, TestingError> {
    drain_worker(&Worker::builder(pool).build()?, options).await
}

/// [`drain_with`] through `worker`'s handlers, so that they get its shared state
/// ([`WorkerBuilder::data`](crate::WorkerBuilder::data)) and its engine handlers; the worker is
/// not started.
///
/// ```no_run
/// # use runledger::prelude::*;
/// # struct Mailer;
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::testing::TestingError> {
/// use runledger::testing::{DrainOptions, drain_worker};
///
/// let worker = Worker::builder(&pool).data(Mailer).build()?;
/// let report = drain_worker(&worker, DrainOptions::new()).await?;
/// # let _ = report;
/// # Ok(()) }
/// ```
pub async fn drain_worker(
    worker: &Worker,
    options: DrainOptions,
) -> Result<DrainReport, TestingError> {
    let pool = worker.pool();
    let catalog = worker.catalog();
    catalog
        .sync_definitions(pool)
        .await
        .map_err(|e| TestingError::Runledger(e.into()))?;
    let registry = catalog.handlers().clone();
    let job_types = registry.job_types();
    let config = JobsConfig {
        worker_id: "runledger-testing-drain".to_owned(),
        claim_batch_size: 100,
        max_global_concurrency: 100,
        ..JobsConfig::default()
    };
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&config),
        JobLifecycleObservers::new(),
    )
    .map_err(|e| TestingError::Runledger(Error::Config(e)))?;

    let mut report = DrainReport::default();
    while report.passes < options.max_passes {
        // Intents recorded by the code under test become jobs first, as a worker's intent
        // promoter would make them.
        promote_job_enqueue_intents(pool, &IntentPromotion::new(&job_types, 1_000)).await?;
        if let Some(until) = options.delayed_until {
            run_waiting_jobs_now(pool, until, &job_types).await?;
        }
        let pass = worker
            .run_once()
            .await
            .map_err(crate::engine::runtime::WorkerError::into_persistence)?;
        if pass.claimed == 0 {
            return Ok(report);
        }
        report.passes += 1;
        report
            .runs
            .extend(pass.jobs.into_iter().map(DrainedRun::from));
    }
    Err(TestingError::DrainDidNotSettle {
        passes: report.passes,
    })
}
