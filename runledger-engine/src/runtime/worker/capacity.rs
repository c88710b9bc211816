//! A lane's capacity, owned by its producer: handler slots, room for jobs claimed ahead of a
//! free slot, and the worker's bound on unwritten outcomes, which every lane shares.
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
//! its slots are free. Holding one slot's worth ahead kept claims at 64 jobs or fewer whatever
//! the batch, and the peer harness's backlog of no-op jobs drained 15 to 20% slower.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

use super::WorkerConfig;

/// Longest a claim waits for more slots to come free once at least one is (see
/// [`LaneCapacity::reserve`]).
const CLAIM_GATHER_WINDOW: Duration = Duration::from_millis(2);

/// Longest recent handler time (a moving average over the lane's handlers) at which a lane
/// claims jobs ahead of its free slots.
const CLAIM_AHEAD_MAX_HANDLER_TIME: Duration = Duration::from_millis(5);

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

/// A lane's room for jobs, shared by its claim loops: its handler slots, the jobs it may claim
/// ahead of a free slot, how long its handlers have been taking, and the worker's room for
/// unwritten outcomes.
pub(super) struct LaneCapacity {
    slots: Arc<Semaphore>,
    ahead: Arc<Semaphore>,
    /// Moving average of the handlers' run times in microseconds; `u64::MAX` until one returns,
    /// so a lane claims ahead only once its handlers have shown they are short.
    handler_micros: AtomicU64,
    /// What each claim loop aims at: the lane's concurrency divided among its plain loops.
    share: usize,
    /// Most jobs one claim reserves: the claim batch, within the bound on unwritten outcomes.
    batch: usize,
    /// The worker's [`max_unpersisted_outcomes`](super::WorkerConfig::max_unpersisted_outcomes).
    unpersisted: Arc<Semaphore>,
}

