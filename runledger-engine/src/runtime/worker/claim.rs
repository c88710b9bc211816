//! The claim loops: claim up to the free capacity, spawn a task per job, claim again at once
//! while claims come back full, otherwise wait for a notification or the poll interval.
//!
//! A claim that leases fewer jobs than it asked for took every due job that no other claim had
//! locked (`SKIP LOCKED` passes over those, and their claim leases them), so claiming again at
//! once would find nothing: on an idle worker that was one more statement for every job
//! picked up. A notification sent meanwhile is not lost: it leaves a wake-up for the loop's
//! next wait. The loop for jobs under a global limit claims again after any find, since
//! limits, not the backlog, cut its claims short.
//!
//! Each lane (a served queue, or every queue) runs `claim_parallelism` loops for ordinary jobs
//! and one for jobs under a global limit or holding a resource key, which notifications of
//! such jobs wake (they have their own channel) and which is also woken when the outcome of one
//! of its jobs is written (that frees the job's global slot).
//!
//! Two bounds gate a claim: free concurrency slots (a slot is held while a handler runs, and
//! freed when it returns) and room for unpersisted outcomes (held until the completer has
//! written the outcome). Freeing the slot before the outcome is written is what lets the next
//! claim take a whole batch instead of the one or two slots that trickle back.
//!
//! While the lane's handlers return within [`CLAIM_AHEAD_MAX_HANDLER_TIME`], a claim also takes
//! up to a batch of jobs beyond its free slots, which wait in memory for the next slot: claims
//! stay whole batches (each statement's fixed cost spread over more jobs) and the next claim is
//! in flight while the previous batch runs. The jobs a lane holds ahead are at most a claim
//! batch and at most [`CLAIM_AHEAD_MAX_SLOTS_WORTH`] times its slots, so a job claimed ahead
//! waits a few handler runs at most for its slot (about 20 ms at the handler time that allows
//! claiming ahead), and a lane whose handlers run longer claims only what it can start at once.
//! At the default settings (64 slots, claim batch 256) a claim can lease 256 jobs while 32 of
//! its slots are free. Holding one slot's worth ahead, as the lane did before, kept claims at
//! 64 jobs or fewer whatever the batch, and the peer harness's backlog of no-op jobs drained
//! 15 to 20% slower.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::sync::{AcquireError, Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Backoff, Finished, Inner, JobTasks, OutcomeToCome, execute};
use crate::postgres::jobs::ClaimedJob;
use crate::postgres::jobs::lease::{Claimed, claim_on};

/// Longest a claim waits for more slots to come free once at least one is (see
/// [`Claimer::reserve`]).
const CLAIM_GATHER_WINDOW: Duration = Duration::from_millis(2);

/// Longest recent handler time (a moving average over the lane's handlers) at which a lane
/// claims jobs ahead of its free slots.
pub(super) const CLAIM_AHEAD_MAX_HANDLER_TIME: Duration = Duration::from_millis(5);

/// Most jobs claimed ahead of their slots, in handler slots' worth: a job claimed ahead waits at
/// most about this many handler runs for its slot.
const CLAIM_AHEAD_MAX_SLOTS_WORTH: u32 = 4;

/// How many jobs a lane may hold claimed ahead of its free slots: a claim batch, but at most
/// [`CLAIM_AHEAD_MAX_SLOTS_WORTH`] times its slots, so that a lane with few slots does not
/// lease more than it starts within a few handler runs.
pub(super) fn claim_ahead_room(concurrency: u32, claim_batch_size: u32) -> usize {
    claim_batch_size.min(concurrency.saturating_mul(CLAIM_AHEAD_MAX_SLOTS_WORTH)) as usize
}

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

/// A lane's room for jobs, shared by its claim loops: its handler slots, the jobs it may claim
/// ahead of a free slot, and how long its handlers have been taking.
pub(super) struct LaneCapacity {
    slots: Arc<Semaphore>,
    ahead: Arc<Semaphore>,
    /// Moving average of the handlers' run times in microseconds; `u64::MAX` until one returns,
    /// so a lane claims ahead only once its handlers have shown they are short.
    handler_micros: AtomicU64,
}

