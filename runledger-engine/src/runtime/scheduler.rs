//! The scheduler loop: materializes due cron fires into jobs. Safe to run in every worker
//! process: due rows are claimed with `FOR UPDATE SKIP LOCKED` and each fire's job is enqueued
//! in the same transaction that advances the cursor.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::postgres::jobs::{SchedulePass, materialize_due_schedules};
use crate::runtime::config::{JobsConfig, JobsConfigError};
use crate::runtime::error::{RuntimeLoopExit, SchedulerError};

/// Default most fires materialized per transaction.
pub const DEFAULT_SCHEDULER_BATCH_SIZE: i64 = 100;

/// Settings of the scheduler loop.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// Pause between passes.
    pub interval: Duration,
    /// Most fires per transaction; a full batch is followed at once by another.
    pub batch_size: i64,
}

impl SchedulerConfig {
    /// The scheduler settings of a [`JobsConfig`].
    pub fn from_jobs_config(config: &JobsConfig) -> Self {
        Self {
            interval: config.schedule_poll_interval,
            batch_size: DEFAULT_SCHEDULER_BATCH_SIZE,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), JobsConfigError> {
        if self.interval.is_zero() || self.batch_size <= 0 {
            return Err(JobsConfigError::InvalidField {
                field: "schedule_poll_interval",
                problem: "and the scheduler batch size must be positive",
            });
        }
        Ok(())
    }
}

/// Materializes due schedule fires.
#[derive(Debug, Clone)]
pub struct Scheduler {
    pool: PgPool,
    config: SchedulerConfig,
}

impl Scheduler {
    /// A scheduler with validated settings.
    pub fn new(pool: PgPool, config: SchedulerConfig) -> Result<Self, JobsConfigError> {
        config.validate()?;
        Ok(Self { pool, config })
    }

    /// One pass: bounded batches, repeated while they come back full.
    pub async fn run_once(&self) -> Result<SchedulePass, SchedulerError> {
        let mut total = SchedulePass::default();
        loop {
            let pass = materialize_due_schedules(&self.pool, self.config.batch_size).await?;
            total.due += pass.due;
            total.fired += pass.fired;
            total.deferred += pass.deferred;
            if (pass.due as i64) < self.config.batch_size {
                return Ok(total);
            }
        }
    }

    /// Runs a pass every interval until `shutdown` fires; database errors are logged and the
    /// next pass tries again.
    pub async fn run(self, shutdown: CancellationToken) -> RuntimeLoopExit {
        loop {
            match self.run_once().await {
                Ok(pass) if pass.fired > 0 || pass.deferred > 0 => {
                    tracing::debug!(
                        fired = pass.fired,
                        deferred = pass.deferred,
                        "schedule pass"
                    );
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "schedule pass failed");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.interval) => {}
                () = shutdown.cancelled() => return RuntimeLoopExit::Shutdown,
            }
        }
    }
}

/// Runs the scheduler with `config`'s settings until `shutdown` fires.
pub async fn run_scheduler_loop(
    pool: PgPool,
    config: JobsConfig,
    shutdown: CancellationToken,
) -> RuntimeLoopExit {
    match Scheduler::new(pool, SchedulerConfig::from_jobs_config(&config)) {
        Ok(scheduler) => scheduler.run(shutdown).await,
        Err(err) => RuntimeLoopExit::InvalidConfig(err),
    }
}
