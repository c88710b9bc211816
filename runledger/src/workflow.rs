//! Typed workflows: the [`Workflow`] trait that `#[workflow]` implements, enqueueing, and
//! [`WorkflowHandle`].

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
use crate::job::Job;
use crate::output;
use crate::step::{Gate, Step, WorkflowStep};

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
/// #[job] async fn publish(#[output(Review::APPROVAL)] approved: bool) -> Result<bool, JobError> {
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

    /// The run's typed result: the `#[result]` step's output (`()` without one).
    type Output: 'static;

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

    /// Enqueues a run with [`WorkflowOptions`] (idempotency key, organization, metadata, claim
    /// order).
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
            if options.run_first {
                builder = builder.run_first();
            }
            let request = builder.build()?;
            let run = enqueue_workflow_run(executor, &request).await?;
            Ok(WorkflowHandle {
                id: run.id,
                organization_id: options.organization_id,
                created: run.created,
                type_checked: true,
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
    run_first: bool,
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

    /// Finishes what was started: the run's steps are claimed in the order of the run's age,
    /// so with few worker slots an older run's next step goes before the first step of a newer
    /// run (`A1 B1 C1 A2 B2 C2` rather than `A1 A2 B1 B2 C1 C2`). Each step job is due from the
    /// moment the run was enqueued; a retry's backoff still delays it.
    ///
    /// ```
    /// use runledger::WorkflowOptions;
    ///
    /// let options = WorkflowOptions::new().run_first();
    /// # let _ = options;
    /// ```
    pub fn run_first(mut self) -> Self {
        self.run_first = true;
        self
    }
}

/// What a step runs.
#[derive(Debug, Clone, PartialEq)]
enum StepDraft {
    Job {
        job_type: &'static str,
        payload: Value,
    },
    Gate,
    FanOut,
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
    allow_continuation: bool,
}

#[doc(hidden)]
impl StepSpec {
    fn new(key: &'static str, draft: StepDraft) -> Self {
        Self {
            key,
            draft,
            after: &[],
            after_terminal: &[],
            priority: None,
            max_attempts: None,
            timeout_seconds: None,
            allow_continuation: false,
        }
    }

    /// A step that runs `job`.
    pub fn job<J: Job>(job: &J, key: &'static str) -> Result<Self, Error> {
        let payload =
            serde_json::to_value(job).map_err(|e| Error::serialize("step payload", &e))?;
        Ok(Self::new(
            key,
            StepDraft::Job {
                job_type: J::NAME,
                payload,
            },
        ))
    }

    /// A gate.
    pub fn gate(key: &'static str) -> Self {
        Self::new(key, StepDraft::Gate)
    }

    /// A fan-out.
    pub fn fan_out(key: &'static str) -> Self {
        Self::new(key, StepDraft::FanOut)
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

    pub fn allow_continuation(mut self) -> Self {
        self.allow_continuation = true;
        self
    }

    fn into_engine(self) -> WorkflowStepEnqueue<'static> {
        let key = StepKey::new(self.key);
        let mut step = match self.draft {
            StepDraft::Job { job_type, payload } => {
                WorkflowStepEnqueue::job(key, JobType::new(job_type), Cow::Owned(payload))
            }
            StepDraft::Gate => WorkflowStepEnqueue::external(key),
            StepDraft::FanOut => WorkflowStepEnqueue::fan_out(key),
        };
        step.priority = self.priority;
        step.max_attempts = self.max_attempts;
        step.timeout_seconds = self.timeout_seconds;
        step.allow_continuation = self.allow_continuation;
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
    /// Whether the run is known to be a `W` (made by enqueue rather than `from_id`).
    type_checked: bool,
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
    /// webhook), in the scope of `organization_id` (`None`: runs without organization). Every
    /// call checks that the run is a `W` and fails with `workflow.type_mismatch` otherwise.
    pub fn from_id(id: WorkflowRunId, organization_id: Option<Uuid>) -> Self {
        Self {
            id,
            organization_id,
            created: true,
            type_checked: false,
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
    pub async fn result(&self, pool: &PgPool, wait: Wait) -> Result<W::Output, Error>
    where
        W::Output: DeserializeOwned,
    {
        if !self.type_checked {
            self.run(pool).await?;
        }
        let handle = WorkflowRunHandle::new(pool, self.id, self.scope());
        if W::RESULT_STEP.is_some() {
            let value = handle.get_result(wait.options).await?;
            return output::decode(W::NAME, Some(value));
        }
        // No declared result: wait for the run to succeed and decode `null` (e.g. into `()`).
        let run = handle.wait_finished(wait.options).await?;
        match run.status {
            WorkflowRunStatus::Succeeded => output::decode(W::NAME, None),
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
        let run = get_workflow_run(executor, self.id, self.scope())
            .await?
            .ok_or(Error::Database(
                crate::engine::postgres::Error::WorkflowRunNotFound { run_id: self.id },
            ))?;
        if run.workflow_type != W::NAME {
            return Err(Error::WorkflowTypeMismatch {
                id: self.id,
                expected: W::NAME,
                found: run.workflow_type,
            });
        }
        Ok(run)
    }

    /// A connection for a write, after checking (on a handle made with `from_id`) that the
    /// run is a `W`.
    async fn checked_connection<'c, A>(&self, executor: A) -> Result<A::Connection, Error>
    where
        A: Acquire<'c, Database = Postgres>,
    {
        let mut connection = executor
            .acquire()
            .await
            .map_err(crate::engine::postgres::Error::from)?;
        if !self.type_checked {
            self.run(&mut *connection).await?;
        }
        Ok(connection)
    }

    /// Completes or fails gate `key` (see `complete_external_workflow_step`).
    async fn finish_gate<'c, A>(
        &self,
        executor: A,
        key: &'static str,
        status: WorkflowStepStatus,
        error: Option<(&str, &str)>,
        output: Option<&Value>,
    ) -> Result<ExternalStepCompletion, Error>
    where
        A: Acquire<'c, Database = Postgres>,
    {
        let mut connection = self.checked_connection(executor).await?;
        let input = CompleteExternalWorkflowStepInput {
            workflow_run_id: self.id,
            organization_id: self.organization_id,
            step_key: StepKey::new(key),
            terminal_status: status,
            status_reason: None,
            last_error_code: error.map(|(code, _)| code),
            last_error_message: error.map(|(_, message)| message),
            output,
        };
        Ok(complete_external_workflow_step(&mut *connection, &input).await?)
    }

    /// Completes gate `step` successfully with `output`, releasing its dependents. The gate
    /// must be waiting (its prerequisites done): otherwise `workflow.external_step_not_waiting`;
    /// passing a job step does not compile (see [`Gate`]). An identical retry is a no-op; a
    /// retry with another output fails with `workflow.external_step_conflicting_output_retry`.
    pub async fn complete_gate<'c, S, A>(
        &self,
        executor: A,
        step: Step<W, S>,
        output: &S::Output,
    ) -> Result<ExternalStepCompletion, Error>
    where
        S: WorkflowStep,
        S::Kind: Gate,
        S::Output: Serialize,
        A: Acquire<'c, Database = Postgres>,
    {
        let output =
            serde_json::to_value(output).map_err(|e| Error::serialize("gate output", &e))?;
        self.finish_gate(
            executor,
            step.key(),
            WorkflowStepStatus::Succeeded,
            None,
            Some(&output),
        )
        .await
    }

    /// Fails gate `step` with a stable `code` and a message; `#[after]` dependents are
    /// canceled, `#[after_terminal]` dependents run.
    pub async fn fail_gate<'c, S, A>(
        &self,
        executor: A,
        step: Step<W, S>,
        code: &str,
        message: &str,
    ) -> Result<ExternalStepCompletion, Error>
    where
        S: WorkflowStep,
        S::Kind: Gate,
        A: Acquire<'c, Database = Postgres>,
    {
        self.finish_gate(
            executor,
            step.key(),
            WorkflowStepStatus::Failed,
            Some((code, message)),
            None,
        )
        .await
    }

    /// Cancels the run: pending, running and waiting steps end `CANCELED`.
    pub async fn cancel<'c, A>(&self, executor: A) -> Result<(), Error>
    where
        A: Acquire<'c, Database = Postgres>,
    {
        let mut connection = self.checked_connection(executor).await?;
        Ok(cancel_workflow_run(&mut *connection, self.id, self.scope()).await?)
    }
}
