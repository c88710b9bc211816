//! The handler's [`JobContext`]: the engine's context plus typed reads of prerequisite
//! outputs.

use std::ops::Deref;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::engine::core::jobs::{self as engine_jobs, JobId, JobType};
use crate::error::JobError;
use crate::output;
use crate::step::{Step, WorkflowStep};

/// What a typed handler receives: the engine's context (ids, attempt, worker, workflow
/// fields, through `Deref`) plus typed reads of prerequisite outputs.
///
/// ```
/// use runledger::JobContext;
///
/// let ctx = JobContext::for_tests("emails.send");
/// assert_eq!(ctx.attempt, 1);
/// assert_eq!(ctx.job_type.as_str(), "emails.send");
/// ```
#[derive(Debug, Clone)]
pub struct JobContext {
    inner: engine_jobs::JobContext,
}

impl JobContext {
    /// Wraps the engine's context.
    pub fn new(inner: engine_jobs::JobContext) -> Self {
        Self { inner }
    }

    /// A context for calling a `#[job]` fn directly in a unit test: a fresh id, attempt 1 of 1,
    /// worker `test`, not a workflow step.
    pub fn for_tests(job_type: &'static str) -> Self {
        Self::new(engine_jobs::JobContext::new(
            JobId::new_v7(),
            JobType::new(job_type),
            1,
            1,
            "test",
        ))
    }

    /// The engine's context.
    pub fn engine(&self) -> &engine_jobs::JobContext {
        &self.inner
    }

    /// The typed output of `step`, a prerequisite of this workflow step.
    ///
    /// Fails terminally with `workflow.not_a_prerequisite` when `step` is not one of this
    /// step's prerequisites, `workflow.not_a_workflow_step` outside a workflow, and
    /// `job.output_invalid` when the stored output does not match `T` (including a missing
    /// output, e.g. of an `#[after_terminal]` prerequisite that failed: use
    /// [`try_output`](Self::try_output) there).
    ///
    /// ```no_run
    /// use runledger::prelude::*;
    ///
    /// #[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
    /// #[job] async fn score(ctx: JobContext) -> Result<usize, JobError> {
    ///     let page: String = ctx.output(Research::CRAWL).await?;
    ///     Ok(page.len())
    /// }
    ///
    /// #[workflow(name = "research")]
    /// struct Research {
    ///     crawl: Crawl,
    ///     #[after(crawl)]
    ///     #[result]
    ///     score: Score,
    /// }
    /// ```
    pub async fn output<W, S>(&self, step: Step<W, S>) -> Result<S::Output, JobError>
    where
        S: WorkflowStep,
        S::Output: DeserializeOwned,
    {
        let stored = self.stored_output(step.key()).await?;
        output::decode(step.key(), stored)
            .map_err(|e| JobError::coded_terminal("job.output_invalid", e))
    }

    /// Like [`output`](Self::output), but `None` when the prerequisite stored no output (it
    /// did not succeed).
    pub async fn try_output<W, S>(&self, step: Step<W, S>) -> Result<Option<S::Output>, JobError>
    where
        S: WorkflowStep,
        S::Output: DeserializeOwned,
    {
        match self.stored_output(step.key()).await? {
            None => Ok(None),
            stored => output::decode(step.key(), stored)
                .map(Some)
                .map_err(|e| JobError::coded_terminal("job.output_invalid", e)),
        }
    }

    async fn stored_output(&self, key: &str) -> Result<Option<Value>, JobError> {
        self.inner.prerequisite_output(key).await.map_err(|e| {
            let error = if e.code.starts_with("workflow.") {
                JobError::terminal(&e.message)
            } else {
                JobError::retryable(&e.message)
            };
            error.with_code(e.code)
        })
    }
}

impl Deref for JobContext {
    type Target = engine_jobs::JobContext;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl From<engine_jobs::JobContext> for JobContext {
    fn from(inner: engine_jobs::JobContext) -> Self {
        Self::new(inner)
    }
}
