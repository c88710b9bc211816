//! What a handler receives and returns.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    JobFailureKind, JobId, JobLogLevel, JobLogLine, JobLogSink, JobType, WorkflowRunId,
    WorkflowStepEnqueue, WorkflowStepId,
};

/// Facts about the job being executed, handed to [`JobHandler::execute`].
///
/// ```
/// use runledger_engine::core::jobs::{JobContext, JobId, JobType};
///
/// let ctx = JobContext::new(JobId::new_v7(), JobType::new("emails.send"), 1, 5, "worker-a");
/// assert!(ctx.is_last_attempt() == false);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobContext {
    /// The job's id.
    pub job_id: JobId,
    /// The job's type.
    pub job_type: JobType<'static>,
    /// Which attempt this is, starting at 1 (counted since the last requeue).
    pub attempt: i32,
    /// How many attempts the job gets before it is dead-lettered.
    pub max_attempts: i32,
    /// The worker holding the lease.
    pub worker_id: String,
    /// The organization the job belongs to, if any.
    pub organization_id: Option<Uuid>,
    /// When the current lease expires unless renewed.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The workflow run, when the job is a workflow step.
    pub workflow_run_id: Option<WorkflowRunId>,
    /// The workflow step, when the job is a workflow step.
    pub workflow_step_id: Option<WorkflowStepId>,
    /// The workflow step's key, when the job is a workflow step.
    pub workflow_step_key: Option<String>,
    /// Reads prerequisite outputs; set by the runtime for workflow steps.
    pub step_outputs: Option<StepOutputs>,
    /// The attempt's fencing token (attempts over the job's whole life, as in `job_attempts`);
    /// equal to `attempt` until the job is requeued.
    pub lifetime_attempt: i32,
    /// Where [`log`](Self::log) sends lines; set by the runtime. Without a sink, logging does
    /// nothing.
    pub log_sink: Option<JobLogSink>,
    /// Fires when this attempt is abandoned: its lease was lost, its timeout passed, or the
    /// worker's shutdown deadline ran out. The runtime then drops the handler's future, so the
    /// token is for work the handler started elsewhere (spawned tasks, blocking threads, child
    /// processes) and for checks between steps of a long computation.
    pub cancellation: CancellationToken,
    /// Where [`report_progress`](Self::report_progress) writes; set by the runtime.
    pub progress_sink: Option<JobProgressSink>,
    /// Adds steps to this step's own workflow run; set by the runtime for workflow steps.
    pub workflow_appender: Option<WorkflowAppender>,
    /// The checkpoint the job's last continued run committed ([`JobContinuation::checkpoint`]);
    /// `None` on a job's first run or when no run stored one.
    pub checkpoint: Option<Value>,
}

impl JobContext {
    /// A context for a direct (non-workflow) job; the runtime fills the remaining fields.
    pub fn new(
        job_id: JobId,
        job_type: JobType<'static>,
        attempt: i32,
        max_attempts: i32,
        worker_id: impl Into<String>,
    ) -> Self {
        Self {
            job_id,
            job_type,
            attempt,
            max_attempts,
            worker_id: worker_id.into(),
            organization_id: None,
            lease_expires_at: None,
            workflow_run_id: None,
            workflow_step_id: None,
            workflow_step_key: None,
            step_outputs: None,
            lifetime_attempt: attempt,
            log_sink: None,
            cancellation: CancellationToken::new(),
            progress_sink: None,
            workflow_appender: None,
            checkpoint: None,
        }
    }

    /// Whether [`cancellation`](Self::cancellation) has fired.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }

    /// Stores `update` as the job's progress (replacing the previous one; operators see it in
    /// the job's detail). Fails with `job.lease_owner_mismatch` once the lease is lost. Without
    /// a runtime sink (e.g. in unit tests) it does nothing.
    pub async fn report_progress(&self, update: &JobProgressUpdate) -> Result<(), JobContextError> {
        match &self.progress_sink {
            Some(sink) => sink.0.write_progress(update).await,
            None => Ok(()),
        }
    }

    /// Adds `steps` to this step's workflow run, idempotently under `mutation_key` (see
    /// `append_workflow_steps`): `Ok(true)` when they were added, `Ok(false)` when an identical
    /// append under the same key already was. Fails with `workflow.not_a_workflow_step`
    /// outside a workflow step.
    pub async fn append_workflow_steps(
        &self,
        mutation_key: &str,
        steps: Vec<WorkflowStepEnqueue<'static>>,
    ) -> Result<bool, JobContextError> {
        match &self.workflow_appender {
            Some(appender) => appender.0.append_steps(mutation_key, steps).await,
            None => Err(JobContextError::not_a_workflow_step()),
        }
    }

