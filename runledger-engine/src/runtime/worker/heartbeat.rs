//! The heartbeat: renews every lease of the lease table in one statement per interval, and
//! stops the handlers whose lease is gone. Between heartbeats it marks running (`started_at`)
//! the jobs whose handler has run for [`MARK_RUNNING_AFTER`]: one statement per pass for the
//! jobs that are still running then, none at all for jobs that finish sooner, whose completion
//! records their lease time as their start (their handler started within the claim's round
//! trip). Only a handler that is running counts: a job claimed ahead and waiting for a slot, or
//! one whose outcome waits for the completer, is not marked (under load the completion of a
//! batch can wait longer than [`MARK_RUNNING_AFTER`], and marking its rows then made the two
//! statements wait for each other's row locks).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::WorkerConfig;
use super::lease_table::{JobIds, LeaseTable};
use crate::core::jobs::JobId;
use crate::postgres::Result;
use crate::postgres::jobs::{heartbeat_jobs, mark_jobs_running};

/// How long a handler runs before its job is marked running.
const MARK_RUNNING_AFTER: Duration = Duration::from_millis(100);

/// The statements the heartbeat sends, each fenced by the worker's leases.
#[async_trait::async_trait]
pub(super) trait LeaseStore: Send + Sync + 'static {
    /// Stores that the handlers of these leases started.
    async fn mark_running(&self, worker_id: &str, leases: &[(JobId, i32)]) -> Result<()>;

    /// Extends these leases by `lease_ttl`; returns the jobs whose lease was renewed.
    async fn renew(
        &self,
        worker_id: &str,
        leases: &[(JobId, i32)],
        lease_ttl: Duration,
    ) -> Result<Vec<JobId>>;
}

#[async_trait::async_trait]
impl LeaseStore for PgPool {
    async fn mark_running(&self, worker_id: &str, leases: &[(JobId, i32)]) -> Result<()> {
        mark_jobs_running(self, worker_id, leases).await.map(drop)
    }

    async fn renew(
        &self,
        worker_id: &str,
        leases: &[(JobId, i32)],
        lease_ttl: Duration,
    ) -> Result<Vec<JobId>> {
        heartbeat_jobs(self, worker_id, leases, lease_ttl).await
    }
}

/// Keeps the lease table's leases alive.
pub(super) struct Heartbeat<S> {
    store: S,
    leases: Arc<LeaseTable>,
    worker_id: String,
    lease_ttl: Duration,
    interval: Duration,
}

impl<S: LeaseStore> Heartbeat<S> {
    pub(super) fn new(store: S, leases: Arc<LeaseTable>, config: &WorkerConfig) -> Self {
        Self {
            store,
            leases,
            worker_id: config.worker_id.clone(),
            lease_ttl: config.lease_ttl,
            interval: config.heartbeat_interval,
        }
    }

    /// Marks long runners every [`MARK_RUNNING_AFTER`] (or heartbeat interval, if shorter) and
    /// renews the leases every heartbeat interval, until `stop` fires.
    pub(super) async fn run(self, stop: CancellationToken) {
        let tick = MARK_RUNNING_AFTER.min(self.interval);
        let mut last_heartbeat = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = stop.cancelled() => return,
            }
            self.mark_long_runners().await;
            if last_heartbeat.elapsed() < self.interval {
                continue;
            }
            last_heartbeat = Instant::now();
            self.renew().await;
        }
    }

    /// Marks running the held jobs whose handler started at least [`MARK_RUNNING_AFTER`] ago
    /// and is not marked yet. A failure costs the handlers nothing: the next pass tries again.
    async fn mark_long_runners(&self) {
        let due = self.leases.due_for_marking(MARK_RUNNING_AFTER);
        if due.is_empty() {
            return;
        }
        match self.store.mark_running(&self.worker_id, &due).await {
            Ok(()) => self.leases.marked(&due),
            Err(err) => {
                tracing::warn!(code = err.code(), error = %err.internal_message(), jobs = due.len(), "marking jobs running failed");
            }
        }
    }

    /// Renews every held lease in one statement and stops the handlers whose lease is gone.
    /// Returns how many were lost.
    pub(super) async fn renew(&self) -> usize {
        let leases = self.leases.leases();
        if leases.is_empty() {
            return 0;
        }
        match self
            .store
            .renew(&self.worker_id, &leases, self.lease_ttl)
            .await
        {
            Ok(renewed) => {
                let renewed: HashSet<JobId, JobIds> = renewed.into_iter().collect();
                self.leases.drop_lost(&leases, &renewed)
            }
            Err(err) => {
                tracing::warn!(code = err.code(), error = %err.internal_message(), "heartbeat failed");
                0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::runtime::config::JobsConfig;

    /// A store whose leases of `gone` are no longer held, and that fails while `down`.
    #[derive(Default)]
    struct FakeStore {
        gone: Vec<JobId>,
        down: bool,
        renewals: Mutex<Vec<usize>>,
    }

    #[async_trait::async_trait]
    impl LeaseStore for FakeStore {
        async fn mark_running(&self, _: &str, _: &[(JobId, i32)]) -> Result<()> {
            Ok(())
        }

        async fn renew(&self, _: &str, leases: &[(JobId, i32)], _: Duration) -> Result<Vec<JobId>> {
            self.renewals.lock().unwrap().push(leases.len());
            if self.down {
                return Err(sqlx::Error::PoolTimedOut.into());
            }
            Ok(leases
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| !self.gone.contains(id))
                .collect())
        }
    }

    fn heartbeat(store: FakeStore) -> Heartbeat<FakeStore> {
        let config = WorkerConfig::from_jobs_config(&JobsConfig::default());
        Heartbeat::new(store, Arc::new(LeaseTable::default()), &config)
    }

    #[tokio::test]
    async fn one_statement_renews_every_lease_and_a_lost_one_stops_its_handler() {
        let (kept, gone) = (JobId::new_v7(), JobId::new_v7());
        let heartbeat = heartbeat(FakeStore {
            gone: vec![gone],
            ..FakeStore::default()
        });
        let kept_token = heartbeat.leases.hold(kept, 1);
        let gone_token = heartbeat.leases.hold(gone, 1);
        assert_eq!(heartbeat.renew().await, 1);
        assert_eq!(*heartbeat.store.renewals.lock().unwrap(), [2]);
        assert!(gone_token.is_cancelled());
        assert!(!kept_token.is_cancelled());
        assert_eq!(heartbeat.leases.leases(), vec![(kept, 1)]);
    }

    #[tokio::test]
    async fn a_heartbeat_that_fails_stops_no_handler_and_an_empty_table_sends_nothing() {
        let heartbeat = heartbeat(FakeStore {
            down: true,
            ..FakeStore::default()
        });
        assert_eq!(heartbeat.renew().await, 0);
        assert!(heartbeat.store.renewals.lock().unwrap().is_empty());
        let token = heartbeat.leases.hold(JobId::new_v7(), 1);
        assert_eq!(heartbeat.renew().await, 0);
        assert!(!token.is_cancelled());
        assert_eq!(heartbeat.leases.leases().len(), 1);
    }
}
