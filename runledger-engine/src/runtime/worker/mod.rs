//! The worker loop: claim registered job types up to free capacity (per served queue, each
//! queue a lane with its own slots), run each handler in its own task (timeouts and panics
//! contained per job), heartbeat every lease in one statement, and write outcomes in batches.
//!
//! [`WorkerLoop`] wires a set of components, each owning its state:
//!
//! - `producer`: one per lane, owning the lane's capacity (`capacity`: its slots, its room for
//!   jobs claimed ahead, its share of the bound on unwritten outcomes) and running its claim
//!   loops; each claimed job gets a task;
//! - `executor`: runs one handler under its timeout, its lease and the hard stop, panics
//!   contained;
//! - `lease_table`: the leases this worker holds, for the heartbeat, lost leases and the
//!   shutdown report;
//! - `completer`: receives outcomes on a channel (`outcome`) and writes them in batches;
//! - `heartbeat`: renews the lease table's leases in one statement;
//! - `listener`: LISTEN wake-ups for the producers;
//! - `log_buffer`: the lines handlers log, stored in batches.
//!
//! Every task a worker starts belongs to one task tree, so dropping [`WorkerLoop::run`]'s
//! future stops them all.

mod capacity;
mod completer;
mod config;
mod executor;
mod heartbeat;
mod lease_table;
mod listener;
mod log_buffer;
mod outcome;
mod pass;
mod producer;
#[cfg(test)]
mod testing;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use self::completer::Completer;
pub use self::config::{
    DEFAULT_CLAIM_PARALLELISM, DEFAULT_COMPLETION_BATCH_SIZE, DEFAULT_COMPLETION_FLUSH_INTERVAL,
    DEFAULT_FLUSHES_IN_FLIGHT, MAX_ERROR_BACKOFF, WorkerConfig,
};
use self::executor::{Executor, job_span};
use self::heartbeat::Heartbeat;
use self::lease_table::LeaseTable;
use self::listener::Wakers;
use self::log_buffer::LogBuffer;
use self::outcome::ExpectedOutcomes;
pub use self::pass::{PassOutcome, PassedJob, WorkerPass};
use self::producer::{Claims, JobTasks, Launcher, Producer};
use crate::core::jobs::{JobId, JobLogSink};
use crate::postgres::jobs::{PgJobServices, claim_jobs, claim_limited_jobs, mark_jobs_running};
use crate::postgres::open_connections;
use crate::runtime::config::{JobsConfig, JobsConfigError, check_pool_size, warn_if_pool_small};
use crate::runtime::error::{RuntimeLoopExit, WorkerError};
use crate::runtime::metrics::WorkerMetrics;
use crate::runtime::observer::{JobLifecycleObservers, ObservedJob};
use crate::runtime::registry::JobRegistry;
use crate::runtime::tasks::TaskTree;

/// Runs claimed jobs through their handlers. Usually started by the
/// [`Supervisor`](crate::runtime::Supervisor); use [`run_worker_loop`] or [`WorkerLoop::run`]
/// for custom orchestration, and [`WorkerLoop::run_once`] in tests.
#[derive(Clone)]
pub struct WorkerLoop {
    pool: PgPool,
    registry: Arc<JobRegistry>,
    job_types: Vec<String>,
    config: WorkerConfig,
    observers: JobLifecycleObservers,
}

/// The components a run and a pass share: the lease table, the log buffer, the metric handles
/// and the executor that uses them.
struct Parts {
    leases: Arc<LeaseTable>,
    logs: Arc<LogBuffer>,
    metrics: Arc<WorkerMetrics>,
    executor: Arc<Executor>,
}

impl WorkerLoop {
    /// A worker for the registry's job types. Fails with `config.invalid_field` for invalid
    /// settings and `config.pool_too_small` when `pool` cannot hold the LISTEN connection and
    /// one more (the worker would stall); a pool below
    /// [`WorkerConfig::connections_used`] works but slower, and is reported with a warning.
    pub fn new(
        pool: PgPool,
        registry: Arc<JobRegistry>,
        config: WorkerConfig,
        observers: JobLifecycleObservers,
    ) -> Result<Self, JobsConfigError> {
        config.validate()?;
        check_pool_size(&pool)?;
        let job_types = registry.job_types();
        Ok(Self {
            pool,
            registry,
            job_types,
            config,
            observers,
        })
    }

    fn parts(&self) -> Parts {
        let leases = Arc::new(LeaseTable::default());
        let logs = Arc::new(LogBuffer::default());
        let metrics = Arc::new(WorkerMetrics::new());
        let executor = Arc::new(Executor {
            registry: Arc::clone(&self.registry),
            services: Arc::new(PgJobServices::new(self.pool.clone())),
            logs: JobLogSink(Arc::clone(&logs) as _),
            observers: self.observers.clone(),
            metrics: Arc::clone(&metrics),
            leases: Arc::clone(&leases),
        });
        Parts {
            leases,
            logs,
            metrics,
            executor,
        }
    }

