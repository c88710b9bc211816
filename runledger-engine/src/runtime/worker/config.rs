//! The worker's settings: [`WorkerConfig`], made from a [`JobsConfig`] or by hand, and the lanes
//! its producers serve.

use std::time::Duration;

use crate::runtime::config::{JobsConfig, JobsConfigError, MAX_LEASE_TTL};
use crate::runtime::queues::{QueueConcurrency, check_queues};

use super::capacity::claim_ahead_room;

/// Default time successes wait to be flushed together.
pub const DEFAULT_COMPLETION_FLUSH_INTERVAL: Duration = Duration::from_millis(2);
/// Default most successes flushed in one statement.
pub const DEFAULT_COMPLETION_BATCH_SIZE: usize = 512;
/// Default number of claim loops issuing claims concurrently.
pub const DEFAULT_CLAIM_PARALLELISM: u32 = 2;
/// Default number of success batches being written concurrently.
pub const DEFAULT_FLUSHES_IN_FLIGHT: usize = 2;
/// Longest pause between retries after a database error.
pub const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(5);

/// Settings of the [`WorkerLoop`](super::WorkerLoop).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// The worker's identity, presented on every lease write.
    pub worker_id: String,
    /// Poll interval when no notification arrives.
    pub poll_interval: Duration,
    /// Most jobs claimed per round trip.
    pub claim_batch_size: u32,
    /// Lease length.
    pub lease_ttl: Duration,
    /// Most handlers running at once, when `queues` is empty.
    pub max_concurrency: u32,
    /// The queues served, each with its own concurrency; empty serves every queue within
    /// `max_concurrency`.
    pub queues: Vec<QueueConcurrency>,
    /// Pause between heartbeats (a third of the lease by default).
    pub heartbeat_interval: Duration,
    /// How long a success may wait for others before the batch is flushed; only while other
    /// jobs are running or waiting to start, or a claim is in flight (a job that finishes alone
    /// is written at once).
    pub completion_flush_interval: Duration,
    /// Most successes per flush.
    pub completion_batch_size: usize,
    /// Claim loops issuing claims concurrently (they share the concurrency limit).
    pub claim_parallelism: u32,
    /// Success batches written concurrently.
    pub flushes_in_flight: usize,
    /// Most claimed jobs whose outcome is not written yet, running or finished. A handler's
    /// concurrency slot is free as soon as it returns; this bound stops claims when writing
    /// outcomes falls behind, so unpersisted outcomes cannot pile up. [`from_jobs_config`]
    /// sets it to [`unpersisted_outcomes_room`](Self::unpersisted_outcomes_room); a config
    /// whose concurrency, queues, claim batch or flush settings are changed afterwards should
    /// set it again from that method.
    ///
    /// [`from_jobs_config`]: Self::from_jobs_config
    pub max_unpersisted_outcomes: usize,
    /// Whether claims commit without waiting for their WAL flush
    /// ([`ClaimRequest::unflushed_commit`]); [`JobsConfig::unflushed_claims`] says what it
    /// trades.
    ///
    /// [`ClaimRequest::unflushed_commit`]: crate::postgres::jobs::ClaimRequest::unflushed_commit
    pub unflushed_claims: bool,
}

impl WorkerConfig {
    /// The worker settings of a [`JobsConfig`], with default flush settings.
    pub fn from_jobs_config(config: &JobsConfig) -> Self {
        let mut worker = Self {
            worker_id: config.worker_id.clone(),
            poll_interval: config.poll_interval,
            claim_batch_size: config.claim_batch_size,
            lease_ttl: config.lease_ttl,
            max_concurrency: config.max_global_concurrency,
            queues: config.queues.clone(),
            heartbeat_interval: config.lease_ttl / 3,
            completion_flush_interval: DEFAULT_COMPLETION_FLUSH_INTERVAL,
            completion_batch_size: DEFAULT_COMPLETION_BATCH_SIZE,
            claim_parallelism: DEFAULT_CLAIM_PARALLELISM,
            flushes_in_flight: DEFAULT_FLUSHES_IN_FLIGHT,
            max_unpersisted_outcomes: 0,
            unflushed_claims: config.unflushed_claims,
        };
        worker.max_unpersisted_outcomes = worker.unpersisted_outcomes_room();
        worker
    }

