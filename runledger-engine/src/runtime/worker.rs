//! The worker loop: claim registered job types up to free capacity, run each handler in its
//! own task (timeouts and panics contained per job), heartbeat every lease in one statement,
//! and flush successes in batches.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::core::jobs::{
    JobCompletion, JobFailure, JobFailureKind, JobId, JobLogSink, JobLogWriter, JobStatus,
    StepOutputError, StepOutputReader, StepOutputs, WorkflowStepId,
};
use crate::postgres::jobs::{
    ClaimRequest, ClaimedJob, JOB_QUEUE_CHANNEL, JobFailureDisposition, JobSuccess, claim_jobs,
    complete_job_failure, complete_jobs_success, get_job_by_id, get_prerequisite_output,
    heartbeat_jobs,
};
use crate::runtime::config::{JobsConfig, JobsConfigError};
use crate::runtime::error::RuntimeLoopExit;
use crate::runtime::job_logs::LogBuffer;
use crate::runtime::observer::{
    JobCompletionPersistFailedEvent, JobCompletionPersistenceOperation, JobFailedEvent,
    JobLeaseLostEvent, JobLifecycleObservers, JobRunningEvent, JobSucceededEvent, LifecycleEvent,
    ObservedJob,
};
use crate::runtime::registry::{JobHandler, JobRegistry};

/// Default time successes wait to be flushed together.
pub const DEFAULT_COMPLETION_FLUSH_INTERVAL: Duration = Duration::from_millis(2);
/// Default most successes flushed in one statement.
pub const DEFAULT_COMPLETION_BATCH_SIZE: usize = 512;
/// Default number of claim loops issuing claims concurrently.
pub const DEFAULT_CLAIM_PARALLELISM: u32 = 2;
/// Default number of success batches being written concurrently.
pub const DEFAULT_FLUSHES_IN_FLIGHT: usize = 4;
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
    /// Most handlers running at once.
    pub max_concurrency: u32,
    /// Pause between heartbeats (a third of the lease by default).
    pub heartbeat_interval: Duration,
    /// How long a success may wait for others before the batch is flushed.
    pub completion_flush_interval: Duration,
    /// Most successes per flush.
    pub completion_batch_size: usize,
    /// Claim loops issuing claims concurrently (they share the concurrency limit).
    pub claim_parallelism: u32,
    /// Success batches written concurrently.
    pub flushes_in_flight: usize,
}

impl WorkerConfig {
    /// The worker settings of a [`JobsConfig`], with default flush settings.
    pub fn from_jobs_config(config: &JobsConfig) -> Self {
        Self {
            worker_id: config.worker_id.clone(),
            poll_interval: config.poll_interval,
            claim_batch_size: config.claim_batch_size,
            lease_ttl: config.lease_ttl,
            max_concurrency: config.max_global_concurrency,
            heartbeat_interval: config.lease_ttl / 3,
            completion_flush_interval: DEFAULT_COMPLETION_FLUSH_INTERVAL,
            completion_batch_size: DEFAULT_COMPLETION_BATCH_SIZE,
            claim_parallelism: DEFAULT_CLAIM_PARALLELISM,
            flushes_in_flight: DEFAULT_FLUSHES_IN_FLIGHT,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), JobsConfigError> {
        let invalid = |field, problem| Err(JobsConfigError::InvalidField { field, problem });
        if self.worker_id.trim().is_empty() {
            return invalid("worker_id", "must not be blank");
        }
        if self.claim_batch_size == 0 || self.max_concurrency == 0 {
            return invalid("claim_batch_size", "and max_concurrency must be at least 1");
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
        Ok(())
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
    /// Failures committed.
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

struct Inner {
    pool: PgPool,
    registry: Arc<JobRegistry>,
    job_types: Vec<String>,
    config: WorkerConfig,
    observers: JobLifecycleObservers,
    running: Mutex<HashMap<JobId, RunningLease>>,
    aborted: Mutex<Vec<JobId>>,
    /// Lines handlers log through their context, stored in batches by one task.
    logs: Arc<LogBuffer>,
}

struct RunningLease {
    attempt: i32,
    lost: CancellationToken,
}

/// How a handler run ended.
enum Outcome {
    Success(JobCompletion),
    Failure(JobFailure),
    LeaseLost,
    Aborted,
}

/// A finished handler whose outcome must be persisted.
struct Finished {
    job: ObservedJob,
    outcome: Result<JobCompletion, JobFailure>,
    duration: Duration,
    /// Capacity is held until the outcome is persisted, so unpersisted results cannot pile up.
    permit: Option<OwnedSemaphorePermit>,
}

impl Worker {
    /// A worker for the registry's job types.
    pub fn new(
        pool: PgPool,
        registry: Arc<JobRegistry>,
        config: WorkerConfig,
        observers: JobLifecycleObservers,
    ) -> Result<Self, JobsConfigError> {
        config.validate()?;
        let job_types = registry.job_types();
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                registry,
                job_types,
                config,
                observers,
                running: Mutex::new(HashMap::new()),
                aborted: Mutex::new(Vec::new()),
                logs: Arc::new(LogBuffer::default()),
            }),
        })
    }

