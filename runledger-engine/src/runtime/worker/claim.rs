//! The claim loops: claim up to the free capacity, spawn a task per job, claim again at once
//! while claims find work, otherwise wait for a notification or the poll interval.
//!
//! Each lane (a served queue, or every queue) runs `claim_parallelism` loops for ordinary jobs
//! and one for jobs under a global limit or holding a resource key, which is also woken when
//! the outcome of one of its jobs is written (that frees the job's global slot).
//!
//! Two bounds gate a claim: free concurrency slots (a slot is held while a handler runs, and
//! freed when it returns) and room for unpersisted outcomes (held until the completer has
//! written the outcome). Freeing the slot before the outcome is written is what lets the next
//! claim take a whole batch instead of the one or two slots that trickle back.

use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::sync::{AcquireError, Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Backoff, Finished, Inner, JobTasks, execute};
use crate::postgres::jobs::ClaimedJob;
use crate::postgres::jobs::lease::claim_on;

/// Longest a claim waits for more slots to come free once at least one is (see
/// [`Claimer::reserve`]).
const CLAIM_GATHER_WINDOW: Duration = Duration::from_millis(2);

/// Adds to `held` whatever `semaphore` has free right now, up to `target` permits in all.
fn top_up(semaphore: &Arc<Semaphore>, held: &mut OwnedSemaphorePermit, target: usize) {
    let wanted = target.saturating_sub(held.num_permits());
    let free = semaphore.available_permits().min(wanted);
    if free > 0
        && let Ok(more) = Arc::clone(semaphore).try_acquire_many_owned(free as u32)
    {
        held.merge(more);
    }
}

/// A share of the worker's capacity serving some queues (all of them when `queues` is `None`),
/// with its own concurrency slots and claim loops.
pub(super) struct Lane {
    pub(super) queues: Option<Vec<String>>,
    pub(super) concurrency: u32,
}

/// A job's room among the unpersisted outcomes, held until its outcome is written; then the
/// limited claim loop that claimed it, if any, is woken, since the job's global slot is free.
pub(super) struct OutcomeHold {
    _permit: OwnedSemaphorePermit,
    freed: Option<Arc<Notify>>,
}

impl Drop for OutcomeHold {
    fn drop(&mut self) {
        if let Some(freed) = &self.freed {
            freed.notify_one();
        }
    }
}

/// Waits for `freed`, or forever without one.
async fn notified(freed: Option<&Notify>) {
    match freed {
        Some(freed) => freed.notified().await,
        None => std::future::pending().await,
    }
}

/// The connection a claim loop keeps between claims while it is busy, so that a claim costs one
/// round trip: a connection taken from the pool is first pinged by it, which on a claim of a
/// few jobs is a third of the claim's time.
#[derive(Default)]
struct HeldConnection(Option<PoolConnection<Postgres>>);

impl HeldConnection {
    /// The kept connection, or one taken from the pool now.
    async fn get(&mut self, pool: &PgPool) -> Result<&mut PoolConnection<Postgres>, sqlx::Error> {
        let conn = match self.0.take() {
            Some(conn) => conn,
            None => pool.acquire().await?,
        };
        Ok(self.0.insert(conn))
    }

    /// Gives the connection back to the pool.
    fn release(&mut self) {
        self.0 = None;
    }

    /// Closes the connection after an error instead of giving it back: it may be broken.
    fn discard(&mut self) {
        if let Some(mut conn) = self.0.take() {
            conn.close_on_drop();
        }
    }
}

/// One claim loop. Several share a lane's capacity: the ones claiming jobs under no global
/// limit, and one claiming the others (`freed` is set).
pub(super) struct Claimer {
    pub(super) inner: Arc<Inner>,
    pub(super) lane: Arc<Lane>,
    pub(super) capacity: Arc<Semaphore>,
    pub(super) unpersisted: Arc<Semaphore>,
    /// Notified by the listener, and by a sibling loop whose claim came back full.
    pub(super) wake: Arc<Notify>,
    pub(super) jobs: JobTasks,
    pub(super) finished: mpsc::UnboundedSender<Finished>,
    pub(super) hard_stop: CancellationToken,
    /// Set for the loop claiming jobs under a global limit: notified when the outcome of one
    /// of its jobs is written.
    pub(super) freed: Option<Arc<Notify>>,
}