impl LaneCapacity {
    /// Room for a lane of `concurrency` handlers and, while they are short, up to a claim batch
    /// of jobs waiting for a slot (see [`claim_ahead_room`]); the lane's claim loops share it,
    /// and every outcome holds a permit of `unpersisted` until it is written.
    pub(super) fn new(
        concurrency: u32,
        config: &WorkerConfig,
        unpersisted: Arc<Semaphore>,
    ) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(concurrency as usize)),
            ahead: Arc::new(Semaphore::new(claim_ahead_room(
                concurrency,
                config.claim_batch_size,
            ))),
            handler_micros: AtomicU64::new(u64::MAX),
            share: (concurrency / config.claim_parallelism.max(1)).max(1) as usize,
            batch: (config.claim_batch_size as usize).min(config.max_unpersisted_outcomes),
            unpersisted,
        }
    }

    /// Whether a handler slot is free now.
    pub(super) fn has_free_slot(&self) -> bool {
        self.slots.available_permits() > 0
    }

    /// Waits for a handler slot (for a job claimed ahead).
    pub(super) async fn slot(&self) -> Result<OwnedSemaphorePermit, AcquireError> {
        Arc::clone(&self.slots).acquire_owned().await
    }

    /// Counts a handler's run time into the lane's recent average.
    pub(super) fn record_handler_time(&self, took: Duration) {
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

    /// Reserves room for the next claim: matching slots and outcome permits, at least one,
    /// at most a claim loop's share of the capacity. Each claim loop aims at its share (the
    /// concurrency divided among the loops, capped by the claim batch) so that their claims
    /// overlap instead of one loop taking every slot while the others claim one or two jobs.
    /// When few slots are free it waits up to [`CLAIM_GATHER_WINDOW`] for half a share, so that
    /// slots trickling back one by one as handlers return are claimed together instead of
    /// costing a round trip each. While handlers are short it adds room for jobs claimed
    /// ahead, up to a whole claim batch in all; never for `gated` jobs (under a global limit or
    /// holding a resource key), which are claimed only to run: a leased job holds its global
    /// slot.
    pub(super) async fn reserve(&self, gated: bool) -> Result<Reserved, AcquireError> {
        let target = self.batch.min(self.share);
        let enough = (target / 2).max(1);
        let mut slots = Arc::clone(&self.slots).acquire_owned().await?;
        if slots.num_permits() + self.slots.available_permits() < enough {
            let more = (enough - slots.num_permits()) as u32;
            let gathered = tokio::time::timeout(
                CLAIM_GATHER_WINDOW,
                Arc::clone(&self.slots).acquire_many_owned(more),
            )
            .await;
            if let Ok(more) = gathered {
                slots.merge(more?);
            }
        }
        top_up(&self.slots, &mut slots, target);
        let mut ahead = None;
        let room = self.batch.saturating_sub(slots.num_permits());
        if room > 0 && !gated && self.handlers_are_short() {
            let free = self.ahead.available_permits().min(room);
            if free > 0 {
                ahead = Arc::clone(&self.ahead)
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
}

/// The room one claim reserved: slots for the jobs that start at once, permits for the jobs
/// claimed ahead, and one outcome permit for each job.
pub(super) struct Reserved {
    slots: OwnedSemaphorePermit,
    ahead: Option<OwnedSemaphorePermit>,
    outcomes: OwnedSemaphorePermit,
}

impl Reserved {
    /// How many jobs the claim may lease.
    pub(super) fn jobs(&self) -> usize {
        self.slots.num_permits() + self.ahead.as_ref().map_or(0, |a| a.num_permits())
    }

    /// The room of the next claimed job: its start (a slot now, or a wait for one) and its
    /// outcome permit.
    pub(super) fn next(&mut self) -> Option<(Start, OwnedSemaphorePermit)> {
        let outcome = self.outcomes.split(1)?;
        match self.slots.split(1) {
            Some(slot) => Some((Start::Now(slot), outcome)),
            None => Some((Start::Ahead(self.ahead.as_mut()?.split(1)?), outcome)),
        }
    }
}

/// How a claimed job gets its handler slot.
pub(super) enum Start {
    /// It has one.
    Now(OwnedSemaphorePermit),
    /// It was claimed ahead and waits for the next free one.
    Ahead(OwnedSemaphorePermit),
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;
    use crate::runtime::config::JobsConfig;

    /// A lane of `concurrency` slots at the default claim batch (256) and claim parallelism (2),
    /// with room for `unpersisted` unwritten outcomes.
    fn lane(concurrency: u32, unpersisted: usize) -> (LaneCapacity, Arc<Semaphore>) {
        let mut config = WorkerConfig::from_jobs_config(&JobsConfig::default());
        config.max_unpersisted_outcomes = unpersisted;
        let room = Arc::new(Semaphore::new(unpersisted));
        (
            LaneCapacity::new(concurrency, &config, Arc::clone(&room)),
            room,
        )
    }

    fn starts(reserved: &mut Reserved) -> (usize, usize) {
        let (mut now, mut ahead) = (0, 0);
        while let Some((start, _outcome)) = reserved.next() {
            match start {
                Start::Now(_) => now += 1,
                Start::Ahead(_) => ahead += 1,
            }
        }
        (now, ahead)
    }

    #[test]
    fn a_lane_claims_ahead_a_batch_at_most_four_slots_worth() {
        assert_eq!(claim_ahead_room(64, 256), 256);
        assert_eq!(claim_ahead_room(10, 256), 40);
        assert_eq!(claim_ahead_room(u32::MAX, 1_000), 1_000);
    }

    #[tokio::test]
    async fn a_claim_takes_its_loops_share_of_the_slots_and_no_more_before_handlers_are_short() {
        let (capacity, _) = lane(64, 10_000);
        let mut reserved = capacity.reserve(false).await.unwrap();
        assert_eq!(reserved.jobs(), 32);
        assert_eq!(starts(&mut reserved), (32, 0));
    }

    #[tokio::test]
    async fn while_handlers_are_short_a_claim_fills_a_whole_batch_with_jobs_claimed_ahead() {
        let (capacity, _) = lane(64, 10_000);
        capacity.record_handler_time(Duration::from_millis(1));
        let mut reserved = capacity.reserve(false).await.unwrap();
        assert_eq!(reserved.jobs(), 256);
        assert_eq!(starts(&mut reserved), (32, 224));
        // Long handlers bring the average above the bound: claims start only what they can run.
        for _ in 0..64 {
            capacity.record_handler_time(Duration::from_secs(1));
        }
        assert_eq!(capacity.reserve(false).await.unwrap().jobs(), 32);
    }

    #[tokio::test]
    async fn gated_jobs_are_never_claimed_ahead() {
        let (capacity, _) = lane(64, 10_000);
        capacity.record_handler_time(Duration::from_millis(1));
        assert_eq!(capacity.reserve(true).await.unwrap().jobs(), 32);
    }

    #[tokio::test]
    async fn room_beyond_the_unwritten_outcomes_goes_back_jobs_claimed_ahead_first() {
        let (capacity, unpersisted) = lane(64, 40);
        capacity.record_handler_time(Duration::from_millis(1));
        let held = Arc::clone(&unpersisted).try_acquire_many_owned(30).unwrap();
        let mut reserved = capacity.reserve(false).await.unwrap();
        assert_eq!(starts(&mut reserved), (10, 0));
        drop(reserved);
        assert_eq!(capacity.slots.available_permits(), 64);
        assert_eq!(capacity.ahead.available_permits(), 256);
        drop(held);
        assert_eq!(unpersisted.available_permits(), 40);
    }

    #[tokio::test]
    async fn a_lane_never_reserves_more_slots_than_it_has() {
        // Three slots, two loops: each claim aims at one slot (its share).
        let (capacity, _) = lane(3, 10_000);
        let mut held = Vec::new();
        for _ in 0..3 {
            let reserved = capacity.reserve(false).await.unwrap();
            assert_eq!(reserved.jobs(), 1);
            held.push(reserved);
        }
        assert!(!capacity.has_free_slot());
        // A fourth claim waits for a slot.
        assert!(capacity.reserve(false).now_or_never().is_none());
        held.pop();
        assert!(capacity.has_free_slot());
    }
}
