//! Typed workflows: the [`Workflow`] trait that `#[workflow]` implements, gates
//! ([`External`]), typed step references ([`Step`]) and [`WorkflowHandle`].

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::{Acquire, PgPool, Postgres};
use uuid::Uuid;

use crate::engine::core::jobs::{
    JobType, StepKey, WorkflowDependencyCondition, WorkflowRunEnqueueBuilder, WorkflowRunId,
    WorkflowRunStatus, WorkflowStepDependency, WorkflowStepEnqueue, WorkflowStepStatus,
    WorkflowType,
};
use crate::engine::postgres::jobs::{
    CompleteExternalWorkflowStepInput, ExternalStepCompletion, WorkflowRunHandle,
    WorkflowRunHandleError, WorkflowRunHandleScope, WorkflowRunRecord, WorkflowRunWaitOptions,
    cancel_workflow_run, complete_external_workflow_step, enqueue_workflow_run, get_workflow_run,
};
use crate::error::Error;
use crate::job::{Job, decode_output};

/// A workflow: a struct whose fields are its steps, annotated with `#[workflow]`.
///
/// The macro implements this trait, checks the DAG at compile time (unknown steps, cycles,
/// self and duplicate edges, several results), and adds one associated constant per step
/// (`Research::CRAWL`) for typed reads and gate completions. [`Output`](Self::Output) is the
/// output type of the `#[result]` step (`()` when none is declared).
///
/// ```no_run
/// use runledger::prelude::*;
///
/// #[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
/// #[job] async fn publish(ctx: JobContext) -> Result<bool, JobError> {
///     let approved: bool = ctx.output(Review::APPROVAL).await?;
///     Ok(approved)
/// }
///
/// #[workflow(name = "docs.review")]
/// struct Review {
///     crawl: Crawl,
///     #[after(crawl)]
///     approval: External<bool>,
///     #[after(approval)]
///     #[result]
///     publish: Publish,
/// }
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// let run = Review {
///     crawl: Crawl { url: "https://example.com".into() },
///     approval: External::new(),
///     publish: Publish {},
/// }
/// .enqueue(&pool)
/// .await?;
/// // Later, once `crawl` is done and the reviewer answered (completing a gate that is not
/// // waiting yet fails with `workflow.external_step_not_waiting`):
/// run.complete_gate(&pool, Review::APPROVAL, &true).await?;
/// let published: bool = run.result(&pool, Wait::up_to(std::time::Duration::from_secs(30))).await?;
/// # Ok(()) }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a Runledger workflow",
    label = "not a workflow",
    note = "annotate a struct whose fields are steps with `#[workflow]`"
)]
pub trait Workflow: Send + Sync + Sized + 'static {
    /// The workflow type stored on each run (`#[workflow(name = "...")]`).
    const NAME: &'static str;

    /// The step whose output is the run's result.
    const RESULT_STEP: Option<&'static str>;

    /// The run's typed result: the `#[result]` step's output.
    type Output: DeserializeOwned + Send + 'static;

    /// The steps of this run, in declaration order (generated).
    #[doc(hidden)]
    fn __steps(&self) -> Result<Vec<StepSpec>, Error>;

    /// Enqueues a run on a pool, a connection or inside the caller's transaction.
    fn enqueue<'c, A>(
        &self,
        executor: A,
    ) -> impl Future<Output = Result<WorkflowHandle<Self>, Error>> + Send
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        self.enqueue_with(executor, WorkflowOptions::new())
    }

    /// Enqueues a run with [`WorkflowOptions`] (idempotency key, organization, metadata).
    fn enqueue_with<'c, A>(
        &self,
        executor: A,
        options: WorkflowOptions,
    ) -> impl Future<Output = Result<WorkflowHandle<Self>, Error>> + Send
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        let steps = self.__steps();
        async move {
            let steps = steps?;
            let metadata = options
                .metadata
                .clone()
                .unwrap_or_else(|| Value::Object(Default::default()));
            let mut builder =
                WorkflowRunEnqueueBuilder::new(WorkflowType::new(Self::NAME), &metadata);
            for spec in steps {
                builder = builder.step(spec.into_engine());
            }
            if let Some(result) = Self::RESULT_STEP {
                builder = builder.result_step(StepKey::new(result));
            }
            if let Some(key) = &options.idempotency_key {
                builder = builder.idempotency_key(key);
            }
            if let Some(org) = options.organization_id {
                builder = builder.organization_id(org);
            }
            let request = builder.build()?;
            let run = enqueue_workflow_run(executor, &request).await?;
            Ok(WorkflowHandle {
                id: run.id,
                organization_id: options.organization_id,
                created: run.created,
                _workflow: PhantomData,
            })
        }
    }
}