    /// Fills the fan-out step `fan_out` of this step's workflow run with children: jobs of
    /// `job_type`, one per payload taken from `children` (a few thousand at a time, so any
    /// number fits in bounded memory), keyed `{fan_out}/0`, `{fan_out}/1`, ... (see
    /// `fill_fan_out`). They start once this step succeeds; this step must be one of the
    /// fan-out's prerequisites. `Ok(true)` when they were added, `Ok(false)` when the same fill
    /// already was. Fails with `workflow.not_a_workflow_step` outside a workflow step.
    pub async fn fill_fan_out(
        &self,
        fan_out: &str,
        job_type: &str,
        children: &mut (dyn Iterator<Item = FanOutChild> + Send),
    ) -> Result<bool, JobContextError> {
        match &self.workflow_appender {
            Some(appender) => appender.0.fill_fan_out(fan_out, job_type, children).await,
            None => Err(JobContextError::not_a_workflow_step()),
        }
    }

    /// Whether a retryable failure of this attempt will dead-letter the job anyway.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// Writes a line to the job's log (`runledger.job_logs`, shown by the operator TUI). It
    /// never waits: the runtime buffers lines and stores them in batches, so a line may appear
    /// a moment after it was written, and lines are dropped (with a warning in the worker's
    /// tracing output) if the database falls far behind. Without a runtime sink (e.g. in unit
    /// tests) it does nothing.
    ///
    /// ```
    /// use runledger_engine::core::jobs::{JobContext, JobId, JobLogLevel, JobType};
    ///
    /// let ctx = JobContext::new(JobId::new_v7(), JobType::new("emails.send"), 1, 5, "worker-a");
    /// ctx.log(JobLogLevel::Info, "rendering template");
    /// ctx.log_with_fields(JobLogLevel::Warn, "slow SMTP server", serde_json::json!({"ms": 950}));
    /// ```
    pub fn log(&self, level: JobLogLevel, message: impl Into<String>) {
        if let Some(sink) = &self.log_sink {
            sink.0.write(JobLogLine::new(
                self.job_id,
                self.lifetime_attempt,
                level,
                message,
            ));
        }
    }

    /// Like [`log`](Self::log), with structured fields (a JSON object).
    pub fn log_with_fields(&self, level: JobLogLevel, message: impl Into<String>, fields: Value) {
        if let Some(sink) = &self.log_sink {
            sink.0.write(
                JobLogLine::new(self.job_id, self.lifetime_attempt, level, message)
                    .with_fields(fields),
            );
        }
    }

    /// Logs at [`JobLogLevel::Info`].
    pub fn info(&self, message: impl Into<String>) {
        self.log(JobLogLevel::Info, message);
    }

    /// Logs at [`JobLogLevel::Warn`].
    pub fn warn(&self, message: impl Into<String>) {
        self.log(JobLogLevel::Warn, message);
    }

    /// Logs at [`JobLogLevel::Error`].
    pub fn error(&self, message: impl Into<String>) {
        self.log(JobLogLevel::Error, message);
    }

    /// The stored output of `step_key`, one of this workflow step's prerequisites: `None` when
    /// it finished without output (or did not succeed). Reading a step that is not a
    /// prerequisite fails with `workflow.not_a_prerequisite`; calling it outside a workflow
    /// step with `workflow.not_a_workflow_step`.
    pub async fn prerequisite_output(
        &self,
        step_key: &str,
    ) -> Result<Option<Value>, StepOutputError> {
        let mut outputs = self.prerequisite_outputs(&[step_key.to_owned()]).await?;
        Ok(outputs.pop().flatten())
    }