impl LaneCapacity {
    /// Room for `concurrency` handlers and, while they are short, up to a claim batch of jobs
    /// waiting for a slot (see [`claim_ahead_room`]).
    pub(super) fn new(concurrency: u32, claim_batch_size: u32) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(concurrency as usize)),
            ahead: Arc::new(Semaphore::new(claim_ahead_room(
                concurrency,
                claim_batch_size,
            ))),
            handler_micros: AtomicU64::new(u64::MAX),
        }
    }

    fn record_handler_time(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let average = self.handler_micros.load(Ordering::Relaxed);
        let next = if average == u64::MAX {
            took
        } else {
            average - average / 8 + took / 8
        };
        self.handler_micros.store(next, Ordering::Relaxed);
    }

    fn handlers_are_short(&self) -> bool {
        self.handler_micros.load(Ordering::Relaxed)
            <= CLAIM_AHEAD_MAX_HANDLER_TIME.as_micros() as u64
    }
}

/// The room one claim reserved: slots for the jobs that start at once, permits for the jobs
/// claimed ahead, and one outcome permit for each job.
struct Reserved {
    slots: OwnedSemaphorePermit,
    ahead: Option<OwnedSemaphorePermit>,
    outcomes: OwnedSemaphorePermit,
}

impl Reserved {
    fn jobs(&self) -> usize {
        self.slots.num_permits() + self.ahead.as_ref().map_or(0, |a| a.num_permits())
    }

    /// The room of the next claimed job: its start (a slot now, or a wait for one) and its
    /// outcome permit.
    fn next(&mut self) -> Option<(Start, OwnedSemaphorePermit)> {
        let outcome = self.outcomes.split(1)?;
        match self.slots.split(1) {
            Some(slot) => Some((Start::Now(slot), outcome)),
            None => Some((Start::Ahead(self.ahead.as_mut()?.split(1)?), outcome)),
        }
    }
}

