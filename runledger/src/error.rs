//! The two error types of the typed layer: [`JobError`] for handlers, [`Error`] for callers.

use std::fmt;
use std::time::Duration;

use crate::engine;
use crate::engine::core::jobs::{
    JobCompletion, JobContinuation, JobFailure, JobFailureKind, JobId, WorkflowRunId,
    WorkflowValidationError,
};
use crate::engine::postgres::jobs::WorkflowRunHandleError;
use crate::engine::runtime::RuntimeError;
use crate::engine::runtime::catalog::CatalogError;
use crate::engine::runtime::config::JobsConfigError;

/// Why a job attempt failed: retryable (the default) or terminal, with a stable code.
///
/// Any `std::error::Error` converts into a retryable `JobError` with `?`, so a handler can use
/// the errors of the libraries it calls directly. Build one by hand when the failure is
/// permanent (retrying cannot help) or when the next attempt should wait.
///
/// `JobError` deliberately does not implement `std::error::Error` itself: that is what lets
/// every error type convert into it.
///
/// ```
/// use std::time::Duration;
/// use runledger::JobError;
///
/// fn parse(input: &str) -> Result<u32, JobError> {
///     Ok(input.parse::<u32>()?) // ParseIntError: retryable, code `job.handler_error`
/// }
/// assert!(!parse("x").unwrap_err().is_terminal());
///
/// let bad_address = JobError::terminal("no such mailbox").with_code("email.invalid_address");
/// assert!(bad_address.is_terminal());
/// assert_eq!(bad_address.code(), "email.invalid_address");
///
/// let busy = JobError::retryable("smtp busy").retry_after(Duration::from_secs(60));
/// assert!(!busy.is_terminal());
/// ```
pub struct JobError {
    failure: JobFailure,
    /// Set when the handler returned a [`Continuation`](crate::Continuation) instead.
    continuation: Option<Box<JobContinuation>>,
}

impl JobError {
    /// The code of a failure built by [`retryable`](Self::retryable) or
    /// [`terminal`](Self::terminal), or converted from any `std::error::Error` with `?`.
    pub const HANDLER_ERROR_CODE: &str = "job.handler_error";

    /// A failure worth retrying while attempts remain (code `job.handler_error`).
    pub fn retryable(message: impl fmt::Display) -> Self {
        Self::from_failure(JobFailure::retryable(
            Self::HANDLER_ERROR_CODE,
            message.to_string(),
        ))
    }

    /// A permanent failure: the job is dead-lettered at once, whatever attempts remain
    /// (code `job.handler_error` unless [`with_code`](Self::with_code) sets one).
    pub fn terminal(message: impl fmt::Display) -> Self {
        Self::from_failure(JobFailure::terminal(
            Self::HANDLER_ERROR_CODE,
            message.to_string(),
        ))
    }

    /// Replaces the stable code stored on the attempt (e.g. `smtp.unavailable`).
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.failure.code = code.into();
        self
    }

    /// Asks that the next attempt not start within `delay`. A lower bound only: the job's
    /// backoff policy may wait longer.
    pub fn retry_after(self, delay: Duration) -> Self {
        Self {
            failure: self.failure.with_retry_after(delay),
            ..self
        }
    }

    /// Whether the failure dead-letters the job at once.
    pub fn is_terminal(&self) -> bool {
        self.failure.kind != JobFailureKind::Retryable
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        &self.failure.code
    }

    /// The message stored on the attempt.
    pub fn message(&self) -> &str {
        &self.failure.message
    }

    /// Wraps an engine failure (code, kind and retry hint kept as they are).
    pub fn from_failure(failure: JobFailure) -> Self {
        Self {
            failure,
            continuation: None,
        }
    }

    /// The engine's failure value, as the runtime stores it. A
    /// [`Continuation`](crate::Continuation) has none: it becomes the terminal failure
    /// `job.continuation_misplaced` (a worker never calls this for one).
    pub fn into_failure(self) -> JobFailure {
        self.failure
    }

    /// Whether this is a [`Continuation`](crate::Continuation) rather than a failure.
    pub fn is_continuation(&self) -> bool {
        self.continuation.is_some()
    }

    /// What the engine stores for this attempt: a continuation, or the failure.
    pub(crate) fn into_outcome(self) -> Result<JobCompletion, JobFailure> {
        match self.continuation {
            Some(continuation) => Ok(JobCompletion::continuing(*continuation)),
            None => Err(self.failure),
        }
    }

    pub(crate) fn continuing(continuation: JobContinuation) -> Self {
        Self {
            failure: JobFailure::terminal(
                "job.continuation_misplaced",
                "the handler continued the job, but this continuation was used as a failure",
            ),
            continuation: Some(Box::new(continuation)),
        }
    }

    pub(crate) fn coded_terminal(code: &str, message: impl fmt::Display) -> Self {
        Self::terminal(message).with_code(code)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    fn from(error: E) -> Self {
        Self::retryable(chain_message(&error))
    }
}

/// An error's message followed by those of its sources: `outer: inner: root`.
pub(crate) fn chain_message(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("kind", &self.failure.kind)
            .field("code", &self.failure.code)
            .field("message", &self.failure.message)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.failure.message, self.failure.code)
    }
}

