//! Job logs: lines a handler writes through its [`JobContext`](super::JobContext), handed to a
//! cheap, non-blocking sink that the runtime persists in batches.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{JobId, JobLogLevel};

/// Longest stored log message, in characters; longer messages are cut.
pub const MAX_LOG_MESSAGE_CHARS: usize = 8_192;

/// One log line written by a handler.
///
/// ```
/// use runledger_engine::core::jobs::{JobId, JobLogLevel, JobLogLine};
///
/// let line = JobLogLine::new(JobId::new_v7(), 1, JobLogLevel::Info, "fetched 3 pages");
/// assert_eq!(line.message, "fetched 3 pages");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobLogLine {
    /// The job.
    pub job_id: JobId,
    /// The attempt's fencing token (1, 2, … over the job's life), as in `job_attempts`.
    pub attempt: i32,
    /// Severity.
    pub level: JobLogLevel,
    /// The message, at most [`MAX_LOG_MESSAGE_CHARS`] characters.
    pub message: String,
    /// Structured fields (a JSON object; `{}` when there are none).
    pub fields: Value,
    /// When the handler wrote it.
    pub logged_at: DateTime<Utc>,
}

impl JobLogLine {
    /// A line without fields, stamped now; the message is cut to [`MAX_LOG_MESSAGE_CHARS`].
    pub fn new(
        job_id: JobId,
        attempt: i32,
        level: JobLogLevel,
        message: impl Into<String>,
    ) -> Self {
        let mut message = message.into();
        if let Some((cut, _)) = message.char_indices().nth(MAX_LOG_MESSAGE_CHARS) {
            message.truncate(cut);
        }
        Self {
            job_id,
            attempt,
            level,
            message,
            fields: Value::Object(serde_json::Map::new()),
            logged_at: Utc::now(),
        }
    }

    /// Attaches structured fields; anything but a JSON object is stored as `{"value": …}`.
    pub fn with_fields(mut self, fields: Value) -> Self {
        self.fields = match fields {
            Value::Object(_) => fields,
            Value::Null => Value::Object(serde_json::Map::new()),
            other => serde_json::json!({ "value": other }),
        };
        self
    }
}

/// Receives log lines from handlers. Implementations must return at once (buffer the line,
/// never wait for I/O): handlers call it on their own task.
pub trait JobLogWriter: Send + Sync + 'static {
    /// Accepts one line. It may be dropped when the implementation's buffer is full.
    fn write(&self, line: JobLogLine);
}

/// A shared [`JobLogWriter`], carried by a [`JobContext`](super::JobContext). Cloning it is one
/// reference-count increment.
#[derive(Clone)]
pub struct JobLogSink(pub Arc<dyn JobLogWriter>);

impl std::fmt::Debug for JobLogSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobLogSink")
    }
}