/// How a claimed job gets its handler slot.
enum Start {
    /// It has one.
    Now(OwnedSemaphorePermit),
    /// It was claimed ahead and waits for the next free one.
    Ahead(OwnedSemaphorePermit),
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
    pub(super) capacity: Arc<LaneCapacity>,
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
        // Whether the last wait ended with the poll interval, no wake-up having come.
        let mut idle = false;
        while !shutdown.is_cancelled() {
            // A loop that may wait long for a slot lends its connection back to the pool.
            if self.capacity.slots.available_permits() == 0 {
                conn.release();
            }
            // Reserve capacity first so concurrent claim loops never overshoot the limits.
            let reserved = tokio::select! {
                reserved = self.reserve() => reserved,
                () = shutdown.cancelled() => break,
            };
            let Ok(mut reserved) = reserved else {
                break;
            };
            let want = reserved.jobs();
            let request = self
                .inner
                .claim_request(want as i64, self.lane.queues.as_deref());
            // Outcomes may come of this claim: the completer keeps gathering a batch meanwhile.
            let claiming = OutcomeToCome::new(&self.inner);
            let claimed = match conn.get(&self.inner.pool).await {
                Ok(connection) => claim_on(connection, &request, self.freed.is_some()).await,
                Err(err) => Err(err.into()),
            };
            let Claimed {
                jobs: claimed,
                leased,
            } = match claimed {
                Ok(claimed) => {
                    backoff.reset();
                    claimed
                }
                Err(err) => {
                    drop((reserved, claiming));
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
            let full = leased == want;
            if full && self.freed.is_none() {
                // More may be due: let a sibling claim beside this loop.
                self.wake.notify_one();
            }
            // Every outcome of the claim is counted as to come before any job starts, so that
            // the completer never takes the first to finish for the last.
            let to_come: Vec<OutcomeToCome> = claimed
                .iter()
                .map(|_| OutcomeToCome::new(&self.inner))
                .collect();
            drop(claiming);
            for (job, to_come) in claimed.into_iter().zip(to_come) {
                let Some((start, outcome)) = reserved.next() else {
                    break;
                };
                self.spawn_job(job, start, outcome, to_come);
            }
            drop(reserved);
            if leased > 0 {
                idle = false;
                if full || self.freed.is_some() {
                    continue;
                }
            }
            // A loop that is woken keeps its connection while it waits, so that the claim of the
            // next wake-up costs one round trip. An idle one (a whole poll interval without a
            // wake-up) holds a connection only for its poll claims: kept through its waits too,
            // each of a worker's idle loops would hold one at all times.
            if idle {
                conn.release();
            }
            idle = tokio::select! {
                () = self.wake.notified() => false,
                () = tokio::time::sleep(config.poll_interval) => true,
                () = notified(self.freed.as_deref()) => false,
                () = shutdown.cancelled() => break,
            };
        }
    }

    /// Reserves room for the next claim: matching slots and outcome permits, at least one,
    /// at most the loop's share of the capacity. Each claim loop aims at its share (the
    /// concurrency divided among the loops, capped by the claim batch) so that their claims
    /// overlap instead of one loop taking every slot while the others claim one or two jobs.
    /// When few slots are free it waits up to [`CLAIM_GATHER_WINDOW`] for half a share, so that
    /// slots trickling back one by one as handlers return are claimed together instead of
    /// costing a round trip each. While handlers are short it adds room for jobs claimed
    /// ahead, up to a whole claim batch in all.
    async fn reserve(&self) -> Result<Reserved, AcquireError> {
        let config = &self.inner.config;
        let capacity = &self.capacity;
        let share = (self.lane.concurrency / config.claim_parallelism).max(1) as usize;
        let batch = (config.claim_batch_size as usize).min(config.max_unpersisted_outcomes);
        let target = batch.min(share);
        let enough = (target / 2).max(1);
        let mut slots = Arc::clone(&capacity.slots).acquire_owned().await?;
        if slots.num_permits() + capacity.slots.available_permits() < enough {
            let more = (enough - slots.num_permits()) as u32;
            let gathered = tokio::time::timeout(
                CLAIM_GATHER_WINDOW,
                Arc::clone(&capacity.slots).acquire_many_owned(more),
            )
            .await;
            if let Ok(more) = gathered {
                slots.merge(more?);
            }
        }
        top_up(&capacity.slots, &mut slots, target);
        let mut ahead = None;
        let room = batch.saturating_sub(slots.num_permits());
        // Jobs under a global limit are claimed only to run: a leased job holds its global slot.
        if room > 0 && self.freed.is_none() && capacity.handlers_are_short() {
            let free = capacity.ahead.available_permits().min(room);
            if free > 0 {
                ahead = Arc::clone(&capacity.ahead)
                    .try_acquire_many_owned(free as u32)
                    .ok();
            }
        }
        let mut reserved = Reserved {
            slots,
            ahead,
            outcomes: Arc::clone(&self.unpersisted).acquire_owned().await?,
        };
        let jobs = reserved.jobs();
        top_up(&self.unpersisted, &mut reserved.outcomes, jobs);
        // Room beyond the outcome permits goes back at once, jobs claimed ahead first.
        let mut extra = jobs - reserved.outcomes.num_permits();
        if let Some(ahead) = &mut reserved.ahead {
            let given = extra.min(ahead.num_permits());
            drop(ahead.split(given));
            extra -= given;
        }
        drop(reserved.slots.split(extra));
        Ok(reserved)
    }

    fn spawn_job(
        &self,
        job: ClaimedJob,
        start: Start,
        outcome: OwnedSemaphorePermit,
        to_come: OutcomeToCome,
    ) {
        let lost = self.inner.track(&job);
        let span = execute::job_span(&job);
        let inner = Arc::clone(&self.inner);
        let capacity = Arc::clone(&self.capacity);
        let finished = self.finished.clone();
        let hard_stop = self.hard_stop.clone();
        let freed = self.freed.clone();
        self.jobs.spawn(
            async move {
                let slot = match start {
                    Start::Now(slot) => slot,
                    Start::Ahead(ahead) => {
                        let slot = tokio::select! {
                            slot = Arc::clone(&capacity.slots).acquire_owned() => slot.ok(),
                            () = hard_stop.cancelled() => None,
                        };
                        drop(ahead);
                        match slot {
                            Some(slot) => slot,
                            None => return inner.abort_unstarted(job.id),
                        }
                    }
                };
                let started = Instant::now();
                let done = inner.execute(job, lost, hard_stop).await;
                capacity.record_handler_time(started.elapsed());
                // The handler has returned: its slot can run the next job while the outcome
                // waits for the completer.
                drop(slot);
                if let Some(mut done) = done {
                    done.permit = Some(OutcomeHold {
                        _permit: outcome,
                        freed,
                    });
                    // Counted out first: a completer that then finds none to come has every
                    // outcome it could wait for, or is about to receive it.
                    drop(to_come);
                    // The completer outlives every job task; a send error means it is gone.
                    let _ = finished.send(done);
                }
            }
            .instrument(span),
        );
    }
}