    /// Claims one batch (up to the concurrency limit), runs every job to its end and persists
    /// the outcomes. For tests and step-by-step drivers.
    pub async fn run_once(&self) -> Result<WorkerPass, crate::postgres::Error> {
        let inner = &self.inner;
        let limit = inner
            .config
            .claim_batch_size
            .min(inner.config.max_concurrency);
        let claimed = claim_jobs(&inner.pool, &inner.claim_request(i64::from(limit))).await?;
        let order: Vec<JobId> = claimed.iter().map(|job| job.id).collect();
        let never = CancellationToken::new();
        let runs: Vec<_> = claimed
            .into_iter()
            .map(|job| {
                let observed = ObservedJob::from_claimed(&job);
                let lost = inner.track(&job);
                let inner = Arc::clone(inner);
                let never = never.clone();
                let run = tokio::spawn(async move { inner.execute(job, lost, never).await });
                (observed, run)
            })
            .collect();
        let mut finished = Vec::with_capacity(runs.len());
        let mut passed = Vec::with_capacity(runs.len());
        for (observed, run) in runs {
            match run.await {
                Ok(Some(done)) => finished.push(done),
                // The lease was lost while the handler ran (or its task failed): nothing is
                // recorded, and the reaper retries the job.
                _ => passed.push(PassedJob {
                    job: observed,
                    outcome: PassOutcome::NotRecorded,
                }),
            }
        }
        inner.logs.flush(&inner.pool).await;
        let (successes, failures): (Vec<_>, Vec<_>) =
            finished.into_iter().partition(|done| done.outcome.is_ok());
        passed.extend(inner.persist_successes(successes, &never).await);
        for failure in failures {
            passed.push(inner.persist_failure(failure, &never).await);
        }
        passed.sort_by_key(|done| order.iter().position(|id| *id == done.job.job_id));
        let count = |wanted: fn(&PassOutcome) -> bool| {
            passed.iter().filter(|done| wanted(&done.outcome)).count()
        };
        Ok(WorkerPass {
            claimed: order.len(),
            succeeded: count(|o| matches!(o, PassOutcome::Succeeded)),
            failed: count(|o| matches!(o, PassOutcome::Failed { .. })),
            persist_failed: count(|o| matches!(o, PassOutcome::NotRecorded)),
            jobs: passed,
        })
    }