    fn claims(&self, metrics: Arc<WorkerMetrics>) -> Claims {
        Claims {
            pool: self.pool.clone(),
            worker_id: self.config.worker_id.clone(),
            lease_ttl: self.config.lease_ttl,
            job_types: self.job_types.clone(),
            unflushed: self.config.unflushed_claims,
            poll_interval: self.config.poll_interval,
            metrics,
        }
    }

    fn completer(
        &self,
        leases: &Arc<LeaseTable>,
        expected: Arc<ExpectedOutcomes>,
    ) -> Completer<PgPool> {
        Completer::new(
            self.pool.clone(),
            &self.config,
            Arc::clone(leases),
            self.observers.clone(),
            expected,
        )
    }

    /// Claims one batch (up to the concurrency limit), runs every job to its end and persists
    /// the outcomes. For tests and step-by-step drivers. A claim the database refuses fails
    /// the pass with [`WorkerError::Persistence`]; outcomes that cannot be written are
    /// reported per job instead.
    pub async fn run_once(&self) -> Result<WorkerPass, WorkerError> {
        let parts = self.parts();
        let claims = self.claims(Arc::clone(&parts.metrics));
        let limit = self
            .config
            .claim_batch_size
            .min(self.config.total_concurrency());
        let queues: Vec<String> = self.config.queues.iter().map(|q| q.name.clone()).collect();
        let queues = (!queues.is_empty()).then_some(queues.as_slice());
        let mut claimed = claim_jobs(&self.pool, &claims.request(i64::from(limit), queues)).await?;
        let room = i64::from(limit) - claimed.len() as i64;
        claimed.extend(claim_limited_jobs(&self.pool, &claims.request(room, queues)).await?);
        parts.metrics.claimed(claimed.len());
        let order: Vec<JobId> = claimed.iter().map(|job| job.id).collect();
        // The whole batch is marked running before its handlers start (one statement). A
        // failure costs the handlers nothing: they run, and only `started_at` stays unset.
        let leases: Vec<(JobId, i32)> = claimed.iter().map(|job| (job.id, job.attempt)).collect();
        if let Err(err) = mark_jobs_running(&self.pool, &self.config.worker_id, &leases).await {
            tracing::warn!(code = err.code(), error = %err.internal_message(), jobs = leases.len(), "marking a batch running failed");
        }
        let tree = TaskTree::new();
        let never = tree.spawner().child_token();
        let runs: Vec<_> = claimed
            .into_iter()
            .map(|job| {
                let observed = ObservedJob::from_claimed(&job);
                let lost = parts.leases.hold(job.id, job.attempt);
                let (executor, never) = (Arc::clone(&parts.executor), never.clone());
                let span = job_span(&job);
                let run = tree.spawner().spawn(
                    async move { executor.execute(job, lost, never).await }.instrument(span),
                );
                (observed, run)
            })
            .collect();
        let mut finished = Vec::with_capacity(runs.len());
        let mut passed = Vec::with_capacity(runs.len());
        for (observed, run) in runs {
            match run.await {
                Ok(Some(Some(done))) => finished.push(done),
                // The lease was lost while the handler ran (or its task failed): nothing is
                // recorded, and the reaper retries the job.
                _ => passed.push(PassedJob {
                    job: observed,
                    outcome: PassOutcome::NotRecorded,
                }),
            }
        }
        parts.logs.flush(&self.pool).await;
        let completer = self.completer(&parts.leases, Arc::default());
        passed.extend(completer.write(finished, &never).await);
        passed.sort_by_key(|done| order.iter().position(|id| *id == done.job.job_id));
        let count = |wanted: fn(&PassOutcome) -> bool| {
            passed.iter().filter(|done| wanted(&done.outcome)).count()
        };
        Ok(WorkerPass {
            claimed: order.len(),
            succeeded: count(|o| matches!(o, PassOutcome::Succeeded)),
            continued: count(|o| matches!(o, PassOutcome::Continued { .. })),
            failed: count(|o| matches!(o, PassOutcome::Failed { .. })),
            persist_failed: count(|o| matches!(o, PassOutcome::NotRecorded)),
            jobs: passed,
        })
    }

