//! The worker loop: claim registered job types up to free capacity (per served queue, each
//! queue a lane with its own slots), run each handler in its own task (timeouts and panics
//! contained per job), heartbeat every lease in one statement, and flush outcomes in batches.
//!
//! One module per part: `claim` (the claim loops), `execute` (running one handler),
//! `heartbeat`, `completer` (persisting outcomes, isolating a row PostgreSQL refuses) and
//! `listener` (LISTEN wake-ups). Every task a worker starts belongs to one task tree, so
//! dropping [`Worker::run`]'s future stops them all.

mod claim;
mod completer;
mod continuer;
mod execute;
mod heartbeat;
mod listener;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::core::jobs::{JobCompletion, JobFailure, JobFailureKind, JobId};
use crate::postgres::jobs::{
    ClaimRequest, ClaimedJob, JobFailureDisposition, claim_jobs, claim_limited_jobs,
    mark_jobs_running,
};
use crate::postgres::open_connections;
use crate::runtime::config::{JobsConfig, JobsConfigError, check_pool_size, warn_if_pool_small};
use crate::runtime::error::{RuntimeLoopExit, WorkerError};
use crate::runtime::job_logs::LogBuffer;
use crate::runtime::metrics::{JobTypeMetrics, WorkerMetrics};
use crate::runtime::observer::{JobLifecycleObservers, ObservedJob};
use crate::runtime::queues::QueueConcurrency;
use crate::runtime::registry::JobRegistry;
use crate::runtime::tasks::{TaskSpawner, TaskTree};

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

/// Settings of the worker loop.
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
                .saturating_add(claim::claim_ahead_room(
                    lane.concurrency,
                    self.claim_batch_size,
                ))
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
        if self.lease_ttl > crate::runtime::config::MAX_LEASE_TTL {
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
        crate::runtime::queues::check_queues(&self.queues)
    }

    /// The worker's lanes: one per served queue, or one for every queue.
    fn lanes(&self) -> Vec<claim::Lane> {
        if self.queues.is_empty() {
            return vec![claim::Lane {
                queues: None,
                concurrency: self.max_concurrency,
            }];
        }
        self.queues
            .iter()
            .map(|queue| claim::Lane {
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

/// What one [`Worker::run_once`] pass did: counts, and each job with its outcome.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct WorkerPass {
    /// Jobs claimed.
    pub claimed: usize,
    /// Successes committed.
    pub succeeded: usize,
    /// Continuations committed (attempts that closed as a success and scheduled the job's
    /// next run).
    pub continued: usize,
    /// Failures committed (a success whose output could not be stored counts here).
    pub failed: usize,
    /// Outcomes that could not be committed (lease lost).
    pub persist_failed: usize,
    /// Every claimed job and how its attempt ended, in claim order.
    pub jobs: Vec<PassedJob>,
}

/// One job of a [`WorkerPass`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PassedJob {
    /// The job and attempt.
    pub job: ObservedJob,
    /// How the attempt ended.
    pub outcome: PassOutcome,
}

/// How an attempt of a [`WorkerPass`] ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PassOutcome {
    /// The success (and output) was committed.
    Succeeded,
    /// The attempt closed as a success and the job's next run was scheduled.
    Continued {
        /// The run that starts next.
        run_number: i32,
        /// When it becomes claimable.
        next_run_at: chrono::DateTime<chrono::Utc>,
    },
    /// The failure was committed: retried later or dead-lettered, as `disposition` says.
    Failed {
        /// How it failed.
        kind: JobFailureKind,
        /// The failure's code.
        code: String,
        /// The failure's message.
        message: String,
        /// What happened to the job.
        disposition: JobFailureDisposition,
    },
    /// The outcome could not be recorded: the lease was lost meanwhile (the reaper retries
    /// the job).
    NotRecorded,
}

/// Runs claimed jobs through their handlers. Usually started by the
/// [`Supervisor`](crate::runtime::Supervisor); use [`run_worker_loop`] or [`Worker::run`] for
/// custom orchestration, and [`Worker::run_once`] in tests.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

