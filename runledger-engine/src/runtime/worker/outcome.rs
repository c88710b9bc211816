//! What travels from the producers' jobs to the completer: each finished handler's outcome
//! ([`Finished`], one channel send per job), the outcome permit it holds until it is written
//! ([`OutcomeHold`]), and the count of outcomes still to come ([`ExpectedOutcomes`]) that tells
//! the completer whether waiting can fill a batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit};

use crate::core::jobs::{JobCompletion, JobFailure};
use crate::runtime::metrics::JobTypeMetrics;
use crate::runtime::observer::ObservedJob;

/// A finished handler whose outcome must be persisted.
pub(super) struct Finished {
    pub(super) job: ObservedJob,
    /// The metric handles of the job's type and queue, taken when its handler started.
    pub(super) metrics: Arc<JobTypeMetrics>,
    pub(super) outcome: Result<JobCompletion, JobFailure>,
    pub(super) duration: Duration,
    /// The job's share of [`WorkerConfig::max_unpersisted_outcomes`], held until the outcome
    /// is written (its concurrency slot was freed when the handler returned).
    ///
    /// [`WorkerConfig::max_unpersisted_outcomes`]: super::WorkerConfig::max_unpersisted_outcomes
    pub(super) permit: Option<OutcomeHold>,
}

impl Finished {
    /// Whether the handler asked to continue the job.
    pub(super) fn continues(&self) -> bool {
        self.outcome
            .as_ref()
            .is_ok_and(|completion| completion.continuation.is_some())
    }

    /// The same attempt, ended with `failure` instead.
    pub(super) fn failed(self, failure: JobFailure) -> Self {
        Self {
            outcome: Err(failure),
            ..self
        }
    }
}

/// A job's room among the unpersisted outcomes, held until its outcome is written; then the
/// gated claim loop that claimed it, if any, is woken, since the job's global slot is free.
pub(super) struct OutcomeHold {
    _permit: OwnedSemaphorePermit,
    freed: Option<Arc<Notify>>,
}

impl OutcomeHold {
    pub(super) fn new(permit: OwnedSemaphorePermit, freed: Option<Arc<Notify>>) -> Self {
        Self {
            _permit: permit,
            freed,
        }
    }
}

impl Drop for OutcomeHold {
    fn drop(&mut self) {
        if let Some(freed) = &self.freed {
            freed.notify_one();
        }
    }
}

/// Outcomes the completer may still receive soon: jobs the producers have spawned whose outcome
/// has not reached it (running, or claimed ahead and waiting for a slot), and one for each
/// claim in flight. Each is counted while its [`OutcomeToCome`] lives.
#[derive(Default)]
pub(super) struct ExpectedOutcomes {
    count: AtomicUsize,
    /// Notified when `count` falls to zero.
    none_left: Notify,
}

impl ExpectedOutcomes {
    /// Counts one more outcome to come, until the guard is dropped.
    pub(super) fn expect(self: &Arc<Self>) -> OutcomeToCome {
        self.count.fetch_add(1, Ordering::SeqCst);
        OutcomeToCome(Arc::clone(self))
    }

    /// Whether no outcome is to come: waiting cannot fill a batch.
    pub(super) fn none(&self) -> bool {
        self.count.load(Ordering::SeqCst) == 0
    }

    /// Waits until the count falls to zero (a wake-up left while no one waited counts).
    pub(super) async fn none_left(&self) {
        self.none_left.notified().await;
    }
}

/// An outcome the completer may still receive, counted in [`ExpectedOutcomes`] while this
/// lives: a claim in flight (until its jobs are counted), or a spawned job (until just before
/// its outcome is sent, or until its task ends without one: lease lost, hard stop).
pub(super) struct OutcomeToCome(Arc<ExpectedOutcomes>);

impl Drop for OutcomeToCome {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.none_left.notify_one();
        }
    }
}
