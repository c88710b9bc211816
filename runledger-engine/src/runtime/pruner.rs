//! The pruner loop: deletes finished direct jobs and finished workflow runs once their
//! retention has passed, in bounded batches. Every worker process may run one; an advisory
//! lock lets only one of them work at a time.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::core::jobs::Retention;
use crate::postgres::jobs::{PruneCounts, prune_batch};
use crate::runtime::config::{JobsConfig, JobsConfigError, MIN_LOOP_INTERVAL};
use crate::runtime::error::RuntimeLoopExit;

/// Default most direct jobs deleted per statement.
pub const DEFAULT_PRUNER_JOB_BATCH_SIZE: i64 = 1_000;
/// Default most workflow runs deleted per statement (each with its steps and step jobs).
pub const DEFAULT_PRUNER_RUN_BATCH_SIZE: i64 = 100;

/// Settings of the pruner loop.
///
/// ```
/// use std::time::Duration;
/// use runledger_engine::core::jobs::Retention;
/// use runledger_engine::runtime::config::JobsConfig;
/// use runledger_engine::runtime::pruner::PrunerConfig;
///
/// let config = PrunerConfig::from_jobs_config(&JobsConfig::default())
///     .retention(Retention::default().succeeded(Duration::from_secs(3_600)));
/// config.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrunerConfig {
    /// Pause between passes.
    pub interval: Duration,
    /// Most direct jobs per statement; a full batch is followed at once by another.
    pub job_batch_size: i64,
    /// Most workflow runs per statement.
    pub run_batch_size: i64,
    /// How long finished work is kept (a definition's own retention wins for its type).
    pub retention: Retention,
}

impl PrunerConfig {
    /// The pruner settings of a [`JobsConfig`].
    pub fn from_jobs_config(config: &JobsConfig) -> Self {
        Self {
            interval: config.prune_interval,
            job_batch_size: DEFAULT_PRUNER_JOB_BATCH_SIZE,
            run_batch_size: DEFAULT_PRUNER_RUN_BATCH_SIZE,
            retention: config.retention,
        }
    }

    /// Replaces the retention.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Replaces the batch sizes (direct jobs, workflow runs).
    pub fn batch_sizes(mut self, jobs: i64, runs: i64) -> Self {
        self.job_batch_size = jobs;
        self.run_batch_size = runs;
        self
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), JobsConfigError> {
        let invalid = |field, problem| Err(JobsConfigError::InvalidField { field, problem });
        if self.interval < MIN_LOOP_INTERVAL {
            return invalid("prune_interval", "must be at least 1 second");
        }
        if self.job_batch_size <= 0 || self.run_batch_size <= 0 {
            return invalid("pruner batch sizes", "must be positive");
        }
        if self.retention.out_of_range_field().is_some() {
            return invalid("retention", "must be between 1 second and i32::MAX seconds");
        }
        Ok(())
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrunerPass {
    /// What was deleted.
    pub deleted: PruneCounts,
    /// Transactions run (more than one when batches came back full).
    pub batches: usize,
    /// Another pruner held the lock, so this pass stopped without deleting more.
    pub locked_out: bool,
}

/// Deletes finished work past its retention.
#[derive(Debug, Clone)]
pub struct Pruner {
    pool: PgPool,
    config: PrunerConfig,
}

impl Pruner {
    /// A pruner with validated settings.
    pub fn new(pool: PgPool, config: PrunerConfig) -> Result<Self, JobsConfigError> {
        config.validate()?;
        Ok(Self { pool, config })
    }

    /// One pass: bounded batches, repeated while they come back full. Stops at once when
    /// another pruner holds the lock.
    pub async fn run_once(&self) -> Result<PrunerPass, crate::postgres::Error> {
        let mut pass = PrunerPass::default();
        loop {
            let batch = prune_batch(
                &self.pool,
                &self.config.retention,
                self.config.job_batch_size,
                self.config.run_batch_size,
            )
            .await?;
            pass.batches += 1;
            if batch.locked_out {
                pass.locked_out = true;
                return Ok(pass);
            }
            pass.deleted.add(&batch.deleted);
            let full = batch.deleted.jobs() >= self.config.job_batch_size.unsigned_abs()
                || batch.deleted.runs() >= self.config.run_batch_size.unsigned_abs();
            if !full {
                return Ok(pass);
            }
        }
    }

    /// Runs a pass every interval until `shutdown` fires; a pass in progress is abandoned (its
    /// open batch rolls back). Database errors are logged and the next pass tries again.
    pub async fn run(self, shutdown: CancellationToken) -> RuntimeLoopExit {
        loop {
            tokio::select! {
                result = self.run_once() => match result {
                    Ok(pass) if pass.deleted.jobs() > 0 || pass.deleted.runs() > 0 => {
                        tracing::info!(
                            jobs = pass.deleted.jobs(),
                            runs = pass.deleted.runs(),
                            batches = pass.batches,
                            "pruned finished work past its retention"
                        );
                    }
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(code = err.code(), error = %err.internal_message(), "prune pass failed");
                    }
                },
                () = shutdown.cancelled() => return RuntimeLoopExit::Shutdown,
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.interval) => {}
                () = shutdown.cancelled() => return RuntimeLoopExit::Shutdown,
            }
        }
    }
}
