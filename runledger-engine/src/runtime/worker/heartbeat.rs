//! The heartbeat: renews every lease of the worker in one statement per interval, and stops the
//! handlers whose lease is gone. Between heartbeats it marks running (`started_at`) the jobs
//! whose handler has run for [`MARK_RUNNING_AFTER`]: one statement per pass for the jobs that
//! are still running then, none at all for jobs that finish sooner, whose completion records
//! their lease time as their start (their handler started within the claim's round trip).
//! Only a handler that is running counts: a job claimed ahead and waiting for a slot, or one
//! whose outcome waits for the completer, is not marked (under load the completion of a batch
//! can wait longer than [`MARK_RUNNING_AFTER`], and marking its rows then made the two
//! statements wait for each other's row locks).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{Inner, lock};
use crate::core::jobs::JobId;
use crate::postgres::jobs::{heartbeat_jobs, mark_jobs_running};

/// How long a handler runs before its job is marked running.
pub(super) const MARK_RUNNING_AFTER: Duration = Duration::from_millis(100);

impl Inner {
    pub(super) async fn heartbeat_loop(self: Arc<Self>, stop: CancellationToken) {
        let tick = MARK_RUNNING_AFTER.min(self.config.heartbeat_interval);
        let mut last_heartbeat = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = stop.cancelled() => return,
            }
            self.mark_long_runners().await;
            if last_heartbeat.elapsed() < self.config.heartbeat_interval {
                continue;
            }
            last_heartbeat = Instant::now();
            self.heartbeat().await;
        }
    }

    /// Marks running the tracked jobs whose handler started at least [`MARK_RUNNING_AFTER`] ago
    /// and is not marked yet. A failure costs the handlers nothing: the next pass tries again.
    async fn mark_long_runners(&self) {
        let due: Vec<(JobId, i32)> = lock(&self.running)
            .iter()
            .filter(|(_, lease)| lease.due_for_marking(MARK_RUNNING_AFTER))
            .map(|(id, lease)| (*id, lease.attempt))
            .collect();
        if due.is_empty() {
            return;
        }
        match mark_jobs_running(&self.pool, &self.config.worker_id, &due).await {
            Ok(_) => {
                let mut running = lock(&self.running);
                for (job_id, attempt) in due {
                    if let Some(lease) = running.get_mut(&job_id)
                        && lease.attempt == attempt
                    {
                        lease.marked = true;
                    }
                }
            }
            Err(err) => {
                tracing::warn!(code = err.code(), error = %err.internal_message(), jobs = due.len(), "marking jobs running failed");
            }
        }
    }

    /// Renews every tracked lease in one statement and stops the handlers whose lease is gone.
    async fn heartbeat(&self) {
        let leases: Vec<(JobId, i32)> = lock(&self.running)
            .iter()
            .map(|(id, lease)| (*id, lease.attempt))
            .collect();
        if leases.is_empty() {
            return;
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tokio_util::sync::CancellationToken;

    use super::super::RunningLease;
    use super::MARK_RUNNING_AFTER;

    fn lease(running_for: Option<Duration>, marked: bool) -> RunningLease {
        RunningLease {
            attempt: 1,
            lost: CancellationToken::new(),
            running_since: running_for.map(|d| Instant::now() - d),
            marked,
        }
    }

    #[test]
    fn only_a_handler_running_past_the_threshold_is_marked_once() {
        let long = MARK_RUNNING_AFTER * 3;
        assert!(lease(Some(long), false).due_for_marking(MARK_RUNNING_AFTER));
        assert!(!lease(Some(long), true).due_for_marking(MARK_RUNNING_AFTER));
        assert!(!lease(Some(Duration::ZERO), false).due_for_marking(MARK_RUNNING_AFTER));
        // Claimed long ago, but waiting for a slot or for its outcome to be written.
        assert!(!lease(None, false).due_for_marking(MARK_RUNNING_AFTER));
    }
}
