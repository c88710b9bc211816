//! The queue depth sampler: every few seconds it sets the [`QUEUE_DEPTH`] gauge from the count
//! of unfinished jobs by type, queue and state that the worker processes of a database share
//! (see [`sample_queue_depths`]): the database counts them once per interval however many
//! processes sample. The workers' hot path never counts anything in the database; this loop is
//! the only place the gauge is fed from.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::core::metrics::{LABEL_STATE, QUEUE_DEPTH, job_labels};
use crate::postgres::jobs::{QueueDepth, sample_queue_depths};
use crate::runtime::config::{JobsConfig, JobsConfigError, MIN_LOOP_INTERVAL};
use crate::runtime::error::RuntimeLoopExit;

/// Settings of the queue depth sampler.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueDepthConfig {
    /// Pause between samples.
    pub interval: Duration,
}

impl QueueDepthConfig {
    /// The sampler settings of a [`JobsConfig`] (its `queue_depth_interval`).
    pub fn from_jobs_config(config: &JobsConfig) -> Self {
        Self {
            interval: config.queue_depth_interval,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), JobsConfigError> {
        if self.interval < MIN_LOOP_INTERVAL {
            return Err(JobsConfigError::InvalidField {
                field: "queue_depth_interval",
                problem: "must be at least 1 second",
            });
        }
        Ok(())
    }
}

/// Samples the queue depth into the [`QUEUE_DEPTH`] gauge.
#[derive(Debug)]
pub struct QueueDepthSampler {
    pool: PgPool,
    config: QueueDepthConfig,
    /// Types reported by the last sample: one that has no unfinished job any more is set to
    /// zero once instead of keeping its last value.
    reported: Mutex<HashSet<(String, String)>>,
}

impl QueueDepthSampler {
    /// A sampler with validated settings.
    pub fn new(pool: PgPool, config: QueueDepthConfig) -> Result<Self, JobsConfigError> {
        config.validate()?;
        Ok(Self {
            pool,
            config,
            reported: Mutex::new(HashSet::new()),
        })
    }

    /// Takes one sample, sets the gauges and returns it. The sample is the count another
    /// process (or this one) stored within the last interval, if there is one.
    pub async fn run_once(&self) -> Result<Vec<QueueDepth>, crate::postgres::Error> {
        let depths = sample_queue_depths(&self.pool, self.config.interval).await?;
        let mut reported = self
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut now_reported = HashSet::with_capacity(depths.len());
        for depth in &depths {
            set_gauges(
                &depth.job_type,
                &depth.queue,
                [depth.ready, depth.scheduled, depth.running],
            );
            now_reported.insert((depth.job_type.clone(), depth.queue.clone()));
        }
        for (job_type, queue) in reported.difference(&now_reported) {
            set_gauges(job_type, queue, [0, 0, 0]);
        }
        *reported = now_reported;
        Ok(depths)
    }

    /// Samples every interval until `shutdown` fires. A failed sample is logged and the next
    /// one tries again.
    pub async fn run(self, shutdown: CancellationToken) -> RuntimeLoopExit {
        loop {
            if let Err(err) = self.run_once().await {
                tracing::warn!(code = err.code(), error = %err.internal_message(), "queue depth sample failed");
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.interval) => {}
                () = shutdown.cancelled() => return RuntimeLoopExit::Shutdown,
            }
        }
    }
}

/// Sets the ready, scheduled and running gauges of one job type in one queue.
fn set_gauges(job_type: &str, queue: &str, counts: [i64; 3]) {
    for (state, count) in ["ready", "scheduled", "running"].into_iter().zip(counts) {
        let mut labels = job_labels(job_type, queue);
        labels.push(metrics::Label::new(LABEL_STATE, state));
        metrics::gauge!(QUEUE_DEPTH, labels).set(count as f64);
    }
}