    /// The stored outputs of `step_keys`, in their order, read together (one statement for
    /// the lot): what [`prerequisite_output`](Self::prerequisite_output) gives for each, and
    /// `workflow.not_a_prerequisite` naming the first key that is not a prerequisite.
    pub async fn prerequisite_outputs(
        &self,
        step_keys: &[String],
    ) -> Result<Vec<Option<Value>>, StepOutputError> {
        match &self.step_outputs {
            Some(outputs) => outputs.0.prerequisite_outputs(step_keys).await,
            None => Err(JobContextError::not_a_workflow_step()),
        }
    }
    /// Up to `limit` stored outputs of the children of `fan_out`, a fan-out step among this
    /// step's prerequisites, from child `from` on, with the number of children: one query per
    /// page, so a join reads any number of children in bounded memory. Fails like
    /// [`prerequisite_outputs`](Self::prerequisite_outputs), and with
    /// `workflow.fan_out_not_found` when `fan_out` is not a fan-out step.
    pub async fn fan_out_outputs(
        &self,
        fan_out: &str,
        from: u64,
        limit: u64,
    ) -> Result<FanOutPage, StepOutputError> {
        match &self.step_outputs {
            Some(outputs) => outputs.0.fan_out_outputs(fan_out, from, limit).await,
            None => Err(JobContextError::not_a_workflow_step()),
        }
    }
}

/// Reads the stored outputs of a workflow step's prerequisites (implemented by the runtime on
/// top of the database).
#[async_trait::async_trait]
pub trait StepOutputReader: Send + Sync + 'static {
    /// The outputs of prerequisites `step_keys`, in their order.
    async fn prerequisite_outputs(
        &self,
        step_keys: &[String],
    ) -> Result<Vec<Option<Value>>, StepOutputError>;

    /// Up to `limit` outputs of the children of prerequisite fan-out `fan_out`, from child
    /// `from` on.
    async fn fan_out_outputs(
        &self,
        fan_out: &str,
        from: u64,
        limit: u64,
    ) -> Result<FanOutPage, StepOutputError>;
}

/// A page of the outputs of a fan-out's children ([`JobContext::fan_out_outputs`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FanOutPage {
    /// How many children the fan-out has.
    pub children: u64,
    /// The stored outputs of the children asked for, in order (`None`: a child without
    /// output); empty past the last child.
    pub outputs: Vec<Option<Value>>,
}

impl FanOutPage {
    /// A page of `outputs` of a fan-out of `children` children.
    pub fn new(children: u64, outputs: Vec<Option<Value>>) -> Self {
        Self { children, outputs }
    }
}

/// A shared [`StepOutputReader`].
#[derive(Clone)]
pub struct StepOutputs(pub Arc<dyn StepOutputReader>);

impl std::fmt::Debug for StepOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepOutputs")
    }
}

/// Stores a running job's progress (implemented by the runtime, fenced by the job's lease).
#[async_trait::async_trait]
pub trait JobProgressWriter: Send + Sync + 'static {
    /// Stores `update` on the job.
    async fn write_progress(&self, update: &JobProgressUpdate) -> Result<(), JobContextError>;
}

/// A shared [`JobProgressWriter`].
#[derive(Clone)]
pub struct JobProgressSink(pub Arc<dyn JobProgressWriter>);

impl std::fmt::Debug for JobProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobProgressSink")
    }
}

/// Adds steps to the workflow run of the step being executed (implemented by the runtime).
#[async_trait::async_trait]
pub trait WorkflowStepAppender: Send + Sync + 'static {
    /// Appends `steps` under `mutation_key`; `Ok(false)` when that append was already applied.
    async fn append_steps(
        &self,
        mutation_key: &str,
        steps: Vec<WorkflowStepEnqueue<'static>>,
    ) -> Result<bool, JobContextError>;

    /// Fills the fan-out step `fan_out` with children of `job_type`, one per payload taken
    /// from `children`, filled by the step being executed; `Ok(false)` when the same fill was
    /// already applied.
    async fn fill_fan_out(
        &self,
        fan_out: &str,
        job_type: &str,
        children: &mut (dyn Iterator<Item = FanOutChild> + Send),
    ) -> Result<bool, JobContextError>;
}

/// A fan-out child's payload as the caller produced it: `Err` with a message when it could
/// not (a payload that failed to serialize), which fails the whole fill with
/// `payload.serialize_failed`.
pub type FanOutChild = Result<Value, String>;

/// A shared [`WorkflowStepAppender`].
#[derive(Clone)]
pub struct WorkflowAppender(pub Arc<dyn WorkflowStepAppender>);

impl std::fmt::Debug for WorkflowAppender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkflowAppender")
    }
}

/// What a claimed job's context reaches besides its payload: the [`JobProgressWriter`] of its
/// lease and, for a workflow step, the [`StepOutputReader`] of its prerequisites and the
/// [`WorkflowStepAppender`] of its run. The runtime attaches them before the handler starts; the
/// store implements them (`postgres::jobs::PgJobServices`).
pub(crate) trait JobServices: Send + Sync + 'static {
    /// Sets the sinks of `context`, built for a claimed job (its id, lease, run and step).
    fn attach(&self, context: &mut JobContext);
}