    /// Runs until `shutdown` fires, then stops claiming and drains in-flight jobs. When
    /// `hard_stop` fires during the drain, handlers are dropped and their jobs reported in
    /// [`RuntimeLoopExit::Aborted`].
    pub async fn run(
        self,
        shutdown: CancellationToken,
        hard_stop: CancellationToken,
    ) -> RuntimeLoopExit {
        let inner = self.inner;
        let (wake_tx, wake_rx) = watch::channel(0_u64);
        let side_stop = CancellationToken::new();
        let (finished_tx, finished_rx) = mpsc::unbounded_channel::<Finished>();
        let listener = tokio::spawn(
            listen(
                inner.pool.clone(),
                inner.job_types.clone(),
                wake_tx,
                side_stop.clone(),
            )
            .instrument(tracing::debug_span!("runledger.listener")),
        );
        let heartbeat = tokio::spawn(
            Arc::clone(&inner)
                .heartbeat_loop(side_stop.clone())
                .instrument(tracing::debug_span!("runledger.heartbeat")),
        );
        let log_flusher = tokio::spawn({
            let (inner, stop) = (Arc::clone(&inner), side_stop.clone());
            async move { inner.logs.run(inner.pool.clone(), stop).await }
                .instrument(tracing::debug_span!("runledger.job_logs"))
        });
        let completer = tokio::spawn(
            Arc::clone(&inner)
                .completer_loop(finished_rx, hard_stop.clone())
                .instrument(tracing::debug_span!("runledger.completer")),
        );

        let jobs = TaskTracker::new();
        let capacity = Arc::new(Semaphore::new(inner.config.max_concurrency as usize));
        let mut claimers = JoinSet::new();
        for _ in 0..inner.config.claim_parallelism {
            let claimer = Claimer {
                inner: Arc::clone(&inner),
                capacity: Arc::clone(&capacity),
                wake: wake_rx.clone(),
                jobs: jobs.clone(),
                finished: finished_tx.clone(),
                hard_stop: hard_stop.clone(),
            };
            claimers.spawn(claimer.run(shutdown.clone()).in_current_span());
        }
        drop(finished_tx);
        while claimers.join_next().await.is_some() {}

        tracing::info!(
            in_flight = jobs.len(),
            "worker stopping; draining in-flight jobs"
        );
        jobs.close();
        jobs.wait().await;
        let _ = completer.await;
        side_stop.cancel();
        let _ = heartbeat.await;
        let _ = listener.await;
        let _ = log_flusher.await;
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

/// One claim loop: claims up to the free capacity, spawns a task per job, claims again at once
/// while batches come back full, otherwise waits for a notification or the poll interval.
struct Claimer {
    inner: Arc<Inner>,
    capacity: Arc<Semaphore>,
    wake: watch::Receiver<u64>,
    jobs: TaskTracker,
    finished: mpsc::UnboundedSender<Finished>,
    hard_stop: CancellationToken,
}

impl Claimer {
    async fn run(mut self, shutdown: CancellationToken) {
        let config = &self.inner.config;
        let mut backoff = Backoff::default();
        while !shutdown.is_cancelled() {
            // Reserve capacity first so concurrent claim loops never overshoot the limit.
            let want = self
                .capacity
                .available_permits()
                .clamp(1, config.claim_batch_size as usize);
            let permits = tokio::select! {
                permits = Arc::clone(&self.capacity).acquire_many_owned(want as u32) => permits,
                () = shutdown.cancelled() => break,
            };
            let Ok(mut permits) = permits else {
                break;
            };
            let claimed = match claim_jobs(&self.inner.pool, &self.inner.claim_request(want as i64))
                .await
            {
                Ok(claimed) => {
                    backoff.reset();
                    claimed
                }
                Err(err) => {
                    drop(permits);
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "claim failed; backing off");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = shutdown.cancelled() => break,
                    }
                    continue;
                }
            };
            let full = claimed.len() == want;
            for job in claimed {
                let Some(permit) = permits.split(1) else {
                    break;
                };
                self.spawn_job(job, permit);
            }
            drop(permits);
            if full {
                continue;
            }
            tokio::select! {
                changed = self.wake.changed() => {
                    if changed.is_err() {
                        // The listener is gone; fall back to polling only.
                        tokio::select! {
                            () = tokio::time::sleep(config.poll_interval) => {}
                            () = shutdown.cancelled() => break,
                        }
                    }
                }
                () = tokio::time::sleep(config.poll_interval) => {}
                () = shutdown.cancelled() => break,
            }
        }
    }

