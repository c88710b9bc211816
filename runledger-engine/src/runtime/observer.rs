//! Lifecycle observers: best-effort, post-commit callbacks about jobs a worker runs.
//!
//! Events are queued to a dispatcher task and delivered there, so a slow or panicking observer
//! never blocks a handler, a heartbeat or a completion. For one job, the running event is
//! queued before its terminal event. When the queue is full, events are dropped (and counted in
//! a warning) rather than applying backpressure to job execution.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::core::jobs::{JobFailureKind, JobId, JobStatus};
pub use crate::postgres::jobs::JobFailureDisposition;
use crate::postgres::jobs::{ClaimedJob, ReapedLease};
use crate::runtime::tasks::TaskSpawner;

/// How many events may wait for delivery before new ones are dropped.
pub const OBSERVER_QUEUE_CAPACITY: usize = 4_096;
/// How long pending events are still delivered after shutdown begins.
pub const OBSERVER_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The job an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObservedJob {
    /// The job.
    pub job_id: JobId,
    /// Its type.
    pub job_type: String,
    /// The attempt's fencing token.
    pub attempt: i32,
    /// The attempt number since the job was (re)queued.
    pub attempt_number: i32,
    /// The worker that ran it.
    pub worker_id: String,
}

impl ObservedJob {
    pub(crate) fn from_claimed(job: &ClaimedJob) -> Self {
        Self {
            job_id: job.id,
            job_type: job.job_type.clone(),
            attempt: job.attempt,
            attempt_number: job.attempt_number,
            worker_id: job.worker_id.clone(),
        }
    }
}

/// A claimed job's handler is about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobRunningEvent {
    /// The job.
    pub job: ObservedJob,
}

/// A job's success was committed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobSucceededEvent {
    /// The job.
    pub job: ObservedJob,
    /// How long the handler ran.
    pub duration: Duration,
}

/// A handler continued its job: the attempt closed as a success and the job's next run was
/// scheduled.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobContinuedEvent {
    /// The job.
    pub job: ObservedJob,
    /// How long the handler ran.
    pub duration: Duration,
    /// The run that starts next.
    pub run_number: i32,
    /// When it becomes claimable.
    pub next_run_at: chrono::DateTime<chrono::Utc>,
}

/// A failed attempt was committed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobFailedEvent {
    /// The job.
    pub job: ObservedJob,
    /// How it failed.
    pub kind: JobFailureKind,
    /// Failure code.
    pub code: String,
    /// Failure message.
    pub message: String,
    /// What happened to the job.
    pub disposition: JobFailureDisposition,
}

/// Which write could not be persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobCompletionPersistenceOperation {
    /// Recording a success.
    Success,
    /// Recording a failure.
    Failure,
    /// Recording a continuation.
    Continuation,
}

/// A handler finished but its outcome could not be recorded (lease lost meanwhile, or the
/// database stayed unreachable until the lease expired). The reaper will retry the job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobCompletionPersistFailedEvent {
    /// The job.
    pub job: ObservedJob,
    /// What was being written.
    pub operation: JobCompletionPersistenceOperation,
    /// Stable code of the persistence error.
    pub error_code: String,
}

/// A heartbeat found the job's lease gone; its handler was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobLeaseLostEvent {
    /// The job.
    pub job: ObservedJob,
}

/// What the reaper did with an expired lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobLeaseReapedDisposition {
    /// Retried after the reaper delay.
    Retried,
    /// Dead-lettered: no attempts left.
    DeadLettered,
}

/// The reaper took back an expired lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobLeaseReapedEvent {
    /// The job.
    pub job_id: JobId,
    /// Its type.
    pub job_type: String,
    /// The attempt whose lease expired.
    pub attempt: i32,
    /// The worker that held it.
    pub worker_id: String,
    /// Whether that worker had started the handler.
    pub started: bool,
    /// What happened to the job.
    pub disposition: JobLeaseReapedDisposition,
}

impl JobLeaseReapedEvent {
    pub(crate) fn from_reaped(lease: &ReapedLease) -> Self {
        Self {
            job_id: lease.job_id,
            job_type: lease.job_type.clone(),
            attempt: lease.attempt,
            worker_id: lease.worker_id.clone(),
            started: lease.started,
            disposition: if lease.status == JobStatus::DeadLettered {
                JobLeaseReapedDisposition::DeadLettered
            } else {
                JobLeaseReapedDisposition::Retried
            },
        }
    }
}