    /// Runs until `shutdown` fires, then stops claiming and drains in-flight jobs. When
    /// `hard_stop` fires during the drain, handlers are dropped and their jobs reported in
    /// [`RuntimeLoopExit::Aborted`]. Every task it starts ends before it returns, and when
    /// this future is dropped.
    pub async fn run(
        self,
        shutdown: CancellationToken,
        hard_stop: CancellationToken,
    ) -> RuntimeLoopExit {
        tokio::select! {
            () = open_connections(&self.pool, self.config.connections_used()) => {}
            () = shutdown.cancelled() => {}
        }
        let tree = TaskTree::new();
        let tasks = tree.spawner();
        let background = tasks.child_token();
        let Parts {
            leases,
            logs,
            metrics,
            executor,
        } = self.parts();
        let expected = Arc::new(ExpectedOutcomes::default());
        let (finished, outcomes) = mpsc::unbounded_channel();
        let jobs = JobTasks::new(tasks);
        let launcher = Arc::new(Launcher {
            executor,
            jobs: jobs.clone(),
            finished,
            expected: Arc::clone(&expected),
            hard_stop: hard_stop.clone(),
        });
        let claims = Arc::new(self.claims(metrics));
        let unpersisted = Arc::new(Semaphore::new(self.config.max_unpersisted_outcomes));
        let producers: Vec<Arc<Producer>> = self
            .config
            .lanes()
            .into_iter()
            .map(|lane| {
                Arc::new(Producer::new(
                    lane,
                    &self.config,
                    Arc::clone(&unpersisted),
                    Arc::clone(&claims),
                    Arc::clone(&launcher),
                ))
            })
            .collect();
        drop(launcher);
        let mut wake = Wakers::default();
        for producer in &producers {
            let (plain, gated) = producer.wakers();
            wake.plain.push(plain);
            wake.gated.push(gated);
        }

        tasks.spawn(
            listener::listen(
                self.pool.clone(),
                self.job_types.clone(),
                wake,
                background.clone(),
            )
            .instrument(tracing::debug_span!("runledger.listener")),
        );
        tasks.spawn(
            Heartbeat::new(self.pool.clone(), Arc::clone(&leases), &self.config)
                .run(background.clone())
                .instrument(tracing::debug_span!("runledger.heartbeat")),
        );
        tasks.spawn({
            let (pool, stop) = (self.pool.clone(), background.clone());
            async move { logs.run(pool, stop).await }
                .instrument(tracing::debug_span!("runledger.job_logs"))
        });
        let completer = tasks.spawn(
            Arc::new(self.completer(&leases, expected))
                .run(outcomes, tasks.clone(), hard_stop.clone())
                .instrument(tracing::debug_span!("runledger.completer")),
        );
        let claim_loops: Vec<_> = producers
            .into_iter()
            .flat_map(|producer| producer.start(tasks, self.config.claim_parallelism, &shutdown))
            .collect();
        for claim_loop in claim_loops {
            let _ = claim_loop.await;
        }

        tracing::info!(
            in_flight = jobs.len(),
            "worker stopping; draining in-flight jobs"
        );
        jobs.close();
        jobs.wait().await;
        let _ = completer.await;
        background.cancel();
        tree.stop().await;
        let aborted = leases.take_aborted();
        if aborted.is_empty() {
            RuntimeLoopExit::Shutdown
        } else {
            RuntimeLoopExit::Aborted {
                aborted_jobs: aborted,
            }
        }
    }
}

/// Runs a worker for `registry`'s job types with `config` until `shutdown` fires, then drains
/// in-flight jobs without a deadline. Prefer the [`Supervisor`](crate::runtime::Supervisor),
/// which adds the reaper, a shutdown deadline and failure reporting.
pub async fn run_worker_loop(
    pool: PgPool,
    registry: Arc<JobRegistry>,
    config: JobsConfig,
    observers: JobLifecycleObservers,
    shutdown: CancellationToken,
) -> RuntimeLoopExit {
    if let Err(err) = config.validate() {
        return RuntimeLoopExit::InvalidConfig(err);
    }
    warn_if_pool_small(
        &pool,
        WorkerConfig::from_jobs_config(&config).connections_used(),
    );
    let tree = TaskTree::new();
    let (observers, dispatcher) = observers.start(tree.spawner(), shutdown.clone());
    let worker = match WorkerLoop::new(
        pool,
        registry,
        WorkerConfig::from_jobs_config(&config),
        observers,
    ) {
        Ok(worker) => worker,
        Err(err) => return RuntimeLoopExit::InvalidConfig(err),
    };
    let exit = worker.run(shutdown, CancellationToken::new()).await;
    if let Some(dispatcher) = dispatcher {
        let _ = dispatcher.await;
    }
    exit
}

/// Exponential backoff after database errors: 50 ms doubling up to [`MAX_ERROR_BACKOFF`].
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    fn next_delay(&mut self) -> Duration {
        let delay = Duration::from_millis(50).saturating_mul(1 << self.failures.min(7));
        self.failures = self.failures.saturating_add(1);
        delay.min(MAX_ERROR_BACKOFF)
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}