impl Claimer {
    pub(super) async fn run(self, shutdown: CancellationToken) {
        let config = &self.inner.config;
        let mut backoff = Backoff::default();
        let mut conn = HeldConnection::default();
        while !shutdown.is_cancelled() {
            // A loop that may wait long for a slot lends its connection back to the pool.
            if self.capacity.available_permits() == 0 {
                conn.release();
            }
            // Reserve capacity first so concurrent claim loops never overshoot the limits.
            let reserved = tokio::select! {
                reserved = self.reserve() => reserved,
                () = shutdown.cancelled() => break,
            };
            let Ok((mut slots, mut outcomes)) = reserved else {
                break;
            };
            let want = slots.num_permits();
            let request = self
                .inner
                .claim_request(want as i64, self.lane.queues.as_deref());
            let claimed = match conn.get(&self.inner.pool).await {
                Ok(connection) => claim_on(connection, &request, self.freed.is_some()).await,
                Err(err) => Err(err.into()),
            };
            let claimed = match claimed {
                Ok(claimed) => {
                    backoff.reset();
                    claimed
                }
                Err(err) => {
                    drop((slots, outcomes));
                    conn.discard();
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "claim failed; backing off");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = shutdown.cancelled() => break,
                    }
                    continue;
                }
            };
            self.inner.metrics.claimed(claimed.len());
            // Only an empty claim means nothing is due: a short one may just have skipped rows
            // another claim loop (or worker) had locked.
            let found = !claimed.is_empty();
            if claimed.len() == want && self.freed.is_none() {
                // More may be due: let a sibling claim beside this loop.
                self.wake.notify_one();
            }
            for job in claimed {
                let (Some(slot), Some(outcome)) = (slots.split(1), outcomes.split(1)) else {
                    break;
                };
                self.spawn_job(job, slot, outcome);
            }
            drop((slots, outcomes));
            if found {
                continue;
            }
            tokio::select! {
                () = self.wake.notified() => {}
                // A whole poll interval without a wake-up: the loop is idle, its connection is
                // better in the pool.
                () = tokio::time::sleep(config.poll_interval) => conn.release(),
                () = notified(self.freed.as_deref()) => {}
                () = shutdown.cancelled() => break,
            }
        }
    }

    /// Reserves room for the next claim: matching slots and outcome permits, at least one,
    /// at most the loop's share of the capacity. Each claim loop aims at its share (the
    /// concurrency divided among the loops, capped by the claim batch) so that their claims
    /// overlap instead of one loop taking every slot while the others claim one or two jobs.
    /// When few slots are free it waits up to [`CLAIM_GATHER_WINDOW`] for half a share, so that
    /// slots trickling back one by one as handlers return are claimed together instead of
    /// costing a round trip each.
    async fn reserve(&self) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), AcquireError> {
        let config = &self.inner.config;
        let share = (self.lane.concurrency / config.claim_parallelism).max(1) as usize;
        let target = (config.claim_batch_size as usize)
            .min(share)
            .min(config.max_unpersisted_outcomes);
        let enough = (target / 2).max(1);
        let mut slots = Arc::clone(&self.capacity).acquire_owned().await?;
        if slots.num_permits() + self.capacity.available_permits() < enough {
            let more = (enough - slots.num_permits()) as u32;
            let gathered = tokio::time::timeout(
                CLAIM_GATHER_WINDOW,
                Arc::clone(&self.capacity).acquire_many_owned(more),
            )
            .await;
            if let Ok(more) = gathered {
                slots.merge(more?);
            }
        }
        top_up(&self.capacity, &mut slots, target);
        let mut outcomes = Arc::clone(&self.unpersisted).acquire_owned().await?;
        top_up(&self.unpersisted, &mut outcomes, slots.num_permits());
        // Slots beyond the outcome permits go back at once.
        if let Some(extra) = slots.split(slots.num_permits() - outcomes.num_permits()) {
            drop(extra);
        }
        Ok((slots, outcomes))
    }

    fn spawn_job(
        &self,
        job: ClaimedJob,
        slot: OwnedSemaphorePermit,
        outcome: OwnedSemaphorePermit,
    ) {
        let lost = self.inner.track(&job);
        let span = execute::job_span(&job);
        let inner = Arc::clone(&self.inner);
        let finished = self.finished.clone();
        let hard_stop = self.hard_stop.clone();
        let freed = self.freed.clone();
        self.jobs.spawn(
            async move {
                let done = inner.execute(job, lost, hard_stop).await;
                // The handler has returned: its slot can run the next job while the outcome
                // waits for the completer.
                drop(slot);
                if let Some(mut done) = done {
                    done.permit = Some(OutcomeHold {
                        _permit: outcome,
                        freed,
                    });
                    // The completer outlives every job task; a send error means it is gone.
                    let _ = finished.send(done);
                }
            }
            .instrument(span),
        );
    }
}
