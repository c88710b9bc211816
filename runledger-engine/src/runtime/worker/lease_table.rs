//! The lease table: every lease this worker holds, from its claim until its outcome is written
//! (or the lease is lost). The heartbeat renews what it lists and marks its long runners
//! running; a lease the heartbeat finds gone stops its handler through the lease's token; the
//! jobs a hard stop gave up are kept for the shutdown report.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::core::jobs::JobId;

/// The hasher of the worker's maps and sets keyed by job id. A job is looked up in them five
/// times (claimed, started, returned, written, reported), and SipHash, the default, cost more
/// than the lookups themselves; foldhash folds the id's 16 bytes in two multiplications, and its
/// seed is still random per process.
pub(super) type JobIds = foldhash::fast::RandomState;

/// The leases a worker holds, and the jobs a hard stop gave up.
#[derive(Default)]
pub(super) struct LeaseTable {
    held: Mutex<HashMap<JobId, Lease, JobIds>>,
    aborted: Mutex<Vec<JobId>>,
}

/// A held lease, and how to stop its handler when the lease is lost.
struct Lease {
    attempt: i32,
    lost: CancellationToken,
    /// When its handler started, while it runs: `None` before (a job claimed ahead waits for a
    /// slot) and after (its outcome waits for the completer, which records the start itself).
    running_since: Option<Instant>,
    /// Whether `started_at` is stored (see [`LeaseTable::due_for_marking`]).
    marked: bool,
}

impl Lease {
    /// Whether the job's `started_at` should be stored now: its handler has been running for
    /// `after` and it is not marked yet. A job that is not running is left alone: marking a job
    /// whose outcome is being written races the completion for its row.
    fn due_for_marking(&self, after: Duration) -> bool {
        !self.marked
            && self
                .running_since
                .is_some_and(|since| since.elapsed() >= after)
    }
}

impl LeaseTable {
    /// Holds the lease of a claimed job; the token fires if the heartbeat finds it lost.
    pub(super) fn hold(&self, job_id: JobId, attempt: i32) -> CancellationToken {
        let lost = CancellationToken::new();
        self.held().insert(
            job_id,
            Lease {
                attempt,
                lost: lost.clone(),
                running_since: None,
                marked: false,
            },
        );
        lost
    }

    /// Notes whether the handler of a held job is running.
    pub(super) fn set_running(&self, job_id: JobId, running: bool) {
        if let Some(lease) = self.held().get_mut(&job_id) {
            lease.running_since = running.then(Instant::now);
        }
    }

    /// Forgets a lease whose outcome is written, or whose loss is reported.
    pub(super) fn release(&self, job_id: JobId) {
        self.held().remove(&job_id);
    }

    /// Forgets a lease whose job the hard stop gave up (its handler dropped, or never started),
    /// and keeps the job for the shutdown report; the reaper retries it.
    pub(super) fn abort(&self, job_id: JobId) {
        self.release(job_id);
        lock(&self.aborted).push(job_id);
    }

    /// The jobs given up so far, emptying the list.
    pub(super) fn take_aborted(&self) -> Vec<JobId> {
        std::mem::take(&mut *lock(&self.aborted))
    }

    /// Every held lease.
    pub(super) fn leases(&self) -> Vec<(JobId, i32)> {
        self.held()
            .iter()
            .map(|(id, lease)| (*id, lease.attempt))
            .collect()
    }

    /// The leases whose handler has been running for `after` and whose start is not stored yet.
    pub(super) fn due_for_marking(&self, after: Duration) -> Vec<(JobId, i32)> {
        self.held()
            .iter()
            .filter(|(_, lease)| lease.due_for_marking(after))
            .map(|(id, lease)| (*id, lease.attempt))
            .collect()
    }

    /// Notes that the start of these leases is stored.
    pub(super) fn marked(&self, leases: &[(JobId, i32)]) {
        let mut held = self.held();
        for (job_id, attempt) in leases {
            if let Some(lease) = held.get_mut(job_id)
                && lease.attempt == *attempt
            {
                lease.marked = true;
            }
        }
    }