    /// Room for every outcome these settings can have unwritten while writing keeps up: the
    /// running handlers, the jobs each lane may claim ahead of its free slots, the batch the
    /// completer is gathering and the batches it is writing. The default
    /// [`max_unpersisted_outcomes`](Self::max_unpersisted_outcomes), so that the bound stops
    /// claims only when writing falls behind. A fixed 1,024 (two batches being written) cut the
    /// claims of a worker with 1,024 handlers short: with this room its burn-down of no-op jobs
    /// drained 0 to 22% faster in eight alternated pairs (docs/benchmarks.md).
    ///
    /// ```
    /// use runledger_engine::runtime::config::JobsConfig;
    /// use runledger_engine::runtime::worker::WorkerConfig;
    ///
    /// let config = WorkerConfig::from_jobs_config(&JobsConfig::default());
    /// // 64 handlers, a claim batch of 256 ahead of them, 3 batches of 512 successes.
    /// assert_eq!(config.unpersisted_outcomes_room(), 64 + 256 + 3 * 512);
    /// assert_eq!(config.max_unpersisted_outcomes, config.unpersisted_outcomes_room());
    /// ```
    pub fn unpersisted_outcomes_room(&self) -> usize {
        let held = self.lanes().iter().fold(0_usize, |sum, lane| {
            sum.saturating_add(lane.concurrency as usize)
                .saturating_add(claim_ahead_room(lane.concurrency, self.claim_batch_size))
        });
        let writing = self
            .completion_batch_size
            .saturating_mul(self.flushes_in_flight.saturating_add(1));
        held.saturating_add(writing)
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), JobsConfigError> {
        let invalid = |field, problem| Err(JobsConfigError::InvalidField { field, problem });
        if self.worker_id.trim().is_empty() || self.worker_id.contains('\0') {
            return invalid("worker_id", "must not be blank or contain NUL characters");
        }
        if self.claim_batch_size == 0 || self.max_concurrency == 0 {
            return invalid("claim_batch_size", "and max_concurrency must be at least 1");
        }
        if self.lease_ttl > MAX_LEASE_TTL {
            return invalid("lease_ttl", "must be at most 24 hours");
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.lease_ttl {
            return invalid(
                "heartbeat_interval",
                "must be positive and shorter than the lease",
            );
        }
        if self.poll_interval.is_zero() || self.completion_batch_size == 0 {
            return invalid(
                "poll_interval",
                "and completion_batch_size must be positive",
            );
        }
        if self.claim_parallelism == 0 || self.flushes_in_flight == 0 {
            return invalid(
                "claim_parallelism",
                "and flushes_in_flight must be at least 1",
            );
        }
        if self.max_unpersisted_outcomes == 0 {
            return invalid("max_unpersisted_outcomes", "must be at least 1");
        }
        check_queues(&self.queues)
    }

    /// The worker's lanes: one per served queue, or one for every queue.
    pub(super) fn lanes(&self) -> Vec<Lane> {
        if self.queues.is_empty() {
            return vec![Lane {
                queues: None,
                concurrency: self.max_concurrency,
            }];
        }
        self.queues
            .iter()
            .map(|queue| Lane {
                queues: Some(vec![queue.name.clone()]),
                concurrency: queue.concurrency,
            })
            .collect()
    }

    /// Handlers the worker may run at once: the sum of its queues' concurrencies, or
    /// `max_concurrency` when it serves every queue.
    pub fn total_concurrency(&self) -> u32 {
        self.lanes()
            .iter()
            .fold(0_u32, |sum, lane| sum.saturating_add(lane.concurrency))
    }

    /// Connections the worker's own loops may hold at once: the LISTEN connection, one per
    /// claim loop (each served queue has `claim_parallelism` of them and one for jobs under a
    /// global limit) and per concurrent flush, the heartbeat and the log flusher. Size the pool
    /// above this by what handlers use themselves (and add the reaper's and the scheduler's
    /// one each under a `Supervisor`).
    pub fn connections_used(&self) -> u32 {
        let flushes = u32::try_from(self.flushes_in_flight).unwrap_or(u32::MAX);
        let lanes = u32::try_from(self.lanes().len()).unwrap_or(u32::MAX);
        3_u32
            .saturating_add(lanes.saturating_mul(self.claim_parallelism.saturating_add(1)))
            .saturating_add(flushes)
    }
}

/// A share of the worker's capacity serving some queues (all of them when `queues` is `None`),
/// with its own concurrency slots and its own producer.
pub(super) struct Lane {
    pub(super) queues: Option<Vec<String>>,
    pub(super) concurrency: u32,
}

#[cfg(test)]
mod tests {
    use super::WorkerConfig;
    use crate::runtime::config::JobsConfig;
    use crate::runtime::queues::QueueConcurrency;

    /// The default bound on unwritten outcomes leaves room for every job the worker may hold
    /// (each lane's handlers and the jobs it claims ahead) besides the completer's batches, so
    /// that a worker with many handlers still claims whole batches.
    #[test]
    fn unwritten_outcomes_leave_room_for_every_held_job() {
        let completer = 512 * 3;
        let wide = WorkerConfig::from_jobs_config(&JobsConfig {
            max_global_concurrency: 1024,
            ..JobsConfig::default()
        });
        assert_eq!(wide.max_unpersisted_outcomes, 1024 + 256 + completer);
        // A lane of 10 handlers claims at most 40 ahead of them.
        let lanes = WorkerConfig::from_jobs_config(&JobsConfig {
            queues: vec![
                QueueConcurrency::new("mail", 10),
                QueueConcurrency::new("reports", 100),
            ],
            ..JobsConfig::default()
        });
        assert_eq!(
            lanes.max_unpersisted_outcomes,
            10 + 40 + 100 + 256 + completer
        );
        let huge = WorkerConfig::from_jobs_config(&JobsConfig {
            max_global_concurrency: u32::MAX,
            ..JobsConfig::default()
        });
        assert!(huge.max_unpersisted_outcomes >= u32::MAX as usize);
    }
}
