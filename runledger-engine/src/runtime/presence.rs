//! Worker presence: a supervisor's row in `runledger.worker_presence`, written when it starts
//! and every [`PRESENCE_INTERVAL`] after, and deleted when it stops, so that
//! [`explain_job`](crate::postgres::jobs::explain_job) can say when no live worker serves a job.
//! A process that dies leaves its row behind; the row stops counting once it is older than
//! [`PRESENCE_TTL`].

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::postgres::jobs::{PRESENCE_TTL, WorkerPresence, forget_worker, record_worker};
use crate::runtime::error::RuntimeLoopExit;

/// Pause between two writes of a worker's presence: a row outlives two missed writes.
const PRESENCE_INTERVAL: Duration = Duration::from_secs(PRESENCE_TTL.as_secs() / 3);

/// Keeps one worker's presence row fresh.
#[derive(Debug)]
pub(crate) struct Presence {
    pool: PgPool,
    worker: WorkerPresence,
}

impl Presence {
    pub(crate) fn new(pool: PgPool, worker: WorkerPresence) -> Self {
        Self { pool, worker }
    }

    /// Writes the row every interval until `shutdown` fires, then deletes it. A failed write
    /// is logged and the next one tries again: presence is advice for operators, never a
    /// reason to stop working.
    pub(crate) async fn run(self, shutdown: CancellationToken) -> RuntimeLoopExit {
        loop {
            if let Err(err) = record_worker(&self.pool, &self.worker).await {
                tracing::warn!(code = err.code(), error = %err.internal_message(), "worker presence write failed");
            }
            tokio::select! {
                () = tokio::time::sleep(PRESENCE_INTERVAL) => {}
                () = shutdown.cancelled() => break,
            }
        }
        if let Err(err) = forget_worker(&self.pool, &self.worker.worker_id).await {
            tracing::warn!(code = err.code(), error = %err.internal_message(), "worker presence delete failed");
        }
        RuntimeLoopExit::Shutdown
    }
}
