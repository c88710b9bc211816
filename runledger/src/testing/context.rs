//! Contexts for calling a handler directly, with the prerequisite outputs a test chooses.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::JobContext;
use crate::engine::core::jobs::{
    JobContext as EngineContext, JobId, JobType, StepOutputError, StepOutputReader, StepOutputs,
    WorkflowRunId, WorkflowStepId,
};
use crate::engine::core::prelude::async_trait;
use crate::{Step, WorkflowStep};

/// Builds the [`JobContext`] a `#[job]` fn receives, so that a step handler that reads its
/// prerequisites with `ctx.output(..)` runs as a plain async fn call, without a database.
///
/// Reads of steps given with [`with_output`](Self::with_output) return those values; steps
/// given with [`without_output`](Self::without_output) read as "no output" (an
/// `#[after_terminal]` prerequisite that failed); any other step fails with
/// `workflow.not_a_prerequisite`, as it would in a run.
///
/// ```
/// use runledger::prelude::*;
/// use runledger::testing::TestContext;
///
/// #[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
/// #[job] async fn score(ctx: JobContext) -> Result<usize, JobError> {
///     Ok(ctx.output(Research::CRAWL).await?.len())
/// }
///
/// #[workflow(name = "research")]
/// struct Research {
///     crawl: Crawl,
///     #[after(crawl)]
///     #[result]
///     score: Score,
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let ctx = TestContext::for_job::<Score>()
///     .with_output(Research::CRAWL, "<html>".to_owned())
///     .build();
/// assert_eq!(score(ctx).await.unwrap(), 6);
/// # });
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct TestContext {
    job_type: &'static str,
    attempt: i32,
    max_attempts: i32,
    organization_id: Option<uuid::Uuid>,
    outputs: HashMap<&'static str, Option<Value>>,
}

impl Default for TestContext {
    fn default() -> Self {
        Self::new()
    }
}

impl TestContext {
    /// A context for job type `test`, attempt 1 of 1, no organization, no prerequisites.
    pub fn new() -> Self {
        Self {
            job_type: "test",
            attempt: 1,
            max_attempts: 1,
            organization_id: None,
            outputs: HashMap::new(),
        }
    }

    /// A context for job `J` (its type name and its configured `max_attempts`).
    pub fn for_job<J: crate::Job>() -> Self {
        Self {
            job_type: J::NAME,
            max_attempts: J::DEFAULTS.max_attempts.unwrap_or(1),
            ..Self::new()
        }
    }

    /// Makes `step` a prerequisite whose stored output is `value`.
    ///
    /// # Panics
    ///
    /// When `value` does not serialize to JSON (a map with non-string keys, for instance).
    pub fn with_output<W, S>(mut self, step: Step<W, S>, value: S::Output) -> Self
    where
        S: WorkflowStep,
        S::Output: Serialize,
    {
        let value = match serde_json::to_value(value) {
            Ok(value) => value,
            Err(err) => panic!(
                "the output for step `{}` does not serialize: {err}",
                step.key()
            ),
        };
        self.outputs.insert(step.key(), Some(value));
        self
    }

    /// Makes `step` a prerequisite that stored no output (it failed, or it is an
    /// `#[after_terminal]` prerequisite that did not succeed): `ctx.try_output` reads `None`.
    pub fn without_output<W, S>(mut self, step: Step<W, S>) -> Self {
        self.outputs.insert(step.key(), None);
        self
    }

    /// Which attempt this is, and of how many (`ctx.attempt`, `ctx.is_last_attempt()`).
    pub fn attempt(mut self, attempt: i32, max_attempts: i32) -> Self {
        self.attempt = attempt;
        self.max_attempts = max_attempts;
        self
    }

    /// The organization the job belongs to.
    pub fn organization(mut self, organization_id: uuid::Uuid) -> Self {
        self.organization_id = Some(organization_id);
        self
    }

    /// The context to pass to the handler.
    pub fn build(self) -> JobContext {
        let mut inner = EngineContext::new(
            JobId::new_v7(),
            JobType::new(self.job_type),
            self.attempt,
            self.max_attempts,
            "test",
        );
        inner.organization_id = self.organization_id;
        if !self.outputs.is_empty() {
            inner.workflow_run_id = Some(WorkflowRunId::new_v7());
            inner.workflow_step_id = Some(WorkflowStepId::new_v7());
            inner.step_outputs = Some(StepOutputs(Arc::new(InjectedOutputs(self.outputs))));
        }
        JobContext::new(inner)
    }
}

impl From<TestContext> for JobContext {
    fn from(context: TestContext) -> Self {
        context.build()
    }
}

/// Prerequisite outputs chosen by the test.
struct InjectedOutputs(HashMap<&'static str, Option<Value>>);

#[async_trait]
impl StepOutputReader for InjectedOutputs {
    async fn prerequisite_output(&self, step_key: &str) -> Result<Option<Value>, StepOutputError> {
        self.0
            .get(step_key)
            .cloned()
            .ok_or_else(|| StepOutputError {
                code: "workflow.not_a_prerequisite",
                message: format!(
                    "step `{step_key}` is not a prerequisite of this step in the test context"
                ),
            })
    }
}
