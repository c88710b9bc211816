//! Dynamic fan-out: a [`FanOut<J>`] step of a workflow is filled at run time by another step
//! with any number of `J` jobs ([`JobContext::fan_out`]); its output, which later steps read, is
//! the `Vec` of their outputs.
//!
//! Over the engine: a `FanOut` field is an external step (a gate) of the run. `fan_out` appends,
//! in one idempotent `append_workflow_steps`, the children (`{key}/0`, `{key}/1`, ...), which
//! start once the calling step succeeds, and a join step (`{key}/join`, job type
//! [`FAN_IN_JOB_TYPE`]) that runs once every child has finished: it completes the gate with the
//! children's outputs in order, or fails it with `workflow.fan_out_failed` when a child did not
//! succeed (so `#[after]` dependents are canceled and `#[after_terminal]` ones run).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::context::{JobContext, context_error};
use crate::engine::core::jobs::{
    JobCompletion, JobContext as EngineContext, JobFailure, JobType, StepKey,
    WorkflowDependencyCondition, WorkflowStepDependency, WorkflowStepEnqueue, WorkflowStepStatus,
};
use crate::engine::core::prelude::async_trait;
use crate::engine::postgres::jobs::{
    CompleteExternalWorkflowStepInput, complete_external_workflow_step,
};
use crate::engine::runtime::registry::JobHandler;
use crate::error::JobError;
use crate::job::Job;
use crate::step::{Step, StepKind, WorkflowStep};

/// The job type of the join step that collects a fan-out's outputs; every worker's catalog
/// registers its handler.
pub(crate) const FAN_IN_JOB_TYPE: &str = "runledger.fan_in";

/// Children whose outputs the join step reads per statement.
const FAN_IN_PAGE: usize = 1_000;

/// The handler of [`FAN_IN_JOB_TYPE`].
pub(crate) fn fan_in_handler(pool: PgPool) -> std::sync::Arc<dyn JobHandler> {
    std::sync::Arc::new(FanInHandler::new(pool))
}

/// A workflow step filled at run time with any number of `J` jobs, chosen by another step of the
/// run with [`JobContext::fan_out`]; its output is the `Vec` of their outputs, in the order they
/// were given, which later steps read as `#[output(W::FIELD)] outputs: Vec<J::Output>`.
///
/// Declare the step that fans out as the `FanOut`'s `#[after(..)]` prerequisite: the children
/// start once it succeeds, and if it fails the `FanOut` is canceled with it. When a child fails
/// for good, the `FanOut` fails with `workflow.fan_out_failed`.
///
/// ```
/// use runledger::prelude::*;
///
/// #[job] async fn fetch(url: String) -> Result<usize, JobError> { Ok(url.len()) }
///
/// #[job]
/// async fn list(ctx: JobContext, site: String) -> Result<usize, JobError> {
///     let pages: Vec<Fetch> = (0..3).map(|n| Fetch { url: format!("{site}/{n}") }).collect();
///     ctx.fan_out(Crawl::PAGES, pages).await
/// }
///
/// #[job]
/// async fn total(#[output(Crawl::PAGES)] sizes: Vec<usize>) -> Result<usize, JobError> {
///     Ok(sizes.iter().sum())
/// }
///
/// #[workflow(name = "docs.crawl")]
/// struct Crawl {
///     list: List,
///     #[after(list)]
///     pages: FanOut<Fetch>,
///     #[after(pages)]
///     #[result]
///     total: Total,
/// }
/// # let _ = Crawl { list: List { site: String::new() }, pages: FanOut::new(), total: Total {} };
/// ```
pub struct FanOut<J> {
    _children: PhantomData<fn() -> J>,
}

impl<J> FanOut<J> {
    /// A fan-out, empty until a step of the run fills it.
    pub const fn new() -> Self {
        Self {
            _children: PhantomData,
        }
    }
}

impl<J> Default for FanOut<J> {
    fn default() -> Self {
        Self::new()
    }
}

impl<J> Clone for FanOut<J> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<J> fmt::Debug for FanOut<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FanOut")
    }
}

/// Kind marker of a [`Step`] that is a [`FanOut`]: neither completed from outside nor run as
/// one job.
#[derive(Debug)]
pub enum FanOutStep {}

impl crate::step::sealed::Sealed for FanOutStep {}
impl StepKind for FanOutStep {}

impl<J: Job> WorkflowStep for FanOut<J> {
    type Output = Vec<J::Output>;
    type Kind = FanOutStep;
}

