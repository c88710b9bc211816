//! The reaper loop: takes back leases whose worker stopped renewing them (crash, partition),
//! retrying the job after a delay or dead-lettering it when no attempts remain.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::core::jobs::JobStatus;
use crate::postgres::jobs::reap_expired_leases;
use crate::runtime::config::{JobsConfig, JobsConfigError};
use crate::runtime::error::{ReaperError, RuntimeLoopExit};
use crate::runtime::observer::{JobLeaseReapedEvent, JobLifecycleObservers, LifecycleEvent};
use crate::runtime::tasks::TaskTree;

/// Default most leases taken back per statement.
pub const DEFAULT_REAPER_BATCH_SIZE: i64 = 500;

/// Settings of the reaper loop.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaperConfig {
    /// Pause between sweeps.
    pub interval: Duration,
    /// Most leases per statement; a full batch is followed at once by another.
    pub batch_size: i64,
    /// Delay before a reaped job is claimable again.
    pub retry_delay: Duration,
}

impl ReaperConfig {
    /// The reaper settings of a [`JobsConfig`].
    pub fn from_jobs_config(config: &JobsConfig) -> Self {
        Self {
            interval: config.reaper_interval,
            batch_size: DEFAULT_REAPER_BATCH_SIZE,
            retry_delay: config.reaper_retry_delay,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), JobsConfigError> {
        if self.interval.is_zero() {
            return Err(JobsConfigError::InvalidField {
                field: "reaper_interval",
                problem: "must be positive",
            });
        }
        if self.batch_size <= 0 {
            return Err(JobsConfigError::InvalidField {
                field: "reaper batch_size",
                problem: "must be positive",
            });
        }
        Ok(())
    }
}

/// Counts from one sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaperPass {
    /// Leases taken back and retried.
    pub retried: usize,
    /// Leases taken back and dead-lettered.
    pub dead_lettered: usize,
    /// Statements run (more than one when batches came back full).
    pub batches: usize,
}

/// Takes back expired leases.
#[derive(Debug, Clone)]
pub struct Reaper {
    pool: PgPool,
    config: ReaperConfig,
    observers: JobLifecycleObservers,
}

impl Reaper {
    /// A reaper with validated settings.
    pub fn new(
        pool: PgPool,
        config: ReaperConfig,
        observers: JobLifecycleObservers,
    ) -> Result<Self, JobsConfigError> {
        config.validate()?;
        Ok(Self {
            pool,
            config,
            observers,
        })
    }

    /// One sweep: bounded batches, repeated while they come back full.
    pub async fn run_once(&self) -> Result<ReaperPass, ReaperError> {
        let mut pass = ReaperPass::default();
        loop {
            let reaped =
                reap_expired_leases(&self.pool, self.config.batch_size, self.config.retry_delay)
                    .await?;
            pass.batches += 1;
            for lease in &reaped {
                let dead_lettered = lease.status == JobStatus::DeadLettered;
                if dead_lettered {
                    pass.dead_lettered += 1;
                } else {
                    pass.retried += 1;
                }
                crate::runtime::metrics::lease_reaped(&lease.job_type, &lease.queue, dead_lettered);
                tracing::warn!(job.id = %lease.job_id, job.r#type = %lease.job_type, worker = %lease.worker_id, status = %lease.status, "reaped an expired lease");
                self.observers
                    .emit(|| LifecycleEvent::LeaseReaped(JobLeaseReapedEvent::from_reaped(lease)));
            }
            if (reaped.len() as i64) < self.config.batch_size {
                return Ok(pass);
            }
        }
    }

    /// Sweeps every interval until `shutdown` fires. Database errors are logged and the next
    /// sweep tries again.
    pub async fn run(self, shutdown: CancellationToken) -> RuntimeLoopExit {
        loop {
            if let Err(err) = self.run_once().await {
                tracing::warn!(code = err.code(), error = %err.internal_message(), "reaper sweep failed");
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.interval) => {}
                () = shutdown.cancelled() => return RuntimeLoopExit::Shutdown,
            }
        }
    }
}

/// Runs the reaper with `config`'s settings until `shutdown` fires.
pub async fn run_reaper_loop(
    pool: PgPool,
    config: JobsConfig,
    observers: JobLifecycleObservers,
    shutdown: CancellationToken,
) -> RuntimeLoopExit {
    let tree = TaskTree::new();
    let (observers, dispatcher) = observers.start(tree.spawner(), shutdown.clone());
    let exit = match Reaper::new(pool, ReaperConfig::from_jobs_config(&config), observers) {
        Ok(reaper) => reaper.run(shutdown).await,
        Err(err) => RuntimeLoopExit::InvalidConfig(err),
    };
    if let Some(dispatcher) = dispatcher {
        let _ = dispatcher.await;
    }
    exit
}
