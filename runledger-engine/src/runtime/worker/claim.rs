//! The claim loops: claim up to the free capacity, spawn a task per job, claim again at once
//! while batches come back full, otherwise wait for a notification or the poll interval.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Backoff, Finished, Inner, JobTasks};
use crate::postgres::jobs::{ClaimedJob, claim_jobs};

/// One claim loop. Several share the worker's capacity.
pub(super) struct Claimer {
    pub(super) inner: Arc<Inner>,
    pub(super) capacity: Arc<Semaphore>,
    pub(super) wake: watch::Receiver<u64>,
    pub(super) jobs: JobTasks,
    pub(super) finished: mpsc::UnboundedSender<Finished>,
    pub(super) hard_stop: CancellationToken,
}

impl Claimer {
    pub(super) async fn run(mut self, shutdown: CancellationToken) {
        let config = &self.inner.config;
        let mut backoff = Backoff::default();
        while !shutdown.is_cancelled() {
            // Reserve capacity first so concurrent claim loops never overshoot the limit.
            let want = self
                .capacity
                .available_permits()
                .clamp(1, config.claim_batch_size as usize);
            let permits = tokio::select! {
                permits = Arc::clone(&self.capacity).acquire_many_owned(want as u32) => permits,
                () = shutdown.cancelled() => break,
            };
            let Ok(mut permits) = permits else {
                break;
            };
            let claimed = match claim_jobs(&self.inner.pool, &self.inner.claim_request(want as i64))
                .await
            {
                Ok(claimed) => {
                    backoff.reset();
                    claimed
                }
                Err(err) => {
                    drop(permits);
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "claim failed; backing off");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = shutdown.cancelled() => break,
                    }
                    continue;
                }
            };
            let full = claimed.len() == want;
            for job in claimed {
                let Some(permit) = permits.split(1) else {
                    break;
                };
                self.spawn_job(job, permit);
            }
            drop(permits);
            if full {
                continue;
            }
            tokio::select! {
                changed = self.wake.changed() => {
                    if changed.is_err() {
                        // The listener is gone; fall back to polling only.
                        tokio::select! {
                            () = tokio::time::sleep(config.poll_interval) => {}
                            () = shutdown.cancelled() => break,
                        }
                    }
                }
                () = tokio::time::sleep(config.poll_interval) => {}
                () = shutdown.cancelled() => break,
            }
        }
    }

    fn spawn_job(&self, job: ClaimedJob, permit: OwnedSemaphorePermit) {
        let lost = self.inner.track(&job);
        let span = tracing::info_span!(
            "runledger.job",
            job.id = %job.id,
            job.r#type = %job.job_type,
            job.attempt = job.attempt_number,
        );
        let inner = Arc::clone(&self.inner);
        let finished = self.finished.clone();
        let hard_stop = self.hard_stop.clone();
        self.jobs.spawn(
            async move {
                if let Some(mut done) = inner.execute(job, lost, hard_stop).await {
                    done.permit = Some(permit);
                    // The completer outlives every job task; a send error means it is gone.
                    let _ = finished.send(done);
                }
            }
            .instrument(span),
        );
    }
}
