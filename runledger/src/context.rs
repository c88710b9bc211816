//! The handler's [`JobContext`]: facts about the attempt, shared application state, the
//! attempt's cancellation, progress and logs.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::engine::core::jobs::{
    self as engine_jobs, FanOutPage, JobContextError, JobId, JobLogLevel, JobProgressUpdate,
    JobType, WorkflowRunId,
};
use crate::error::JobError;

/// Shared application state handed to every handler of a worker, by type
/// ([`WorkerBuilder::data`](crate::WorkerBuilder::data)).
#[doc(hidden)]
#[derive(Clone, Default)]
pub struct Data(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl Data {
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }

    fn get<T: 'static>(&self) -> Option<&T> {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|value| value.downcast_ref())
    }
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Data({} values)", self.0.len())
    }
}

/// What a `#[job]` fn receives as its optional first argument: facts about the attempt, the
/// worker's shared state ([`data`](Self::data)), the attempt's cancellation, progress
/// reporting and logs. Prerequisite outputs are not read through it: a step receives them as
/// `#[output(..)]` arguments, which the compiler checks against the workflow's edges.
///
/// In unit tests, build one with [`JobContext::for_tests`] or, with the `testing` feature,
/// `runledger::testing::TestContext` (state, attempt numbers, organization).
///
/// ```
/// use runledger::prelude::*;
///
/// struct Mailer { from: &'static str }
///
/// #[job(name = "emails.send")]
/// async fn send_email(ctx: JobContext, to: String) -> Result<String, JobError> {
///     let mailer = ctx.data::<Mailer>()?;
///     ctx.info(format!("attempt {} of {}", ctx.attempt(), ctx.max_attempts()));
///     Ok(format!("{} -> {to}", mailer.from))
/// }
/// # let _ = SendEmail { to: String::new() };
/// ```
#[derive(Clone)]
pub struct JobContext {
    inner: engine_jobs::JobContext,
    data: Arc<Data>,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("job_id", &self.inner.job_id)
            .field("job_type", &self.inner.job_type)
            .field("attempt", &self.inner.attempt)
            .field("workflow_step_key", &self.inner.workflow_step_key)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    /// Wraps the engine's context, without shared state.
    pub fn new(inner: engine_jobs::JobContext) -> Self {
        Self::with_data(inner, Arc::default())
    }

    pub(crate) fn with_data(inner: engine_jobs::JobContext, data: Arc<Data>) -> Self {
        Self { inner, data }
    }

    /// A context for calling a `#[job]` fn directly in a unit test: a fresh id, attempt 1 of 1,
    /// worker `test`, no shared state, not a workflow step.
    ///
    /// ```
    /// use runledger::JobContext;
    ///
    /// let ctx = JobContext::for_tests("emails.send");
    /// assert_eq!(ctx.attempt(), 1);
    /// assert_eq!(ctx.job_type(), "emails.send");
    /// ```
    pub fn for_tests(job_type: &'static str) -> Self {
        Self::new(engine_jobs::JobContext::new(
            JobId::new_v7(),
            JobType::new(job_type),
            1,
            1,
            "test",
        ))
    }

    /// The engine's context (for engine APIs, such as reading a prerequisite's raw output by
    /// key with its run-time check).
    pub fn engine(&self) -> &engine_jobs::JobContext {
        &self.inner
    }

    /// The job's id.
    pub fn job_id(&self) -> JobId {
        self.inner.job_id
    }

    /// The job type.
    pub fn job_type(&self) -> &str {
        self.inner.job_type.as_str()
    }

    /// Which attempt this is, starting at 1 (counted since the last requeue).
    pub fn attempt(&self) -> i32 {
        self.inner.attempt
    }

    /// How many attempts the job gets before it is dead-lettered.
    pub fn max_attempts(&self) -> i32 {
        self.inner.max_attempts
    }

    /// Whether a retryable failure of this attempt will dead-letter the job anyway.
    pub fn is_last_attempt(&self) -> bool {
        self.inner.is_last_attempt()
    }

    /// The worker running the attempt.
    pub fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    /// The organization the job belongs to, if any.
    pub fn organization_id(&self) -> Option<Uuid> {
        self.inner.organization_id
    }

    /// When the lease expires unless the worker renews it (it does, while the handler runs).
    pub fn lease_expires_at(&self) -> Option<DateTime<Utc>> {
        self.inner.lease_expires_at
    }

    /// The workflow run, when the job is a workflow step.
    pub fn workflow_run_id(&self) -> Option<WorkflowRunId> {
        self.inner.workflow_run_id
    }

    /// The step key, when the job is a workflow step.
    pub fn step_key(&self) -> Option<&str> {
        self.inner.workflow_step_key.as_deref()
    }