    fn spawn_job(&self, job: ClaimedJob, permit: OwnedSemaphorePermit) {
        let lost = self.inner.track(&job);
        let span = tracing::info_span!(
            "runledger.job",
            job.id = %job.id,
            job.r#type = %job.job_type,
            job.attempt = job.attempt_number,
        );
        let inner = Arc::clone(&self.inner);
        let finished = self.finished.clone();
        let hard_stop = self.hard_stop.clone();
        self.jobs.spawn(
            async move {
                if let Some(mut done) = inner.execute(job, lost, hard_stop).await {
                    done.permit = Some(permit);
                    // The completer outlives every job task; a send error means it is gone.
                    let _ = finished.send(done);
                }
            }
            .instrument(span),
        );
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
    let observer_stop = shutdown.clone();
    let (observers, dispatcher) = observers.start(observer_stop);
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
    fn claim_request(&self, limit: i64) -> ClaimRequest<'_> {
        ClaimRequest::new(&self.config.worker_id, limit, self.config.lease_ttl)
            .job_types(&self.job_types)
    }

    /// Registers a claimed job for heartbeats and returns its lease-lost signal.
    fn track(&self, job: &ClaimedJob) -> CancellationToken {
        let lost = CancellationToken::new();
        lock(&self.running).insert(
            job.id,
            RunningLease {
                attempt: job.attempt,
                lost: lost.clone(),
            },
        );
        lost
    }

    fn untrack(&self, job_id: JobId) {
        lock(&self.running).remove(&job_id);
    }

    /// Runs one handler to its end. Returns what must be persisted, or `None` when the lease
    /// was lost or the run was aborted (both already reported).
    async fn execute(
        self: &Arc<Self>,
        job: ClaimedJob,
        lost: CancellationToken,
        hard_stop: CancellationToken,
    ) -> Option<Finished> {
        let observed = ObservedJob::from_claimed(&job);
        self.observers
            .emit(LifecycleEvent::Running(JobRunningEvent {
                job: observed.clone(),
            }));
        let started = Instant::now();
        let outcome = match self.registry.get(&job.job_type) {
            Some(handler) => {
                let logs = JobLogSink(Arc::clone(&self.logs) as Arc<dyn JobLogWriter>);
                run_handler(
                    Arc::clone(handler),
                    job,
                    &self.pool,
                    logs,
                    &lost,
                    &hard_stop,
                )
                .await
            }
            // Only registered types are claimed; a missing handler means the registry changed.
            None => Outcome::Failure(JobFailure::terminal(
                "job.handler_not_registered",
                "no handler is registered for this job type",
            )),
        };
        let outcome = match outcome {
            Outcome::Success(completion) => Ok(completion),
            Outcome::Failure(failure) => Err(failure),
            Outcome::LeaseLost => {
                self.untrack(observed.job_id);
                tracing::warn!("lease lost; handler stopped");
                self.observers
                    .emit(LifecycleEvent::LeaseLost(JobLeaseLostEvent {
                        job: observed,
                    }));
                return None;
            }
            Outcome::Aborted => {
                self.untrack(observed.job_id);
                lock(&self.aborted).push(observed.job_id);
                return None;
            }
        };
        Some(Finished {
            job: observed,
            outcome,
            duration: started.elapsed(),
            permit: None,
        })
    }