/// Options of one workflow enqueue.
///
/// ```
/// use runledger::WorkflowOptions;
///
/// let options = WorkflowOptions::new().idempotency_key("research:profile-42");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowOptions {
    idempotency_key: Option<String>,
    organization_id: Option<Uuid>,
    metadata: Option<Value>,
}

impl WorkflowOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deduplicates: the same key with the same request returns the first run; with another
    /// request it fails with `workflow.idempotency_conflict`.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The organization (tenant) that owns the run; handles are scoped to it.
    pub fn organization(mut self, organization_id: Uuid) -> Self {
        self.organization_id = Some(organization_id);
        self
    }

    /// Free-form run metadata (a JSON object).
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// A field type a workflow step can have: a `#[job]` payload or an [`External`] gate.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a workflow step",
    label = "neither a job payload nor a gate",
    note = "a step's type must be a payload struct generated by `#[job]` or `runledger::External<T>`"
)]
pub trait WorkflowStep: Send + Sync {
    /// What the step produces on success.
    type Output: DeserializeOwned + Send + 'static;
    /// [`JobStep`] or [`GateStep`]: lets the compiler refuse to complete a job step from
    /// outside.
    type Kind: StepKind;

    #[doc(hidden)]
    fn __draft(&self) -> Result<StepDraft, Error>;
}

impl<J: Job> WorkflowStep for J {
    type Output = J::Output;
    type Kind = JobStep;

    fn __draft(&self) -> Result<StepDraft, Error> {
        let payload =
            serde_json::to_value(self).map_err(|e| Error::serialize("step payload", &e))?;
        Ok(StepDraft::Job {
            job_type: J::NAME,
            payload,
        })
    }
}

impl<T: DeserializeOwned + Send + Sync + 'static> WorkflowStep for External<T> {
    type Output = T;
    type Kind = GateStep;

    fn __draft(&self) -> Result<StepDraft, Error> {
        Ok(StepDraft::External)
    }
}

/// A gate: a step that runs no job and waits until it is completed from outside (a human
/// approval, a webhook) with [`WorkflowHandle::complete_gate`]; `T` is the output it is
/// completed with, which dependents read with [`JobContext::output`](crate::JobContext::output).
///
/// ```
/// use runledger::External;
///
/// let approval: External<bool> = External::new();
/// # let _ = approval;
/// ```
pub struct External<T> {
    _output: PhantomData<fn() -> T>,
}

impl<T> External<T> {
    /// A gate.
    pub const fn new() -> Self {
        Self {
            _output: PhantomData,
        }
    }
}

impl<T> Default for External<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for External<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for External<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("External")
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Kind marker of a [`Step`] that runs a job.
#[derive(Debug)]
pub enum JobStep {}

/// Kind marker of a [`Step`] that is a gate ([`External`]).
#[derive(Debug)]
pub enum GateStep {}

/// The kind of a step: [`JobStep`] or [`GateStep`] (sealed).
pub trait StepKind: sealed::Sealed + 'static {}

impl sealed::Sealed for JobStep {}
impl sealed::Sealed for GateStep {}
impl StepKind for JobStep {}
impl StepKind for GateStep {}

/// Implemented only by [`GateStep`]: [`WorkflowHandle::complete_gate`] and
/// [`WorkflowHandle::fail_gate`] accept gate steps only, so completing a job step from outside
/// does not compile.
#[diagnostic::on_unimplemented(
    message = "only a gate can be completed or failed from outside; this step runs a job",
    label = "a job step, not an `External<T>` gate",
    note = "declare the field as `runledger::External<T>` to make the workflow wait for an outside completion"
)]
pub trait Gate: StepKind {}

impl Gate for GateStep {}

/// A typed reference to step `key` of workflow `W` whose output is `T`, generated by
/// `#[workflow]` as an associated constant named after the field (`Research::CRAWL`). `K` is
/// [`JobStep`] or [`GateStep`].
pub struct Step<W, T, K> {
    key: &'static str,
    _types: StepTypes<W, T, K>,
}

/// Ties a [`Step`] to its types without owning values of them (`Copy`, `Send`, `Sync`).
type StepTypes<W, T, K> = PhantomData<fn() -> (W, T, K)>;