/// What can go wrong when calling the typed API: enqueueing, waiting for results, completing
/// gates, and starting a [`Worker`](crate::Worker). Each variant has a stable
/// [`code`](Self::code); `Display` is safe to show to API clients.
///
/// ```
/// use runledger::Error;
///
/// let err = Error::DuplicateJob {
///     name: "emails.send".into(),
///     first: "#[job] at src/a.rs:3:1".into(),
///     second: "#[job] at src/b.rs:9:1".into(),
/// };
/// assert_eq!(err.code(), "worker.duplicate_job");
/// assert!(err.to_string().contains("src/b.rs:9:1"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A database call failed or refused the request (see the engine error's code).
    #[error(transparent)]
    Database(#[from] engine::postgres::Error),
    /// A payload or gate output could not be serialized to JSON.
    #[error("the {what} could not be serialized to JSON: {message}")]
    Serialize {
        /// What was being serialized.
        what: &'static str,
        /// serde's message.
        message: String,
    },
    /// A stored output did not deserialize into the declared output type.
    #[error("the stored output of {what} does not match its Rust type: {message}")]
    OutputInvalid {
        /// Which job or workflow.
        what: String,
        /// serde's message.
        message: String,
    },
    /// The workflow definition was refused (a mistake the macro could not see).
    #[error(transparent)]
    Workflow(#[from] WorkflowValidationError),
    /// Waiting for or reading a workflow result failed.
    #[error(transparent)]
    WorkflowHandle(#[from] WorkflowRunHandleError),
    /// A handle made with `JobHandle::<J>::from_id` names a job of another type.
    #[error("job {id} is a `{found}` job, not a `{expected}` job")]
    JobTypeMismatch {
        /// The job.
        id: JobId,
        /// The handle's job type.
        expected: &'static str,
        /// The stored job type.
        found: String,
    },
    /// A handle made with `WorkflowHandle::<W>::from_id` names a run of another workflow.
    #[error("workflow run {id} is a `{found}` run, not a `{expected}` run")]
    WorkflowTypeMismatch {
        /// The run.
        id: WorkflowRunId,
        /// The handle's workflow type.
        expected: &'static str,
        /// The stored workflow type.
        found: String,
    },
    /// Two `#[job]`s, or a `#[job]` and an engine handler given to
    /// [`WorkerBuilder::handler`](crate::WorkerBuilder::handler), use the same name.
    #[error("job name `{name}` is registered twice: {first} and {second}")]
    DuplicateJob {
        /// The name.
        name: String,
        /// The first registration (a source location or an engine handler).
        first: String,
        /// The second registration.
        second: String,
    },
    /// Two `#[workflow]`s use the same name (given explicitly, or the default name of two
    /// structs with the same name in different modules).
    #[error("workflow name `{name}` is registered twice: at {first} and at {second}")]
    DuplicateWorkflow {
        /// The name.
        name: String,
        /// Where the first `#[workflow]` is.
        first: String,
        /// Where the second `#[workflow]` is.
        second: String,
    },
    /// Two `#[schedule]`s use the same name.
    #[error("schedule name `{name}` is registered twice: at {first} and at {second}")]
    DuplicateSchedule {
        /// The name.
        name: String,
        /// Where the first registration is.
        first: String,
        /// Where the second registration is.
        second: String,
    },
    /// A `#[schedule]`'s payload could not be built.
    #[error("schedule `{name}` (at {location}) has no usable payload: {message}")]
    SchedulePayload {
        /// The schedule.
        name: String,
        /// Where it is declared.
        location: String,
        /// What went wrong.
        message: String,
    },
    /// The database could not be reached or entered at startup: the message names the host,
    /// port, database and user, the cause and what to check.
    #[error(transparent)]
    Connection(#[from] engine::postgres::ConnectionError),
    /// `DATABASE_URL` is missing or unusable.
    #[error("DATABASE_URL {problem}")]
    DatabaseUrl {
        /// What is wrong with it.
        problem: String,
    },
    /// A `JOBS_*` variable is malformed.
    #[error(transparent)]
    Config(#[from] JobsConfigError),
    /// The schema is missing, incompatible or could not be migrated.
    #[error(transparent)]
    Schema(#[from] engine::postgres::SchemaCompatibilityError),
    /// Syncing definitions or schedules failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The runtime refused to start or stopped with an error.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// So that `?` works on `pool.begin()`, `tx.commit()` and any other `sqlx` call in a function
/// that returns [`Error`].
impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        Self::Database(engine::postgres::Error::from(err))
    }
}

impl Error {
    /// Stable dotted code, e.g. `worker.duplicate_job` or the wrapped engine error's code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Database(err) => err.code(),
            Self::Serialize { .. } => "payload.serialize_failed",
            Self::OutputInvalid { .. } => "job.output_invalid",
            Self::Workflow(err) => err.code(),
            Self::WorkflowHandle(err) => err.code(),
            Self::JobTypeMismatch { .. } => "job.type_mismatch",
            Self::WorkflowTypeMismatch { .. } => "workflow.type_mismatch",
            Self::DuplicateJob { .. } => "worker.duplicate_job",
            Self::DuplicateWorkflow { .. } => "worker.duplicate_workflow",
            Self::DuplicateSchedule { .. } => "worker.duplicate_schedule",
            Self::SchedulePayload { .. } => "worker.schedule_payload_invalid",
            Self::Connection(err) => err.code(),
            Self::DatabaseUrl { .. } => "worker.database_url_invalid",
            Self::Config(err) => err.code(),
            Self::Schema(err) => err.code(),
            Self::Catalog(err) => err.code(),
            Self::Runtime(err) => err.code(),
        }
    }

    pub(crate) fn serialize(what: &'static str, err: &serde_json::Error) -> Self {
        Self::Serialize {
            what,
            message: err.to_string(),
        }
    }
}