    async fn heartbeat_loop(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.heartbeat_interval) => {}
                () = stop.cancelled() => return,
            }
            let leases: Vec<(JobId, i32)> = lock(&self.running)
                .iter()
                .map(|(id, lease)| (*id, lease.attempt))
                .collect();
            if leases.is_empty() {
                continue;
            }
            match heartbeat_jobs(
                &self.pool,
                &self.config.worker_id,
                &leases,
                self.config.lease_ttl,
            )
            .await
            {
                Ok(renewed) => {
                    let renewed: HashSet<JobId> = renewed.into_iter().collect();
                    let mut running = lock(&self.running);
                    for (job_id, attempt) in leases {
                        if renewed.contains(&job_id) {
                            continue;
                        }
                        // Still tracked with the same attempt: the lease is gone, not just finished.
                        if running
                            .get(&job_id)
                            .is_some_and(|lease| lease.attempt == attempt)
                            && let Some(lease) = running.remove(&job_id)
                        {
                            lease.lost.cancel();
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "heartbeat failed");
                }
            }
        }
    }

    async fn completer_loop(
        self: Arc<Self>,
        mut finished: mpsc::UnboundedReceiver<Finished>,
        hard_stop: CancellationToken,
    ) {
        let mut flushes = JoinSet::new();
        let mut open = true;
        while open {
            let Some(first) = finished.recv().await else {
                break;
            };
            let mut batch = vec![first];
            let deadline = tokio::time::Instant::now() + self.config.completion_flush_interval;
            while batch.len() < self.config.completion_batch_size {
                match tokio::time::timeout_at(deadline, finished.recv()).await {
                    Ok(Some(done)) => batch.push(done),
                    Ok(None) => {
                        open = false;
                        break;
                    }
                    Err(_) => break,
                }
            }
            while flushes.len() >= self.config.flushes_in_flight {
                let _ = flushes.join_next().await;
            }
            let (inner, hard_stop) = (Arc::clone(&self), hard_stop.clone());
            flushes.spawn(
                async move {
                    let (successes, failures): (Vec<_>, Vec<_>) =
                        batch.into_iter().partition(|done| done.outcome.is_ok());
                    inner.persist_successes(successes, &hard_stop).await;
                    for failure in failures {
                        inner.persist_failure(failure, &hard_stop).await;
                    }
                }
                .in_current_span(),
            );
        }
        while flushes.join_next().await.is_some() {}
    }

    /// Commits a batch of successes in one statement, retrying on database errors while the
    /// leases may still be valid. Returns each job with whether its success was committed.
    async fn persist_successes(
        &self,
        batch: Vec<Finished>,
        hard_stop: &CancellationToken,
    ) -> Vec<PassedJob> {
        if batch.is_empty() {
            return Vec::new();
        }
        let rows: Vec<JobSuccess> = batch
            .iter()
            .map(|done| JobSuccess {
                job_id: done.job.job_id,
                attempt: done.job.attempt,
                output: done.outcome.as_ref().ok().and_then(|c| c.output.clone()),
            })
            .collect();
        let mut retried = false;
        let give_up_at = Instant::now() + self.config.lease_ttl;
        let mut backoff = Backoff::default();
        let completed: HashSet<JobId> = loop {
            match complete_jobs_success(&self.pool, &self.config.worker_id, &rows).await {
                Ok(ids) => break ids.into_iter().collect(),
                Err(err) => {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), jobs = rows.len(), "persisting successes failed; retrying");
                    retried = true;
                    if hard_stop.is_cancelled() || Instant::now() >= give_up_at {
                        break HashSet::new();
                    }
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = hard_stop.cancelled() => {}
                    }
                }
            }
        };
        let mut passed = Vec::with_capacity(batch.len());
        for done in batch {
            self.untrack(done.job.job_id);
            // After an error the first statement may have committed without us seeing the
            // reply; a row already SUCCEEDED for this attempt is ours.
            let ok = completed.contains(&done.job.job_id)
                || (retried && self.already_succeeded(&done.job).await);
            if ok {
                passed.push(PassedJob {
                    job: done.job.clone(),
                    outcome: PassOutcome::Succeeded,
                });
                self.observers
                    .emit(LifecycleEvent::Succeeded(JobSucceededEvent {
                        job: done.job,
                        duration: done.duration,
                    }));
            } else {
                passed.push(PassedJob {
                    job: done.job.clone(),
                    outcome: PassOutcome::NotRecorded,
                });
                tracing::warn!(job.id = %done.job.job_id, "success not recorded: lease no longer held");
                self.observers.emit(LifecycleEvent::PersistFailed(
                    JobCompletionPersistFailedEvent {
                        job: done.job,
                        operation: JobCompletionPersistenceOperation::Success,
                        error_code: "job.lease_owner_mismatch".to_owned(),
                    },
                ));
            }
        }
        passed
    }

    async fn already_succeeded(&self, job: &ObservedJob) -> bool {
        matches!(
            get_job_by_id(&self.pool, job.job_id).await,
            Ok(Some(record)) if record.status == JobStatus::Succeeded && record.attempt == job.attempt
        )
    }

    /// Commits one failure. Returns the job with what was recorded.
    async fn persist_failure(&self, done: Finished, hard_stop: &CancellationToken) -> PassedJob {
        let Err(failure) = done.outcome else {
            return PassedJob {
                job: done.job,
                outcome: PassOutcome::NotRecorded,
            };
        };
        let lease = crate::postgres::jobs::JobLease {
            job_id: done.job.job_id,
            attempt: done.job.attempt,
            worker_id: &self.config.worker_id,
        };
        let give_up_at = Instant::now() + self.config.lease_ttl;
        let mut backoff = Backoff::default();
        let result = loop {
            match complete_job_failure(&self.pool, &lease, &failure).await {
                Err(err @ crate::postgres::Error::Query(_))
                    if !hard_stop.is_cancelled() && Instant::now() < give_up_at =>
                {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "persisting a failure failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = hard_stop.cancelled() => {}
                    }
                }
                other => break other,
            }
        };
        self.untrack(done.job.job_id);
        match result {
            Ok(disposition) => {
                tracing::info!(code = %failure.code, kind = %failure.kind, ?disposition, "job attempt failed");
                let passed = PassedJob {
                    job: done.job.clone(),
                    outcome: PassOutcome::Failed {
                        kind: failure.kind,
                        code: failure.code.clone(),
                        message: failure.message.clone(),
                        disposition,
                    },
                };
                self.observers.emit(LifecycleEvent::Failed(JobFailedEvent {
                    job: done.job,
                    kind: failure.kind,
                    code: failure.code,
                    message: failure.message,
                    disposition,
                }));
                passed
            }
            Err(err) => {
                tracing::warn!(code = err.code(), "failure not recorded");
                let passed = PassedJob {
                    job: done.job.clone(),
                    outcome: PassOutcome::NotRecorded,
                };
                self.observers.emit(LifecycleEvent::PersistFailed(
                    JobCompletionPersistFailedEvent {
                        job: done.job,
                        operation: JobCompletionPersistenceOperation::Failure,
                        error_code: err.code().to_owned(),
                    },
                ));
                passed
            }
        }
    }
}

