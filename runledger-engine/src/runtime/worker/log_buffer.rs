//! The worker's log buffer: handlers push lines through their `JobContext` without waiting,
//! and one task per worker hands them to the store in batches
//! (`postgres::jobs::store_job_logs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::core::jobs::{JobLogLine, JobLogWriter};
use crate::postgres::jobs::store_job_logs;

/// Most lines held in memory; lines written while the buffer is full are dropped and counted.
const LOG_BUFFER_CAPACITY: usize = 20_000;
/// How long the flusher lets lines gather after the first one arrives.
const LOG_GATHER: Duration = Duration::from_millis(50);

/// Lines handlers wrote that are not stored yet.
#[derive(Default)]
pub(super) struct LogBuffer {
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
    /// Every buffered line, emptying the buffer; reports in tracing the lines dropped since the
    /// last call because the buffer was full.
    fn take(&self) -> Vec<JobLogLine> {
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(dropped, "job log buffer was full; log lines were dropped");
        }
        std::mem::take(&mut *self.lines.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Stores every buffered line (best effort: see `store_job_logs`).
    pub(super) async fn flush(&self, pool: &PgPool) {
        store_job_logs(pool, &self.take()).await;
    }

    /// Flushes whenever lines arrive, until `stop` fires; then flushes what is left.
    pub(super) async fn run(&self, pool: PgPool, stop: CancellationToken) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::jobs::{JobId, JobLogLevel};

    #[test]
    fn a_full_buffer_drops_new_lines_and_keeps_the_first_ones() {
        let buffer = LogBuffer::default();
        let job = JobId::new_v7();
        for n in 0..=LOG_BUFFER_CAPACITY {
            buffer.write(JobLogLine::new(job, 1, JobLogLevel::Info, n.to_string()));
        }
        let lines = buffer.take();
        assert_eq!(lines.len(), LOG_BUFFER_CAPACITY);
        assert_eq!(lines[0].message, "0");
        assert_eq!(buffer.dropped.load(Ordering::Relaxed), 0);
        assert!(buffer.take().is_empty());
    }
}