/// Why a call on the [`JobContext`] (progress, append, a fill, a read of outputs) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct JobContextError {
    /// Stable code, e.g. `job.lease_owner_mismatch`, `workflow.append_conflicting_retry` or
    /// `workflow.not_a_prerequisite`.
    pub code: &'static str,
    /// What happened.
    pub message: String,
}

impl JobContextError {
    /// `workflow.not_a_workflow_step`: a workflow call made by a job that is not a step.
    pub fn not_a_workflow_step() -> Self {
        Self {
            code: "workflow.not_a_workflow_step",
            message: "this job is not a workflow step".to_owned(),
        }
    }
}

/// Why a prerequisite output could not be read: a [`JobContextError`] (codes
/// `workflow.not_a_prerequisite`, `workflow.not_a_workflow_step`, `workflow.fan_out_not_found`,
/// or a storage code).
pub type StepOutputError = JobContextError;

/// A successful result, optionally with a compact JSON output stored on the job and a final
/// progress update.
///
/// ```
/// use runledger_engine::core::jobs::{JobCompletion, JobProgressUpdate};
///
/// assert!(JobCompletion::success().output.is_none());
/// let done = JobCompletion::with_output(serde_json::json!({"sent": true}))
///     .progress(JobProgressUpdate::new().completed(10).total(10));
/// assert_eq!(done.output.unwrap()["sent"], true);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct JobCompletion {
    /// JSON stored in `job_queue.output` (and, for a workflow step, on the step).
    pub output: Option<Value>,
    /// The final progress, stored with the success in the same statement (replacing the last
    /// update); `None` keeps the last update the handler reported.
    pub progress: Option<JobProgressUpdate>,
    /// Set when the handler asks to run again instead of finishing (see [`JobContinuation`]).
    /// A continuation carries no output: an output set beside it fails the attempt with
    /// `job.continuation_with_output`.
    pub continuation: Option<JobContinuation>,
}

impl JobCompletion {
    /// Success without output.
    pub fn success() -> Self {
        Self::default()
    }

    /// Success with a JSON output. Keep it compact: store large artifacts elsewhere and return
    /// a reference.
    pub fn with_output(output: Value) -> Self {
        Self {
            output: Some(output),
            ..Self::default()
        }
    }

    /// Ends the attempt as a success that runs the job again (see [`JobContinuation`]).
    pub fn continuing(continuation: JobContinuation) -> Self {
        Self {
            continuation: Some(continuation),
            ..Self::default()
        }
    }

    /// Stores `progress` as the job's final progress with the success.
    pub fn progress(mut self, progress: JobProgressUpdate) -> Self {
        self.progress = Some(progress);
        self
    }
}

/// Ends an attempt by running the same job again instead of finishing it: the attempt closes
/// as a success, and the job row starts its next run (`run_number` + 1, a fresh attempt
/// budget), now or after a delay, in the same statement. An optional checkpoint (any JSON) is
/// handed to the next run's handler as [`JobContext::checkpoint`]; without one the previous
/// checkpoint stays. A continuation never carries an output: only the run that finishes does.
///
/// A workflow step may continue only when it opted in
/// (`WorkflowStepEnqueueBuilder::allow_continuation`); otherwise the attempt fails with
/// `workflow.continuation_not_allowed`. A continued step stays open, so its dependents wait.
///
/// ```
/// use std::time::Duration;
/// use runledger_engine::core::jobs::{JobCompletion, JobContinuation, JobProgressUpdate};
///
/// let next = JobContinuation::after(Duration::from_secs(30))
///     .checkpoint(serde_json::json!({"cursor": 200}))
///     .progress(JobProgressUpdate::new().completed(200));
/// let completion = JobCompletion::from(next);
/// assert!(completion.output.is_none());
/// assert_eq!(completion.continuation.unwrap().delay, Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct JobContinuation {
    /// How long after this attempt the next run becomes claimable.
    pub delay: Duration,
    /// Stored on the job and handed to the next run; `None` keeps the previous checkpoint.
    pub checkpoint: Option<Value>,
    /// Stored as the job's progress; `None` keeps the last update.
    pub progress: Option<JobProgressUpdate>,
}

impl JobContinuation {
    /// The next run is claimable at once.
    pub fn now() -> Self {
        Self::default()
    }