    /// The shared value of type `T` given to [`WorkerBuilder::data`](crate::WorkerBuilder::data)
    /// (a connection pool, an HTTP client, a configuration). Fails terminally with
    /// `job.data_missing` when the worker was given no `T`: a deployment mistake that retries
    /// would not fix.
    ///
    /// ```
    /// # use runledger::prelude::*;
    /// #[derive(Clone)]
    /// struct Http { base: String }
    ///
    /// #[job]
    /// async fn fetch(ctx: JobContext, path: String) -> Result<String, JobError> {
    ///     let http = ctx.data::<Http>()?;
    ///     Ok(format!("{}{path}", http.base))
    /// }
    /// # let _ = Fetch { path: String::new() };
    /// ```
    pub fn data<T: Send + Sync + 'static>(&self) -> Result<&T, JobError> {
        self.data.get::<T>().ok_or_else(|| {
            JobError::terminal(format!(
                "no `{}` was given to the worker; add it with `WorkerBuilder::data`",
                type_name::<T>()
            ))
            .with_code("job.data_missing")
        })
    }

    /// Whether the attempt was abandoned: its lease was lost, its timeout passed, or the
    /// worker's shutdown deadline ran out (see [`cancellation_token`](Self::cancellation_token)).
    pub fn is_cancelled(&self) -> bool {
        self.inner.is_cancelled()
    }

    /// Completes when the attempt is abandoned.
    pub async fn cancelled(&self) {
        self.inner.cancellation.cancelled().await;
    }

    /// The attempt's cancellation token, to hand to work the handler starts beyond its own
    /// future (a spawned task, a blocking thread, a child process): it fires when the lease is
    /// lost, the timeout passes or the worker's shutdown deadline runs out, at the moment the
    /// worker drops the handler's future.
    ///
    /// ```
    /// # use runledger::prelude::*;
    /// #[job(timeout = "10m")]
    /// async fn render(ctx: JobContext, frames: u32) -> Result<u32, JobError> {
    ///     let cancel = ctx.cancellation_token();
    ///     let rendered = tokio::task::spawn_blocking(move || {
    ///         let mut done = 0;
    ///         while done < frames && !cancel.is_cancelled() {
    ///             done += 1; // render one frame
    ///         }
    ///         done
    ///     });
    ///     rendered.await.map_err(|e| JobError::retryable(e.to_string()))
    /// }
    /// # let _ = Render { frames: 1 };
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.inner.cancellation.clone()
    }

    /// Stores `update` as the job's progress, replacing the previous one; operators see it on
    /// the job (the TUI's job detail, `get_job_by_id`). Fails with `job.lease_owner_mismatch`
    /// once the lease is lost; does nothing when no worker runs the job (a unit test).
    ///
    /// ```
    /// # use runledger::prelude::*;
    ///
    /// #[job]
    /// async fn import(ctx: JobContext, rows: u64) -> Result<u64, JobError> {
    ///     for done in (0..=rows).step_by(1000) {
    ///         ctx.progress(JobProgressUpdate::new().stage("import").completed(done).total(rows))
    ///             .await?;
    ///     }
    ///     Ok(rows)
    /// }
    /// # let _ = Import { rows: 1 };
    /// ```
    pub async fn progress(&self, update: JobProgressUpdate) -> Result<(), JobError> {
        self.inner
            .report_progress(&update)
            .await
            .map_err(|e| context_error(&e))
    }

    /// The checkpoint the job's last continued run committed (see
    /// [`Continuation`](crate::Continuation)), decoded as `T`: `None` on the first run. A stored
    /// value that does not decode fails the attempt with `job.invalid_checkpoint`.
    pub fn checkpoint<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, JobError> {
        self.inner
            .checkpoint
            .as_ref()
            .map(|value| {
                T::deserialize(value).map_err(|e| {
                    JobError::terminal(format!("the stored checkpoint does not decode: {e}"))
                        .with_code("job.invalid_checkpoint")
                })
            })
            .transpose()
    }

    /// Writes a line to the job's log (shown by the TUI); never waits.
    pub fn log(&self, level: JobLogLevel, message: impl Into<String>) {
        self.inner.log(level, message);
    }

    /// Like [`log`](Self::log), with structured fields (a JSON object).
    pub fn log_with_fields(&self, level: JobLogLevel, message: impl Into<String>, fields: Value) {
        self.inner.log_with_fields(level, message, fields);
    }

    /// Logs at [`JobLogLevel::Info`].
    pub fn info(&self, message: impl Into<String>) {
        self.inner.info(message);
    }

    /// Logs at [`JobLogLevel::Warn`].
    pub fn warn(&self, message: impl Into<String>) {
        self.inner.warn(message);
    }

    /// Logs at [`JobLogLevel::Error`].
    pub fn error(&self, message: impl Into<String>) {
        self.inner.error(message);
    }

    /// The stored outputs of prerequisites `keys`, in their order, read with one statement
    /// (for `#[output(..)]` arguments).
    pub(crate) async fn prerequisite_outputs(
        &self,
        keys: &[String],
    ) -> Result<Vec<Option<Value>>, JobError> {
        self.inner
            .prerequisite_outputs(keys)
            .await
            .map_err(|e| context_error(&e))
    }

    /// Up to `limit` stored outputs of the children of fan-out `key`, a prerequisite, from
    /// child `from` on, with the number of children (for [`Chunks`](crate::Chunks)).
    pub(crate) async fn fan_out_outputs(
        &self,
        key: &str,
        from: u64,
        limit: u64,
    ) -> Result<FanOutPage, JobError> {
        self.inner
            .fan_out_outputs(key, from, limit)
            .await
            .map_err(|e| context_error(&e))
    }
}

/// A context call that failed: a workflow problem or a payload that cannot be stored is
/// terminal (a retry would meet it again); storage problems and a lost lease are retryable.
pub(crate) fn context_error(e: &JobContextError) -> JobError {
    let terminal = e.code.starts_with("workflow.")
        || e.code.starts_with("payload.")
        || matches!(e.code, "job.invalid_payload" | "job.payload_too_deep");
    let error = if terminal {
        JobError::terminal(&e.message)
    } else {
        JobError::retryable(&e.message)
    };
    error.with_code(e.code)
}

impl From<engine_jobs::JobContext> for JobContext {
    fn from(inner: engine_jobs::JobContext) -> Self {
        Self::new(inner)
    }
}