/// Runs the handler in its own task so a panic is contained, under the job's timeout, and
/// stops it when the lease is lost or the shutdown's hard stop fires.
async fn run_handler(
    handler: Arc<dyn JobHandler>,
    job: ClaimedJob,
    pool: &PgPool,
    logs: JobLogSink,
    lost: &CancellationToken,
    hard_stop: &CancellationToken,
) -> Outcome {
    let mut context = job.context();
    context.log_sink = Some(logs);
    crate::runtime::job_services::attach(&mut context, &job, pool);
    let cancellation = context.cancellation.clone();
    if let Some(step_id) = job.workflow_step_id {
        context.step_outputs = Some(StepOutputs(Arc::new(PgStepOutputs {
            pool: pool.clone(),
            step_id,
        })));
    }
    let timeout = Duration::from_secs(u64::try_from(job.timeout_seconds).unwrap_or(1));
    // The handler runs inside this job's task; catching the unwind keeps a panic to this job,
    // and dropping the future (timeout, lost lease, hard stop) cancels it.
    let run = AssertUnwindSafe(handler.execute(context, job.payload)).catch_unwind();
    // Abandoning the attempt (timeout, lost lease, hard stop) fires the context's cancellation
    // token for whatever the handler started beyond its own future, then drops that future.
    tokio::select! {
        finished = tokio::time::timeout(timeout, run) => match finished {
            Err(_) => {
                cancellation.cancel();
                Outcome::Failure(JobFailure::new(
                    JobFailureKind::Timeout,
                    "job.timeout",
                    format!("the handler ran longer than {} s", timeout.as_secs()),
                ))
            }
            Ok(Ok(Ok(completion))) => Outcome::Success(completion),
            Ok(Ok(Err(failure))) => Outcome::Failure(failure),
            Ok(Err(panic)) => {
                let message = panic_message(panic.as_ref());
                tracing::error!(%message, "job handler panicked");
                Outcome::Failure(JobFailure::new(JobFailureKind::Panicked, "job.panicked", message))
            }
        },
        () = lost.cancelled() => {
            cancellation.cancel();
            Outcome::LeaseLost
        }
        () = hard_stop.cancelled() => {
            cancellation.cancel();
            Outcome::Aborted
        }
    }
}