    /// The next run is claimable after `delay`.
    pub fn after(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    /// Commits `checkpoint` for the next run.
    pub fn checkpoint(mut self, checkpoint: Value) -> Self {
        self.checkpoint = Some(checkpoint);
        self
    }

    /// Stores `progress` with the continuation.
    pub fn progress(mut self, progress: JobProgressUpdate) -> Self {
        self.progress = Some(progress);
        self
    }
}

impl From<JobContinuation> for JobCompletion {
    fn from(continuation: JobContinuation) -> Self {
        Self::continuing(continuation)
    }
}

/// A failed attempt: whether it may be retried, a stable code and a message.
///
/// ```
/// use std::time::Duration;
/// use runledger_engine::core::jobs::{JobFailure, JobFailureKind};
///
/// let failure = JobFailure::retryable("smtp.unavailable", "SMTP server refused the connection")
///     .with_retry_after(Duration::from_secs(60));
/// assert_eq!(failure.kind, JobFailureKind::Retryable);
/// assert!(failure.retry_not_before.is_some());
///
/// let fatal = JobFailure::terminal("email.invalid_address", "no such mailbox");
/// assert_eq!(fatal.kind, JobFailureKind::Terminal);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobFailure {
    /// How the attempt failed; decides between retry and dead letter.
    pub kind: JobFailureKind,
    /// Stable machine-readable code, e.g. `smtp.unavailable`.
    pub code: String,
    /// Human-readable detail.
    pub message: String,
    /// Earliest time of the next attempt. A lower bound only: it never makes the retry come
    /// sooner than the definition's backoff policy.
    pub retry_not_before: Option<DateTime<Utc>>,
}

impl JobFailure {
    /// A failure worth retrying while attempts remain.
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(JobFailureKind::Retryable, code, message)
    }

    /// A permanent failure: the job is dead-lettered at once.
    pub fn terminal(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(JobFailureKind::Terminal, code, message)
    }

    /// A failure of the given kind.
    pub fn new(kind: JobFailureKind, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            code: code.into(),
            message: message.into(),
            retry_not_before: None,
        }
    }

    /// Asks that the next attempt not start before `at`.
    pub fn with_retry_not_before(mut self, at: DateTime<Utc>) -> Self {
        self.retry_not_before = Some(at);
        self
    }

    /// Asks that the next attempt not start within `delay` from now.
    pub fn with_retry_after(self, delay: Duration) -> Self {
        let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
        let at = Utc::now()
            .checked_add_signed(delay)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        self.with_retry_not_before(at)
    }
}

/// In-flight progress a handler may report; stored as JSON on the job row.
///
/// ```
/// use runledger_engine::core::jobs::JobProgressUpdate;
///
/// let update = JobProgressUpdate::new().stage("crawling").completed(3).total(10);
/// assert_eq!(update.total, Some(10));
/// ```
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct JobProgressUpdate {
    /// A short name of the current phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Units of work done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
    /// Units of work in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// A free-form message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl JobProgressUpdate {
    /// An empty update.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the phase name.
    pub fn stage(mut self, stage: impl Into<String>) -> Self {
        self.stage = Some(stage.into());
        self
    }

    /// Sets the units done.
    pub fn completed(mut self, completed: u64) -> Self {
        self.completed = Some(completed);
        self
    }

    /// Sets the units in all.
    pub fn total(mut self, total: u64) -> Self {
        self.total = Some(total);
        self
    }

    /// Sets the message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}

/// Executes jobs of one type. The runtime calls [`execute`](JobHandler::execute) once per
/// attempt, with the job's JSON payload.
///
/// ```
/// use runledger_engine::core::jobs::{JobCompletion, JobContext, JobFailure, JobHandler, JobType};
/// use runledger_engine::core::prelude::async_trait;
/// use serde_json::Value;
///
/// struct SendEmail;
///
/// #[async_trait]
/// impl JobHandler for SendEmail {
///     fn job_type(&self) -> JobType<'static> {
///         JobType::new("jobs.email.send")
///     }
///
///     async fn execute(&self, _ctx: JobContext, payload: Value) -> Result<JobCompletion, JobFailure> {
///         if payload.get("to").is_none() {
///             return Err(JobFailure::terminal("email.missing_recipient", "payload has no `to`"));
///         }
///         Ok(JobCompletion::success())
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait JobHandler: Send + Sync + 'static {
    /// The job type this handler runs.
    fn job_type(&self) -> JobType<'static>;

    /// Runs one attempt.
    async fn execute(
        &self,
        context: JobContext,
        payload: Value,
    ) -> Result<JobCompletion, JobFailure>;
}