impl JobContext {
    /// Fills the [`FanOut`] step `step` of this step's workflow run with `children`: each runs
    /// as its own step once this step succeeds, and the `FanOut`'s output is the `Vec` of their
    /// outputs, in this order. Returns how many children were added.
    ///
    /// Idempotent for a retried attempt: the same children again are accepted (nothing is added
    /// twice); other children fail with `workflow.append_conflicting_retry`, as does filling a
    /// `FanOut` twice. Fails with `workflow.not_a_workflow_step` outside a workflow step and
    /// `workflow.append_run_finished` once the run has finished.
    pub async fn fan_out<W, J, I>(
        &self,
        step: Step<W, FanOut<J>>,
        children: I,
    ) -> Result<usize, JobError>
    where
        J: Job,
        I: IntoIterator<Item = J>,
    {
        let Some(own_key) = self.step_key() else {
            return Err(JobError::terminal("fan_out is called by a workflow step")
                .with_code("workflow.not_a_workflow_step"));
        };
        let key = step.key();
        let own = || WorkflowStepDependency {
            prerequisite: StepKey::from(own_key.to_owned()),
            condition: WorkflowDependencyCondition::Success,
        };
        let mut steps = Vec::new();
        for (index, child) in children.into_iter().enumerate() {
            let payload = serde_json::to_value(&child).map_err(|e| {
                JobError::terminal(format!("a child of `{key}` could not be serialized: {e}"))
                    .with_code("job.payload_invalid")
            })?;
            let mut enqueue = WorkflowStepEnqueue::job(
                StepKey::from(format!("{key}/{index}")),
                JobType::new(J::NAME),
                Cow::Owned(payload),
            );
            enqueue.dependencies.push(own());
            steps.push(enqueue);
        }
        let count = steps.len();
        let mut join = WorkflowStepEnqueue::job(
            StepKey::from(format!("{key}/join")),
            JobType::new(FAN_IN_JOB_TYPE),
            Cow::Owned(json!({ "fan_out": key, "children": count })),
        );
        join.dependencies.push(own());
        join.dependencies
            .extend(steps.iter().map(|child| WorkflowStepDependency {
                prerequisite: child.step_key.clone(),
                condition: WorkflowDependencyCondition::Terminal,
            }));
        steps.push(join);
        self.engine()
            .append_workflow_steps(&format!("fan_out:{key}"), steps)
            .await
            .map_err(|e| context_error(&e))?;
        Ok(count)
    }
}

/// Runs the join step of a fan-out: completes the `FanOut` gate with its children's outputs,
/// or fails it when one did not succeed.
struct FanInHandler {
    pool: PgPool,
}

impl FanInHandler {
    fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

#[async_trait]
impl JobHandler for FanInHandler {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(FAN_IN_JOB_TYPE)
    }

    async fn execute(
        &self,
        ctx: EngineContext,
        payload: Value,
    ) -> Result<JobCompletion, JobFailure> {
        let invalid = || {
            JobFailure::terminal(
                "job.payload_invalid",
                "a fan-in payload names its fan-out and how many children it has",
            )
        };
        let key = payload
            .get("fan_out")
            .and_then(Value::as_str)
            .ok_or_else(invalid)?;
        let children = payload
            .get("children")
            .and_then(Value::as_u64)
            .ok_or_else(invalid)?;
        let run_id = ctx.workflow_run_id.ok_or_else(|| {
            JobFailure::terminal(
                "workflow.not_a_workflow_step",
                "a fan-in runs as a workflow step",
            )
        })?;
        let mut outputs = Vec::new();
        let mut failed = 0;
        for first in (0..children).step_by(FAN_IN_PAGE) {
            let keys: Vec<String> = (first..children.min(first + FAN_IN_PAGE as u64))
                .map(|index| format!("{key}/{index}"))
                .collect();
            let page = ctx
                .prerequisite_outputs(&keys)
                .await
                .map_err(|e| JobFailure::retryable(e.code, e.message))?;
            for output in page {
                match output {
                    Some(output) => outputs.push(output),
                    None => failed += 1,
                }
            }
        }
        let output = Value::Array(outputs);
        let message = format!("{failed} of the {children} children of `{key}` did not succeed");
        let (status, error, output) = if failed == 0 {
            (WorkflowStepStatus::Succeeded, None, Some(&output))
        } else {
            (
                WorkflowStepStatus::Failed,
                Some(("workflow.fan_out_failed", message.as_str())),
                None,
            )
        };
        let input = CompleteExternalWorkflowStepInput {
            workflow_run_id: run_id,
            organization_id: ctx.organization_id,
            step_key: StepKey::new(key),
            terminal_status: status,
            status_reason: None,
            last_error_code: error.map(|(code, _)| code),
            last_error_message: error.map(|(_, message)| message),
            output,
        };
        complete_external_workflow_step(&self.pool, &input)
            .await
            .map_err(|e| JobFailure::retryable(e.code(), e.to_string()))?;
        Ok(JobCompletion::success())
    }
}
