//! [`Continuation`]: a typed job ends an attempt by running again instead of finishing.

use std::time::Duration;

use serde::Serialize;

use crate::engine::core::jobs::{JobContinuation, JobProgressUpdate};
use crate::error::JobError;

/// Ends an attempt by running the same job again, now or after a delay, instead of finishing
/// it. The attempt closes as a success; the job row starts its next run with a fresh attempt
/// budget, and that run reads the checkpoint committed here with
/// [`JobContext::checkpoint`](crate::JobContext::checkpoint). The job's output type stays what
/// the finishing run returns: a continuation leaves the handler through the error channel
/// (`Err(continuation.into())`, or `?`) and never produces an output.
///
/// A workflow step may continue only when its step opted in (`#[step(continuation = true)]`,
/// or the engine's `WorkflowStepEnqueueBuilder::allow_continuation`); otherwise the attempt
/// fails with `workflow.continuation_not_allowed`. The step stays open meanwhile, so its
/// dependents wait for the run that finishes.
///
/// ```
/// use std::time::Duration;
/// use runledger::prelude::*;
/// use runledger::Continuation;
///
/// #[job(name = "pages.crawl")]
/// async fn crawl(ctx: JobContext, site: String) -> Result<u64, JobError> {
///     let cursor: u64 = ctx.checkpoint()?.unwrap_or(0);
///     let next = cursor + 100; // ... crawl one page of `site` ...
///     if next < 300 {
///         return Err(Continuation::after(Duration::from_secs(1)).checkpoint(&next).into());
///     }
///     Ok(next)
/// }
/// # let _ = Crawl { site: String::new() };
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Continuation {
    inner: JobContinuation,
    /// The checkpoint could not be serialized; the attempt fails with this instead.
    refused: Option<String>,
}

impl Continuation {
    /// The next run is claimable at once.
    pub fn now() -> Self {
        Self::after(Duration::ZERO)
    }

    /// The next run is claimable after `delay`.
    pub fn after(delay: Duration) -> Self {
        Self {
            inner: JobContinuation::after(delay),
            refused: None,
        }
    }

    /// Commits `checkpoint` (stored as JSON) for the next run; without one the previous
    /// checkpoint stays. A value that does not serialize fails the attempt with
    /// `job.invalid_checkpoint`.
    pub fn checkpoint<T: Serialize + ?Sized>(mut self, checkpoint: &T) -> Self {
        match serde_json::to_value(checkpoint) {
            Ok(value) => self.inner = self.inner.checkpoint(value),
            Err(err) => self.refused = Some(err.to_string()),
        }
        self
    }

    /// Stores `progress` as the job's progress with the continuation.
    pub fn progress(mut self, progress: JobProgressUpdate) -> Self {
        self.inner = self.inner.progress(progress);
        self
    }
}

impl From<Continuation> for JobError {
    fn from(continuation: Continuation) -> Self {
        match continuation.refused {
            Some(problem) => JobError::coded_terminal(
                "job.invalid_checkpoint",
                format!("the checkpoint could not be serialized: {problem}"),
            ),
            None => JobError::continuing(continuation.inner),
        }
    }
}
