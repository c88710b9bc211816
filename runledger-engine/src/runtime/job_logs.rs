//! The worker's log buffer: handlers push lines through their `JobContext` without waiting,
//! and one task per worker stores them in batches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::core::jobs::{JobLogLine, JobLogWriter};
use crate::postgres::ErrorCategory;
use crate::postgres::jobs::append_job_logs;

/// Most lines held in memory; lines written while the buffer is full are dropped and counted.
pub(crate) const LOG_BUFFER_CAPACITY: usize = 20_000;
/// Most lines stored per statement.
const LOG_BATCH: usize = 1_000;
/// How long the flusher lets lines gather after the first one arrives.
const LOG_GATHER: Duration = Duration::from_millis(50);

#[derive(Default)]
pub(crate) struct LogBuffer {
    lines: Mutex<Vec<JobLogLine>>,
    dropped: AtomicU64,
    ready: Notify,
}

impl JobLogWriter for LogBuffer {
    fn write(&self, line: JobLogLine) {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() >= LOG_BUFFER_CAPACITY {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let first = lines.is_empty();
        lines.push(line);
        drop(lines);
        if first {
            self.ready.notify_one();
        }
    }
}

impl LogBuffer {
    fn take(&self) -> Vec<JobLogLine> {
        std::mem::take(&mut *self.lines.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Stores every buffered line. Logs are best effort: a batch the database cannot reach is
    /// reported in tracing and dropped rather than retried forever. `append_job_logs` makes
    /// every line storable, but should a batch still be refused for what it carries, its lines
    /// are stored one by one so that only the refused line is lost.
    pub(crate) async fn flush(&self, pool: &PgPool) {
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(dropped, "job log buffer was full; log lines were dropped");
        }
        let lines = self.take();
        for batch in lines.chunks(LOG_BATCH) {
            match append_job_logs(pool, batch).await {
                Ok(_) => {}
                Err(err) if err.category() == ErrorCategory::Validation => {
                    for line in batch {
                        if let Err(err) = append_job_logs(pool, std::slice::from_ref(line)).await {
                            tracing::warn!(code = err.code(), error = %err.internal_message(), job.id = %line.job_id, "a job log line was refused; dropped");
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), lines = batch.len(), "storing job log lines failed; dropped");
                }
            }
        }
    }

    /// Flushes whenever lines arrive, until `stop` fires; then flushes what is left.
    pub(crate) async fn run(&self, pool: PgPool, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = self.ready.notified() => {}
                () = stop.cancelled() => break,
            }
            tokio::select! {
                () = tokio::time::sleep(LOG_GATHER) => {}
                () = stop.cancelled() => {}
            }
            self.flush(&pool).await;
        }
        self.flush(&pool).await;
    }
}