/// State shared by the worker's tasks.
struct Inner {
    pool: PgPool,
    registry: Arc<JobRegistry>,
    job_types: Vec<String>,
    config: WorkerConfig,
    observers: JobLifecycleObservers,
    running: Mutex<HashMap<JobId, RunningLease, JobIds>>,
    aborted: Mutex<Vec<JobId>>,
    /// Lines handlers log through their context, stored in batches by one task.
    logs: Arc<LogBuffer>,
    /// Metric handles, one set per job type.
    metrics: WorkerMetrics,
    /// Outcomes the completer may still receive soon: jobs the claim loops have spawned whose
    /// outcome has not reached it (running, or claimed ahead and waiting for a slot), and one
    /// for each claim in flight (see [`OutcomeToCome`]).
    outcomes_to_come: AtomicUsize,
    /// Notified when `outcomes_to_come` falls to zero.
    none_to_come: Notify,
}

/// The hasher of the worker's maps and sets keyed by job id. A job is looked up in them five
/// times (claimed, started, returned, written, reported), and SipHash, the default, cost more
/// than the lookups themselves; foldhash folds the id's 16 bytes in two multiplications, and its
/// seed is still random per process.
type JobIds = foldhash::fast::RandomState;

/// A lease the heartbeat renews, and how to stop its handler when the lease is lost.
struct RunningLease {
    attempt: i32,
    lost: CancellationToken,
    /// When its handler started, while it runs: `None` before (a job claimed ahead waits for a
    /// slot) and after (its outcome waits for the completer, which records the start itself).
    running_since: Option<std::time::Instant>,
    /// Whether `started_at` is stored (see [`heartbeat::MARK_RUNNING_AFTER`]).
    marked: bool,
}

impl RunningLease {
    /// Whether the heartbeat should store the job's `started_at` now: its handler has been
    /// running for `after` and it is not marked yet. A job that is not running is left alone:
    /// marking a job whose outcome is being written races the completion for its row.
    fn due_for_marking(&self, after: std::time::Duration) -> bool {
        !self.marked
            && self
                .running_since
                .is_some_and(|since| since.elapsed() >= after)
    }
}

/// A finished handler whose outcome must be persisted.
struct Finished {
    job: ObservedJob,
    /// The metric handles of the job's type and queue, taken when its handler started.
    metrics: Arc<JobTypeMetrics>,
    outcome: Result<JobCompletion, JobFailure>,
    duration: Duration,
    /// The job's share of [`WorkerConfig::max_unpersisted_outcomes`], held until the outcome
    /// is written (its concurrency slot was freed when the handler returned).
    permit: Option<claim::OutcomeHold>,
}

