//! Waiting for a worker's jobs without asking the database.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use runledger_engine::runtime::observer::{JobLifecycleObserver, JobSucceededEvent};
use tokio::sync::Notify;

use crate::BoxError;

/// How long the count may stand still before the database is asked instead: the observer's
/// queue drops events when it is full, and a dropped success would leave the count short.
const QUIET: Duration = Duration::from_millis(500);

/// Counts the successes a Supervisor in this process committed, so that a measure can wait for
/// its jobs without probing the database while the worker it measures runs there.
///
/// A probe competes with the worker for the server: on the 2-core machine of
/// docs/benchmarks.md the drain probe took 3 to 16 ms of it every 5 ms once the queue's
/// indexes held a few thousand entries of jobs just claimed or finished.
///
/// ```
/// use runledger_bench::successes::Successes;
///
/// let successes = Successes::default();
/// assert_eq!(successes.count(), 0);
/// ```
#[derive(Clone, Default)]
pub struct Successes(Arc<Shared>);

#[derive(Default)]
struct Shared {
    count: AtomicUsize,
    changed: Notify,
}

impl Successes {
    /// The successes counted so far.
    pub fn count(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Counts `n` more successes (reported by a worker in another process, say).
    pub fn add(&self, n: usize) {
        self.0.count.fetch_add(n, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }

    /// Waits until the count is other than `seen`, and returns it.
    pub async fn changed_from(&self, seen: usize) -> usize {
        loop {
            let changed = self.0.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let count = self.count();
            if count != seen {
                return count;
            }
            changed.await;
        }
    }

    /// Waits until `target` successes were counted. Should the count stand still for half a
    /// second short of it, `drained` decides instead (true: nothing is left to run); the
    /// wait then says so, since its time includes that pause.
    pub async fn wait_for<F, Fut>(&self, target: usize, mut drained: F) -> Result<(), BoxError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, BoxError>>,
    {
        let mut count = self.count();
        while count < target {
            match tokio::time::timeout(QUIET, self.changed_from(count)).await {
                Ok(now) => count = now,
                Err(_) if drained().await? => {
                    eprintln!(
                        "counted {count} of {target} successes; the queue was found drained by a probe"
                    );
                    return Ok(());
                }
                Err(_) => {}
            }
        }
        Ok(())
    }
}

impl JobLifecycleObserver for Successes {
    fn on_job_succeeded(&self, _event: &JobSucceededEvent) {
        self.add(1);
    }
}