    /// After a heartbeat that renewed `renewed` of `leases`: stops the handler of every other
    /// lease still held with the same attempt (gone, not just finished meanwhile) and forgets
    /// it. Returns how many were lost.
    pub(super) fn drop_lost(
        &self,
        leases: &[(JobId, i32)],
        renewed: &HashSet<JobId, JobIds>,
    ) -> usize {
        let mut held = self.held();
        let mut lost = 0;
        for (job_id, attempt) in leases {
            if renewed.contains(job_id) {
                continue;
            }
            if held
                .get(job_id)
                .is_some_and(|lease| lease.attempt == *attempt)
                && let Some(lease) = held.remove(job_id)
            {
                lease.lost.cancel();
                lost += 1;
            }
        }
        lost
    }

    fn held(&self) -> MutexGuard<'_, HashMap<JobId, Lease, JobIds>> {
        lock(&self.held)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    fn id() -> JobId {
        JobId(uuid::Uuid::now_v7())
    }

    /// `leases` in id order.
    fn sorted(mut leases: Vec<(JobId, i32)>) -> Vec<(JobId, i32)> {
        leases.sort();
        leases
    }

    #[test]
    fn a_held_lease_is_listed_until_released() {
        let table = LeaseTable::default();
        let (a, b) = (id(), id());
        table.hold(a, 1);
        table.hold(b, 3);
        assert_eq!(sorted(table.leases()), sorted(vec![(a, 1), (b, 3)]));
        table.release(a);
        assert_eq!(table.leases(), vec![(b, 3)]);
    }

    #[test]
    fn only_a_handler_running_past_the_threshold_is_due_for_marking_once() {
        let table = LeaseTable::default();
        let (waiting, running) = (id(), id());
        table.hold(waiting, 1);
        table.hold(running, 2);
        table.set_running(running, true);
        // Claimed, but waiting for a slot: never due, however long it waits.
        assert_eq!(table.due_for_marking(Duration::ZERO), vec![(running, 2)]);
        assert!(table.due_for_marking(Duration::from_secs(3_600)).is_empty());
        table.marked(&[(running, 2)]);
        assert!(table.due_for_marking(Duration::ZERO).is_empty());
        // Returned: its outcome waits for the completer, which records the start itself.
        let returned = id();
        table.hold(returned, 1);
        table.set_running(returned, true);
        table.set_running(returned, false);
        assert!(table.due_for_marking(Duration::ZERO).is_empty());
    }

    #[test]
    fn a_lease_the_heartbeat_did_not_renew_stops_its_handler_and_is_forgotten() {
        let table = LeaseTable::default();
        let (kept, gone, finished) = (id(), id(), id());
        let kept_token = table.hold(kept, 1);
        let gone_token = table.hold(gone, 1);
        let finished_token = table.hold(finished, 1);
        let sent = table.leases();
        // Written meanwhile, then claimed again under a new attempt: not lost.
        table.release(finished);
        table.hold(finished, 2);
        let renewed: HashSet<JobId, JobIds> = [kept].into_iter().collect();
        assert_eq!(table.drop_lost(&sent, &renewed), 1);
        assert!(gone_token.is_cancelled());
        assert!(!kept_token.is_cancelled());
        assert!(!finished_token.is_cancelled());
        assert_eq!(
            sorted(table.leases()),
            sorted(vec![(kept, 1), (finished, 2)])
        );
    }

    #[test]
    fn aborted_jobs_are_reported_once_and_no_longer_held() {
        let table = LeaseTable::default();
        let job = id();
        table.hold(job, 1);
        table.abort(job);
        assert!(table.leases().is_empty());
        assert_eq!(table.take_aborted(), vec![job]);
        assert!(table.take_aborted().is_empty());
    }

    /// Ids made in one millisecond differ only in their counter and random bits: their hashes
    /// must differ, and spread over the bits a map takes its buckets from (the low ones) and its
    /// tags from (the high seven).
    #[test]
    fn job_ids_made_together_hash_apart() {
        let ids: Vec<JobId> = (0..4096).map(|_| id()).collect();
        let state = JobIds::default();
        let hashes: Vec<u64> = ids.iter().map(|id| state.hash_one(id)).collect();
        assert_eq!(hashes.iter().collect::<HashSet<_>>().len(), ids.len());
        let low: HashSet<u64> = hashes.iter().map(|h| h & 0xFFF).collect();
        let tags: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(low.len() > 2_000, "{} of 4096 low buckets", low.len());
        assert_eq!(tags.len(), 128);
    }
}