/// Receives lifecycle events. Every method has an empty default; implement the ones you need.
/// Methods run on a dedicated task, after the corresponding write committed; a panic in one
/// is caught and logged.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use runledger_engine::runtime::observer::{JobLifecycleObserver, JobSucceededEvent};
///
/// #[derive(Default)]
/// struct CountSuccesses(AtomicUsize);
///
/// impl JobLifecycleObserver for CountSuccesses {
///     fn on_job_succeeded(&self, _event: &JobSucceededEvent) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// ```
pub trait JobLifecycleObserver: Send + Sync + 'static {
    /// A handler is about to start.
    fn on_job_running(&self, _event: &JobRunningEvent) {}
    /// A success was committed.
    fn on_job_succeeded(&self, _event: &JobSucceededEvent) {}
    /// A failure was committed.
    fn on_job_failed(&self, _event: &JobFailedEvent) {}
    /// A continuation was committed (the job's next run is scheduled).
    fn on_job_continued(&self, _event: &JobContinuedEvent) {}
    /// An outcome could not be committed.
    fn on_job_completion_persist_failed(&self, _event: &JobCompletionPersistFailedEvent) {}
    /// A lease was lost while the handler ran.
    fn on_job_lease_lost(&self, _event: &JobLeaseLostEvent) {}
    /// The reaper took back an expired lease.
    fn on_job_lease_reaped(&self, _event: &JobLeaseReapedEvent) {}
}

/// One queued event.
#[derive(Debug, Clone)]
pub(crate) enum LifecycleEvent {
    Running(JobRunningEvent),
    Succeeded(JobSucceededEvent),
    Failed(JobFailedEvent),
    Continued(JobContinuedEvent),
    PersistFailed(JobCompletionPersistFailedEvent),
    LeaseLost(JobLeaseLostEvent),
    LeaseReaped(JobLeaseReapedEvent),
}

impl LifecycleEvent {
    fn deliver(&self, observer: &dyn JobLifecycleObserver) {
        match self {
            Self::Running(event) => observer.on_job_running(event),
            Self::Succeeded(event) => observer.on_job_succeeded(event),
            Self::Failed(event) => observer.on_job_failed(event),
            Self::Continued(event) => observer.on_job_continued(event),
            Self::PersistFailed(event) => observer.on_job_completion_persist_failed(event),
            Self::LeaseLost(event) => observer.on_job_lease_lost(event),
            Self::LeaseReaped(event) => observer.on_job_lease_reaped(event),
        }
    }
}

/// The registered observers, and the sending side of their delivery queue.
#[derive(Clone, Default)]
pub struct JobLifecycleObservers {
    observers: Vec<Arc<dyn JobLifecycleObserver>>,
    sender: Option<mpsc::Sender<LifecycleEvent>>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for JobLifecycleObservers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobLifecycleObservers")
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl JobLifecycleObservers {
    /// No observers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an observer.
    pub fn push(&mut self, observer: Arc<dyn JobLifecycleObserver>) {
        self.observers.push(observer);
    }

    /// Whether no observer is registered.
    pub fn is_empty(&self) -> bool {
        self.observers.is_empty()
    }

    /// Starts the dispatcher task in `tasks` and returns observers wired to it. The task ends
    /// when every clone of the returned value is dropped, after delivering what is queued (bounded by
    /// [`OBSERVER_DRAIN_TIMEOUT`] once `shutdown` fires).
    pub(crate) fn start(
        &self,
        tasks: &TaskSpawner,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> (Self, Option<tokio::task::JoinHandle<Option<()>>>) {
        if self.observers.is_empty() {
            return (self.clone(), None);
        }
        let (sender, receiver) = mpsc::channel(OBSERVER_QUEUE_CAPACITY);
        let observers = self.observers.clone();
        let handle = tasks.spawn(dispatch(observers, receiver, shutdown));
        let wired = Self {
            observers: self.observers.clone(),
            sender: Some(sender),
            dropped: Arc::clone(&self.dropped),
        };
        (wired, Some(handle))
    }

    /// Queues the event `event` builds, without waiting; drops it when the queue is full. With
    /// no observer wired, the event is not built at all: the hot path clones nothing for it.
    pub(crate) fn emit(&self, event: impl FnOnce() -> LifecycleEvent) {
        let Some(sender) = &self.sender else {
            return;
        };
        if sender.try_send(event()).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, "lifecycle observer queue full; events dropped");
            }
        }
    }
}

async fn dispatch(
    observers: Vec<Arc<dyn JobLifecycleObserver>>,
    mut receiver: mpsc::Receiver<LifecycleEvent>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let deliver = |event: &LifecycleEvent| {
        for observer in &observers {
            if catch_unwind(AssertUnwindSafe(|| event.deliver(observer.as_ref()))).is_err() {
                tracing::error!("a lifecycle observer panicked; the event was skipped for it");
            }
        }
    };
    loop {
        tokio::select! {
            event = receiver.recv() => match event {
                Some(event) => deliver(&event),
                None => return,
            },
            () = shutdown.cancelled() => break,
        }
    }
    // Shutting down: deliver what is still queued, within a bound.
    let drain = async {
        while let Some(event) = receiver.recv().await {
            deliver(&event);
        }
    };
    if tokio::time::timeout(OBSERVER_DRAIN_TIMEOUT, drain)
        .await
        .is_err()
    {
        tracing::warn!("lifecycle observer delivery stopped at the shutdown bound");
    }
}