impl Worker {
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
        let metrics = WorkerMetrics::new();
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                registry,
                job_types,
                config,
                observers,
                running: Mutex::default(),
                aborted: Mutex::new(Vec::new()),
                logs: Arc::new(LogBuffer::default()),
                metrics,
                outcomes_to_come: AtomicUsize::new(0),
                none_to_come: Notify::new(),
            }),
        })
    }

    /// Claims one batch (up to the concurrency limit), runs every job to its end and persists
    /// the outcomes. For tests and step-by-step drivers. A claim the database refuses fails
    /// the pass with [`WorkerError::Persistence`]; outcomes that cannot be written are
    /// reported per job instead.
    pub async fn run_once(&self) -> Result<WorkerPass, WorkerError> {
        let inner = &self.inner;
        let limit = inner
            .config
            .claim_batch_size
            .min(inner.config.total_concurrency());
        let queues: Vec<String> = inner.config.queues.iter().map(|q| q.name.clone()).collect();
        let queues = (!queues.is_empty()).then_some(queues.as_slice());
        let mut claimed =
            claim_jobs(&inner.pool, &inner.claim_request(i64::from(limit), queues)).await?;
        let room = i64::from(limit) - claimed.len() as i64;
        claimed.extend(claim_limited_jobs(&inner.pool, &inner.claim_request(room, queues)).await?);
        inner.metrics.claimed(claimed.len());
        let order: Vec<JobId> = claimed.iter().map(|job| job.id).collect();
        inner.mark_running(&claimed).await;
        let tree = TaskTree::new();
        let never = tree.spawner().child_token();
        let runs: Vec<_> = claimed
            .into_iter()
            .map(|job| {
                let observed = ObservedJob::from_claimed(&job);
                let lost = inner.track(&job);
                let (inner, never) = (Arc::clone(inner), never.clone());
                let span = execute::job_span(&job);
                let run = tree
                    .spawner()
                    .spawn(async move { inner.execute(job, lost, never).await }.instrument(span));
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
        inner.logs.flush(&inner.pool).await;
        passed.extend(inner.persist_batch(finished, &never).await);
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
        let inner = self.inner;
        tokio::select! {
            () = open_connections(&inner.pool, inner.config.connections_used()) => {}
            () = shutdown.cancelled() => {}
        }
        let tree = TaskTree::new();
        let tasks = tree.spawner();
        let background = tasks.child_token();
        let lanes: Vec<(claim::Lane, Arc<Notify>, Arc<Notify>)> = inner
            .config
            .lanes()
            .into_iter()
            .map(|lane| (lane, Arc::new(Notify::new()), Arc::new(Notify::new())))
            .collect();
        let wake = listener::Wakers {
            plain: lanes
                .iter()
                .map(|(_, plain, _)| Arc::clone(plain))
                .collect(),
            gated: lanes
                .iter()
                .map(|(_, _, limited)| Arc::clone(limited))
                .collect(),
        };
        let (finished_tx, finished_rx) = mpsc::unbounded_channel::<Finished>();
        tasks.spawn(
            listener::listen(
                inner.pool.clone(),
                inner.job_types.clone(),
                wake,
                background.clone(),
            )
            .instrument(tracing::debug_span!("runledger.listener")),
        );
        tasks.spawn(
            Arc::clone(&inner)
                .heartbeat_loop(background.clone())
                .instrument(tracing::debug_span!("runledger.heartbeat")),
        );
        tasks.spawn({
            let (inner, stop) = (Arc::clone(&inner), background.clone());
            async move { inner.logs.run(inner.pool.clone(), stop).await }
                .instrument(tracing::debug_span!("runledger.job_logs"))
        });
        let completer = tasks.spawn(
            Arc::clone(&inner)
                .completer_loop(finished_rx, tasks.clone(), hard_stop.clone())
                .instrument(tracing::debug_span!("runledger.completer")),
        );

        let jobs = JobTasks::new(tasks);
        let unpersisted = Arc::new(Semaphore::new(inner.config.max_unpersisted_outcomes));
        let mut claimers = Vec::new();
        for (lane, plain_wake, limited_wake) in lanes {
            let lane = Arc::new(lane);
            let capacity = Arc::new(claim::LaneCapacity::new(
                lane.concurrency,
                inner.config.claim_batch_size,
            ));
            // The lane's claim loops, and one more for its jobs under a global limit, woken
            // when the outcome of one of those is written.
            let limited = (0..=inner.config.claim_parallelism)
                .map(|index| (index == 0).then(|| Arc::new(Notify::new())));
            for freed in limited {
                let claimer = claim::Claimer {
                    inner: Arc::clone(&inner),
                    lane: Arc::clone(&lane),
                    capacity: Arc::clone(&capacity),
                    unpersisted: Arc::clone(&unpersisted),
                    wake: Arc::clone(if freed.is_some() {
                        &limited_wake
                    } else {
                        &plain_wake
                    }),
                    jobs: jobs.clone(),
                    finished: finished_tx.clone(),
                    hard_stop: hard_stop.clone(),
                    freed,
                };
                claimers.push(tasks.spawn(claimer.run(shutdown.clone()).in_current_span()));
            }
        }
        drop(finished_tx);
        for claimer in claimers {
            let _ = claimer.await;
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
        let aborted = std::mem::take(&mut *lock(&inner.aborted));
        if aborted.is_empty() {
            RuntimeLoopExit::Shutdown
        } else {
            RuntimeLoopExit::Aborted {
                aborted_jobs: aborted,
            }
        }
    }
}

/// The handler tasks: tracked apart so the drain can wait for them alone, and spawned through
/// the worker's tree so they are dropped with it.
#[derive(Clone)]
struct JobTasks {
    spawner: TaskSpawner,
    tracker: tokio_util::task::TaskTracker,
}

impl JobTasks {
    fn new(spawner: &TaskSpawner) -> Self {
        Self {
            spawner: spawner.clone(),
            tracker: tokio_util::task::TaskTracker::new(),
        }
    }

    fn spawn(&self, future: impl std::future::Future<Output = ()> + Send + 'static) {
        // A job's future holds its whole handler run; boxed once here, the wrappers and the
        // runtime move a pointer instead of copying it at each layer.
        self.spawner
            .spawn(self.tracker.track_future(Box::pin(future)));
    }

    fn len(&self) -> usize {
        self.tracker.len()
    }

    fn close(&self) {
        self.tracker.close();
    }

    async fn wait(&self) {
        self.tracker.wait().await;
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
    let worker = match Worker::new(
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

impl Inner {
    /// Marks a claimed batch running (one statement) just before its handlers start. A failure
    /// costs the handlers nothing: they run, and only `started_at` stays unset.
    async fn mark_running(&self, claimed: &[ClaimedJob]) {
        let leases: Vec<(JobId, i32)> = claimed.iter().map(|job| (job.id, job.attempt)).collect();
        if let Err(err) = mark_jobs_running(&self.pool, &self.config.worker_id, &leases).await {
            tracing::warn!(code = err.code(), error = %err.internal_message(), jobs = leases.len(), "marking a batch running failed");
        }
    }

    fn claim_request<'a>(&'a self, limit: i64, queues: Option<&'a [String]>) -> ClaimRequest<'a> {
        let mut request = ClaimRequest::new(&self.config.worker_id, limit, self.config.lease_ttl)
            .job_types(&self.job_types);
        if self.config.unflushed_claims {
            request = request.unflushed_commit();
        }
        match queues {
            Some(queues) => request.queues(queues),
            None => request,
        }
    }

    /// Registers a claimed job for heartbeats and returns its lease-lost signal.
    fn track(&self, job: &ClaimedJob) -> CancellationToken {
        let lost = CancellationToken::new();
        lock(&self.running).insert(
            job.id,
            RunningLease {
                attempt: job.attempt,
                lost: lost.clone(),
                running_since: None,
                marked: false,
            },
        );
        lost
    }

    /// Notes whether the handler of a tracked job is running (see [`RunningLease`]).
    fn set_running(&self, job_id: JobId, running: bool) {
        if let Some(lease) = lock(&self.running).get_mut(&job_id) {
            lease.running_since = running.then(std::time::Instant::now);
        }
    }

    fn untrack(&self, job_id: JobId) {
        lock(&self.running).remove(&job_id);
    }

    /// Gives up a job claimed ahead whose slot never came before the hard stop: like a handler
    /// dropped by it, the job is reported aborted and the reaper retries it.
    fn abort_unstarted(&self, job_id: JobId) {
        self.untrack(job_id);
        lock(&self.aborted).push(job_id);
    }
}

/// An outcome the completer may still receive, counted in [`Inner::outcomes_to_come`] while
/// this lives: a claim in flight (until its jobs are counted), or a spawned job (until just
/// before its outcome is sent, or until its task ends without one: lease lost, hard stop).
struct OutcomeToCome(Arc<Inner>);

impl OutcomeToCome {
    fn new(inner: &Arc<Inner>) -> Self {
        inner.outcomes_to_come.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(inner))
    }
}

impl Drop for OutcomeToCome {
    fn drop(&mut self) {
        if self.0.outcomes_to_come.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.none_to_come.notify_one();
        }
    }
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    use super::{JobIds, WorkerConfig};
    use crate::core::jobs::JobId;
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

    /// Ids made in one millisecond differ only in their counter and random bits: their hashes
    /// must differ, and spread over the bits a map takes its buckets from (the low ones) and its
    /// tags from (the high seven).
    #[test]
    fn job_ids_made_together_hash_apart() {
        let ids: Vec<JobId> = (0..4096).map(|_| JobId(uuid::Uuid::now_v7())).collect();
        let state = JobIds::default();
        let hashes: Vec<u64> = ids.iter().map(|id| state.hash_one(id)).collect();
        assert_eq!(hashes.iter().collect::<HashSet<_>>().len(), ids.len());
        let low: HashSet<u64> = hashes.iter().map(|h| h & 0xFFF).collect();
        let tags: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(low.len() > 2_000, "{} of 4096 low buckets", low.len());
        assert_eq!(tags.len(), 128);
    }
}