impl<W, T, K> Step<W, T, K> {
    #[doc(hidden)]
    pub const fn __new(key: &'static str) -> Self {
        Self {
            key,
            _types: PhantomData,
        }
    }

    /// The step key stored in the database.
    pub const fn key(&self) -> &'static str {
        self.key
    }
}

impl<W, T, K> Clone for Step<W, T, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W, T, K> Copy for Step<W, T, K> {}

impl<W, T, K> std::fmt::Debug for Step<W, T, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Step({})", self.key)
    }
}

#[doc(hidden)]
#[derive(Debug, Clone, PartialEq)]
pub enum StepDraft {
    Job {
        job_type: &'static str,
        payload: Value,
    },
    External,
}

/// One step as `#[workflow]` describes it (generated code only).
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq)]
pub struct StepSpec {
    key: &'static str,
    draft: StepDraft,
    after: &'static [&'static str],
    after_terminal: &'static [&'static str],
    priority: Option<i32>,
    max_attempts: Option<i32>,
    timeout_seconds: Option<i32>,
}

#[doc(hidden)]
impl StepSpec {
    pub fn new<S: WorkflowStep>(step: &S, key: &'static str) -> Result<Self, Error> {
        Ok(Self {
            key,
            draft: step.__draft()?,
            after: &[],
            after_terminal: &[],
            priority: None,
            max_attempts: None,
            timeout_seconds: None,
        })
    }

    pub fn after(mut self, keys: &'static [&'static str]) -> Self {
        self.after = keys;
        self
    }

    pub fn after_terminal(mut self, keys: &'static [&'static str]) -> Self {
        self.after_terminal = keys;
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    pub fn timeout_seconds(mut self, seconds: i32) -> Self {
        self.timeout_seconds = Some(seconds);
        self
    }

    fn into_engine(self) -> WorkflowStepEnqueue<'static> {
        let key = StepKey::new(self.key);
        let mut step = match self.draft {
            StepDraft::Job { job_type, payload } => {
                WorkflowStepEnqueue::job(key, JobType::new(job_type), Cow::Owned(payload))
            }
            StepDraft::External => WorkflowStepEnqueue::external(key),
        };
        step.priority = self.priority;
        step.max_attempts = self.max_attempts;
        step.timeout_seconds = self.timeout_seconds;
        let edges = self
            .after
            .iter()
            .map(|key| (key, WorkflowDependencyCondition::Success))
            .chain(
                self.after_terminal
                    .iter()
                    .map(|key| (key, WorkflowDependencyCondition::Terminal)),
            );
        for (prerequisite, condition) in edges {
            step.dependencies.push(WorkflowStepDependency {
                prerequisite: StepKey::new(prerequisite),
                condition,
            });
        }
        step
    }
}

/// How long [`WorkflowHandle::result`] waits.
///
/// ```
/// use std::time::Duration;
/// use runledger::Wait;
///
/// let short = Wait::up_to(Duration::from_secs(5));
/// let patient = Wait::forever();
/// # let _ = (short, patient);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    options: WorkflowRunWaitOptions,
}

impl Wait {
    /// Waits at most `timeout`, then fails with `workflow.result_wait_timeout`.
    pub fn up_to(timeout: Duration) -> Self {
        Self {
            options: WorkflowRunWaitOptions {
                timeout: Some(timeout),
                ..WorkflowRunWaitOptions::default()
            },
        }
    }

    /// Waits until the run finishes, however long that is.
    pub fn forever() -> Self {
        Self {
            options: WorkflowRunWaitOptions {
                timeout: None,
                ..WorkflowRunWaitOptions::default()
            },
        }
    }

    /// Re-reads the run at least this often (notifications are the fast path).
    pub fn poll_every(mut self, interval: Duration) -> Self {
        self.options.poll_interval = interval;
        self
    }
}

/// A typed handle on a workflow run.
pub struct WorkflowHandle<W> {
    id: WorkflowRunId,
    organization_id: Option<Uuid>,
    created: bool,
    _workflow: PhantomData<fn() -> W>,
}

impl<W> Clone for WorkflowHandle<W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for WorkflowHandle<W> {}

impl<W> std::fmt::Debug for WorkflowHandle<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowHandle")
            .field("id", &self.id)
            .field("organization_id", &self.organization_id)
            .finish()
    }
}

