//! The heartbeat: renews every lease of the worker in one statement per interval, and stops the
//! handlers whose lease is gone.

use std::collections::HashSet;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Inner, lock};
use crate::core::jobs::JobId;
use crate::postgres::jobs::heartbeat_jobs;

impl Inner {
    pub(super) async fn heartbeat_loop(self: Arc<Self>, stop: CancellationToken) {
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
}