/// Reads prerequisite outputs of one workflow step from the database.
struct PgStepOutputs {
    pool: PgPool,
    step_id: WorkflowStepId,
}

#[async_trait::async_trait]
impl StepOutputReader for PgStepOutputs {
    async fn prerequisite_output(
        &self,
        step_key: &str,
    ) -> Result<Option<serde_json::Value>, StepOutputError> {
        get_prerequisite_output(&self.pool, self.step_id, step_key)
            .await
            .map_err(|err| StepOutputError {
                code: err.code(),
                message: err.to_string(),
            })
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        format!("handler panicked: {message}")
    } else if let Some(message) = payload.downcast_ref::<String>() {
        format!("handler panicked: {message}")
    } else {
        "handler panicked".to_owned()
    }
}

/// Keeps a LISTEN connection open and turns notifications for our job types into wake-ups.
/// Reconnects after connection loss and wakes the worker then, since notifications sent while
/// disconnected are lost (polling covers them too).
async fn listen(
    pool: PgPool,
    job_types: Vec<String>,
    wake: watch::Sender<u64>,
    stop: CancellationToken,
) {
    let job_types: HashSet<String> = job_types.into_iter().collect();
    let mut backoff = Backoff::default();
    loop {
        let connected = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(JOB_QUEUE_CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = tokio::select! {
            result = connected => match result {
                Ok(listener) => listener,
                Err(err) => {
                    tracing::warn!(error = %err, "LISTEN connection failed; relying on polling meanwhile");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => continue,
                        () = stop.cancelled() => return,
                    }
                }
            },
            () = stop.cancelled() => return,
        };
        backoff.reset();
        wake.send_modify(|generation| *generation += 1);
        loop {
            tokio::select! {
                received = listener.try_recv() => match received {
                    Ok(Some(notification)) => {
                        if job_types.contains(notification.payload()) {
                            wake.send_modify(|generation| *generation += 1);
                        }
                    }
                    // Connection lost: the next call reconnects; catch up on what was missed.
                    Ok(None) => wake.send_modify(|generation| *generation += 1),
                    Err(err) => {
                        tracing::warn!(error = %err, "LISTEN connection broke; reconnecting");
                        break;
                    }
                },
                () = stop.cancelled() => return,
            }
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