impl<W: Workflow> WorkflowHandle<W> {
    /// A handle on an existing run (e.g. an id stored with a business row, or received by a
    /// webhook), in the scope of `organization_id` (`None`: runs without organization).
    pub fn from_id(id: WorkflowRunId, organization_id: Option<Uuid>) -> Self {
        Self {
            id,
            organization_id,
            created: true,
            _workflow: PhantomData,
        }
    }

    /// The run's id.
    pub fn id(&self) -> WorkflowRunId {
        self.id
    }

    /// `false` when an idempotency key matched an existing run.
    pub fn was_created(&self) -> bool {
        self.created
    }

    fn scope(&self) -> WorkflowRunHandleScope {
        match self.organization_id {
            Some(org) => WorkflowRunHandleScope::Organization(org),
            None => WorkflowRunHandleScope::Global,
        }
    }

    /// Waits for the run to finish and returns the `#[result]` step's typed output (`()` for a
    /// workflow without a `#[result]`). Woken by a notification when the run finishes.
    ///
    /// Fails with `workflow.result_unsuccessful_terminal` when the run ended without
    /// succeeding, `workflow.result_wait_timeout` when `wait` ran out, and
    /// `job.output_invalid` when the stored result does not match `W::Output`.
    pub async fn result(&self, pool: &PgPool, wait: Wait) -> Result<W::Output, Error> {
        let handle = WorkflowRunHandle::new(pool, self.id, self.scope());
        if W::RESULT_STEP.is_some() {
            let value = handle.get_result(wait.options).await?;
            return decode_output(W::NAME, Some(value));
        }
        // No declared result: wait for the run to succeed and decode `null` (e.g. into `()`).
        let run = handle.wait_finished(wait.options).await?;
        match run.status {
            WorkflowRunStatus::Succeeded => decode_output(W::NAME, None),
            status => Err(WorkflowRunHandleError::ResultUnsuccessfulTerminal { status }.into()),
        }
    }

    /// The run's current status.
    pub async fn status<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<WorkflowRunStatus, Error> {
        Ok(self.run(executor).await?.status)
    }

    /// The run's row.
    pub async fn run<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<WorkflowRunRecord, Error> {
        get_workflow_run(executor, self.id, self.scope())
            .await?
            .ok_or(Error::Database(
                crate::engine::postgres::Error::WorkflowRunNotFound { run_id: self.id },
            ))
    }

    /// Completes gate `step` successfully with `output`, releasing its dependents. The gate
    /// must be waiting (its prerequisites done): otherwise `workflow.external_step_not_waiting`;
    /// passing a job step does not compile (see [`Gate`]). An identical retry is a no-op; a
    /// retry with another output fails with `workflow.external_step_conflicting_output_retry`.
    pub async fn complete_gate<'e, T: Serialize, K: Gate>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        step: Step<W, T, K>,
        output: &T,
    ) -> Result<ExternalStepCompletion, Error> {
        let output =
            serde_json::to_value(output).map_err(|e| Error::serialize("gate output", &e))?;
        let input = CompleteExternalWorkflowStepInput {
            workflow_run_id: self.id,
            organization_id: self.organization_id,
            step_key: StepKey::new(step.key()),
            terminal_status: WorkflowStepStatus::Succeeded,
            status_reason: None,
            last_error_code: None,
            last_error_message: None,
            output: Some(&output),
        };
        Ok(complete_external_workflow_step(executor, &input).await?)
    }

    /// Fails gate `step` with a stable `code` and a message; `#[after]` dependents are
    /// canceled, `#[after_terminal]` dependents run.
    pub async fn fail_gate<'e, T, K: Gate>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        step: Step<W, T, K>,
        code: &str,
        message: &str,
    ) -> Result<ExternalStepCompletion, Error> {
        let input = CompleteExternalWorkflowStepInput {
            workflow_run_id: self.id,
            organization_id: self.organization_id,
            step_key: StepKey::new(step.key()),
            terminal_status: WorkflowStepStatus::Failed,
            status_reason: None,
            last_error_code: Some(code),
            last_error_message: Some(message),
            output: None,
        };
        Ok(complete_external_workflow_step(executor, &input).await?)
    }

    /// Cancels the run: pending, running and waiting steps end `CANCELED`.
    pub async fn cancel<'e>(&self, executor: impl sqlx::PgExecutor<'e>) -> Result<(), Error> {
        Ok(cancel_workflow_run(executor, self.id, self.scope()).await?)
    }
}
