//! Persistence errors with stable codes and client-safe messages.

use std::fmt;

use super::connect::ConnectionFailure;

use crate::core::jobs::{
    IdentifierError, JobId, JobIntentId, JobStatus, WorkflowRunId, WorkflowValidationError,
};

/// Result alias for persistence calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Broad class of an [`Error`], for mapping onto HTTP statuses and the like. Branch on
/// [`Error::code`] for anything finer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorCategory {
    /// The caller's input is invalid.
    Validation,
    /// The addressed row does not exist (or is not visible in the caller's scope).
    NotFound,
    /// The request conflicts with the current state.
    Conflict,
    /// The database failed or could not be reached; retrying later may succeed.
    Storage,
}

/// A database failure, wrapped so that neither `Display` nor `Debug` leaks SQL or server
/// detail. [`QueryError::internal_message`] has the full diagnostic for logs.
pub struct QueryError {
    source: sqlx::Error,
}

impl QueryError {
    /// The full diagnostic, for server-side logs only.
    pub fn internal_message(&self) -> String {
        self.source.to_string()
    }

    /// The underlying `sqlx` error.
    pub fn source_error(&self) -> &sqlx::Error {
        &self.source
    }

    /// Whether the failure is about reaching or entering the server rather than the statement:
    /// I/O, TLS and pool errors, and the server's refusals of the session itself (authentication,
    /// a missing database, shutdown, no free connection slot).
    pub fn is_connection_error(&self) -> bool {
        ConnectionFailure::classify(&self.source).is_some()
    }

    /// Why the server could not be reached or entered, when that is what failed.
    pub fn connection_failure(&self) -> Option<ConnectionFailure> {
        ConnectionFailure::classify(&self.source)
    }

    /// Whether PostgreSQL refused a value the statement carried (SQLSTATE class 22, data
    /// exception, or 54, program limit exceeded: a NUL character, an out-of-range number or
    /// timestamp, a value over a size limit) or the value could not be encoded. The statement
    /// changed nothing, and sending the same values again fails the same way.
    pub fn is_rejected_value(&self) -> bool {
        match &self.source {
            sqlx::Error::Encode(_) => true,
            sqlx::Error::Database(err) => err
                .code()
                .is_some_and(|code| code.starts_with("22") || code.starts_with("54")),
            _ => false,
        }
    }

    fn kind(&self) -> &'static str {
        if self.is_connection_error() {
            "connection"
        } else if self.is_rejected_value() {
            "rejected_value"
        } else {
            match &self.source {
                sqlx::Error::Database(_) => "database",
                sqlx::Error::RowNotFound => "row_not_found",
                sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => "decode",
                _ => "other",
            }
        }
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("database operation failed")
    }
}

impl fmt::Debug for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The SQLSTATE names the failure (a deadlock, a constraint) without any server detail.
        let sqlstate = match &self.source {
            sqlx::Error::Database(err) => err.code(),
            _ => None,
        };
        f.debug_struct("QueryError")
            .field("kind", &self.kind())
            .field("sqlstate", &sqlstate)
            .finish()
    }
}

impl std::error::Error for QueryError {
    /// The `sqlx` error; its `Display` may carry SQL and server detail, so log it rather than
    /// showing it to clients.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<sqlx::Error> for QueryError {
    fn from(source: sqlx::Error) -> Self {
        Self { source }
    }
}

/// Everything a persistence call can fail with. `Display` is safe to show to API clients.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An identifier or other input failed validation.
    #[error("invalid input: {0}")]
    InvalidIdentifier(#[from] IdentifierError),
    /// A request field is out of range or inconsistent.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// Stable code of the rule that was broken.
        code: &'static str,
        /// What is wrong, safe to show.
        message: String,
    },
    /// Enqueue named a job type whose definition is missing or disabled.
    #[error("job type `{job_type}` is not defined or is disabled")]
    DefinitionNotFoundOrDisabled {
        /// The requested job type.
        job_type: String,
    },
    /// No job definition has this type.
    #[error("job definition `{job_type}` not found")]
    DefinitionNotFound {
        /// The requested job type.
        job_type: String,
    },
    /// The idempotency key is already used by a different enqueue request.
    #[error("idempotency key `{idempotency_key}` was already used for a different request")]
    IdempotencyConflict {
        /// The key.
        idempotency_key: String,
        /// The job created by the original request.
        existing_job_id: JobId,
    },
    /// The intent's idempotency key is already used by an intent with a different request.
    #[error("intent idempotency key `{idempotency_key}` was already used for a different request")]
    IntentIdempotencyConflict {
        /// The key.
        idempotency_key: String,
        /// The intent recorded by the original request.
        existing_intent_id: JobIntentId,
    },
    /// The replay key is already used by a replay of another job or with another reason.
    #[error("replay key `{replay_key}` was already used for a different replay")]
    ReplayIdempotencyConflict {
        /// The key.
        replay_key: String,
        /// The job the original replay created.
        existing_replay_job_id: JobId,
    },
    /// Workflow step jobs cannot be replayed on their own; that would run a step outside its
    /// DAG.
    #[error("job {job_id} belongs to a workflow and cannot be replayed directly")]
    WorkflowReplayNotSupported {
        /// The job.
        job_id: JobId,
    },
    /// The operation needs READ COMMITTED semantics (to see rows other transactions committed
    /// meanwhile), and the caller's transaction runs at a stricter isolation level.
    #[error(
        "this operation needs READ COMMITTED isolation; the transaction runs at {}",
        level.to_uppercase()
    )]
    IsolationLevelUnsupported {
        /// The transaction's isolation level as PostgreSQL names it (`repeatable read`,
        /// `serializable`).
        level: String,
    },
    /// The enqueue intent does not exist (or not in the caller's scope).
    #[error("enqueue intent {intent_id} not found")]
    IntentNotFound {
        /// The requested intent.
        intent_id: JobIntentId,
    },
    /// The job does not exist.
    #[error("job {job_id} not found")]
    JobNotFound {
        /// The requested job.
        job_id: JobId,
    },
    /// A worker write was refused: the caller no longer holds the job's lease (another worker
    /// took it, the job was canceled, or the lease simply expired).
    #[error("job {job_id} is not leased by this worker for this attempt")]
    LeaseOwnerMismatch {
        /// The job.
        job_id: JobId,
    },
    /// The job is not in a state that allows the operation.
    #[error("job {job_id} cannot be {operation} while {status}")]
    InvalidJobState {
        /// The job.
        job_id: JobId,
        /// Its current status.
        status: JobStatus,
        /// What was attempted (`canceled`, `requeued`, `replayed`).
        operation: &'static str,
    },
    /// Workflow step jobs cannot be requeued directly; that would bypass the DAG.
    #[error("job {job_id} belongs to a workflow and cannot be requeued directly")]
    WorkflowRequeueNotSupported {
        /// The job.
        job_id: JobId,
    },
    /// A singleton cannot go back to the queue while another job holds its unique key.
    #[error("job {job_id} cannot be requeued: {} holds its unique key", holder.map_or_else(|| "another job".to_owned(), |h| format!("job {h}")))]
    UniqueKeyTaken {
        /// The job.
        job_id: JobId,
        /// The job holding the key, when the requeue saw it (`None`: one enqueued while the
        /// requeue ran took the key first).
        holder: Option<JobId>,
    },
    /// Workflow step jobs cannot be canceled one by one; cancel the workflow run instead.
    #[error("job {job_id} belongs to a workflow; cancel the workflow run instead")]
    WorkflowCancelNotSupported {
        /// The job.
        job_id: JobId,
    },
    /// A definition cannot be disabled while active schedules still enqueue it.
    #[error("job definition `{job_type}` still has active schedules")]
    ActiveScheduleExists {
        /// The job type.
        job_type: String,
    },
    /// A workflow request is invalid (empty, duplicate keys, unknown prerequisite, cycle, …).
    #[error("invalid workflow: {0}")]
    InvalidWorkflow(#[from] WorkflowValidationError),
    /// The workflow idempotency key is already used by a different request.
    #[error(
        "idempotency key `{idempotency_key}` was already used for a different workflow request"
    )]
    WorkflowIdempotencyConflict {
        /// The key.
        idempotency_key: String,
        /// The run created by the original request.
        existing_run_id: WorkflowRunId,
    },
    /// The run does not exist, or not in the caller's scope.
    #[error("workflow run {run_id} not found")]
    WorkflowRunNotFound {
        /// The requested run.
        run_id: WorkflowRunId,
    },
    /// The run already finished and cannot be canceled.
    #[error("workflow run {run_id} already finished")]
    WorkflowRunNotCancelable {
        /// The run.
        run_id: WorkflowRunId,
    },
    /// A workflow operation (external completion, append) was refused; `code` says why.
    #[error("workflow request on `{subject}` refused ({code})")]
    WorkflowConflict {
        /// Stable code (`workflow.external_step_conflicting_completion_retry`,
        /// `workflow.append_conflicting_retry`, …).
        code: &'static str,
        /// The step key or mutation key concerned.
        subject: String,
    },
    /// A step asked for the output of a step that is not one of its prerequisites.
    #[error("step `{step_key}` is not a prerequisite of this step")]
    NotAPrerequisite {
        /// The requested step.
        step_key: String,
    },
    /// A cron expression could not be parsed.
    #[error("invalid cron expression `{expression}`")]
    InvalidCron {
        /// The expression.
        expression: String,
        /// The parser's reason, for logs.
        reason: String,
    },
    /// No schedule has this name.
    #[error("job schedule `{name}` not found")]
    ScheduleNotFound {
        /// The name.
        name: String,
    },
    /// An active schedule needs an enabled job definition.
    #[error("job type `{job_type}` of an active schedule is not defined or is disabled")]
    ScheduleDefinitionUnavailable {
        /// The job type.
        job_type: String,
    },
    /// A row held a value this version cannot interpret.
    #[error("stored data could not be read")]
    CorruptRow {
        /// What was wrong, for logs.
        detail: String,
    },
    /// The database failed or could not be reached.
    #[error(transparent)]
    Query(#[from] QueryError),
}

impl From<sqlx::Error> for Error {
    fn from(source: sqlx::Error) -> Self {
        Self::Query(QueryError::from(source))
    }
}

impl Error {
    /// Stable, dotted error code, e.g. `job.lease_owner_mismatch`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidIdentifier(err) => err.code(),
            Self::InvalidInput { code, .. } => code,
            Self::DefinitionNotFoundOrDisabled { .. } => "job.definition_not_found_or_disabled",
            Self::DefinitionNotFound { .. } => "job_definition.not_found",
            Self::IdempotencyConflict { .. } => "job.idempotency_conflict",
            Self::JobNotFound { .. } => "job.not_found",
            Self::IntentNotFound { .. } => "job.intent_not_found",
            Self::LeaseOwnerMismatch { .. } => "job.lease_owner_mismatch",
            Self::IntentIdempotencyConflict { .. } => "job.intent_idempotency_conflict",
            Self::ReplayIdempotencyConflict { .. } => "job.replay_idempotency_conflict",
            Self::WorkflowReplayNotSupported { .. } => "job.workflow_replay_not_supported",
            Self::IsolationLevelUnsupported { .. } => "validation.isolation_level_unsupported",
            Self::InvalidJobState { operation, .. } => match *operation {
                "canceled" => "job.cancel_invalid_state",
                "replayed" => "job.replay_invalid_state",
                _ => "job.requeue_invalid_state",
            },
            Self::WorkflowRequeueNotSupported { .. } => "job.workflow_requeue_not_supported",
            Self::WorkflowCancelNotSupported { .. } => "job.workflow_cancel_not_supported",
            Self::UniqueKeyTaken { .. } => "job.unique_key_taken",
            Self::ActiveScheduleExists { .. } => "job_definition.active_schedule_exists",
            Self::InvalidWorkflow(err) => err.code(),
            Self::InvalidCron { .. } => "job_schedule.invalid_cron",
            Self::ScheduleNotFound { .. } => "job_schedule.not_found",
            Self::ScheduleDefinitionUnavailable { .. } => {
                "job_schedule.definition_not_found_or_disabled"
            }
            Self::WorkflowIdempotencyConflict { .. } => "workflow.idempotency_conflict",
            Self::WorkflowRunNotFound { .. } => "workflow.run_not_found",
            Self::WorkflowRunNotCancelable { .. } => "workflow.run_not_cancelable",
            Self::WorkflowConflict { code, .. } => code,
            Self::NotAPrerequisite { .. } => "workflow.not_a_prerequisite",
            Self::CorruptRow { .. } => "storage.corrupt_row",
            Self::Query(err) if err.is_connection_error() => "storage.unavailable",
            Self::Query(err) if err.is_rejected_value() => "validation.unstorable_value",
            Self::Query(_) => "storage.query_failed",
        }
    }

    /// The broad class of the error.
    pub fn category(&self) -> ErrorCategory {
        match self {
            Self::InvalidIdentifier(_)
            | Self::InvalidInput { .. }
            | Self::InvalidWorkflow(_)
            | Self::InvalidCron { .. }
            | Self::IsolationLevelUnsupported { .. } => ErrorCategory::Validation,
            Self::ScheduleNotFound { .. } => ErrorCategory::NotFound,
            Self::ScheduleDefinitionUnavailable { .. } => ErrorCategory::Conflict,
            Self::DefinitionNotFound { .. }
            | Self::JobNotFound { .. }
            | Self::IntentNotFound { .. }
            | Self::WorkflowRunNotFound { .. } => ErrorCategory::NotFound,
            Self::NotAPrerequisite { .. } => ErrorCategory::Validation,
            Self::DefinitionNotFoundOrDisabled { .. }
            | Self::IdempotencyConflict { .. }
            | Self::IntentIdempotencyConflict { .. }
            | Self::ReplayIdempotencyConflict { .. }
            | Self::WorkflowReplayNotSupported { .. }
            | Self::LeaseOwnerMismatch { .. }
            | Self::InvalidJobState { .. }
            | Self::WorkflowRequeueNotSupported { .. }
            | Self::WorkflowCancelNotSupported { .. }
            | Self::UniqueKeyTaken { .. }
            | Self::ActiveScheduleExists { .. }
            | Self::WorkflowIdempotencyConflict { .. }
            | Self::WorkflowRunNotCancelable { .. }
            | Self::WorkflowConflict { .. } => ErrorCategory::Conflict,
            Self::Query(err) if err.is_rejected_value() => ErrorCategory::Validation,
            Self::CorruptRow { .. } | Self::Query(_) => ErrorCategory::Storage,
        }
    }

    /// Full diagnostic for server-side logs; may contain SQL state and server detail.
    pub fn internal_message(&self) -> String {
        match self {
            Self::Query(err) => err.internal_message(),
            Self::CorruptRow { detail } => format!("corrupt row: {detail}"),
            Self::InvalidCron { expression, reason } => {
                format!("invalid cron expression `{expression}`: {reason}")
            }
            other => other.to_string(),
        }
    }

    /// Whether the statement failed for a passing reason rather than because of what it
    /// carried: the database could not be reached or dropped the connection (SQLSTATE class 08,
    /// and class 57 as a restarting server sends it), or a deadlock or serialization failure
    /// (class 40). Worth retrying while the work it carries still stands (a lease holds).
    pub(crate) fn is_transient(&self) -> bool {
        let Self::Query(query) = self else {
            return false;
        };
        query.is_connection_error()
            || matches!(
                query.source_error(),
                sqlx::Error::Database(db) if db.code().is_some_and(|code| {
                    ["08", "40", "57"].iter().any(|class| code.starts_with(class))
                })
            )
    }

    pub(crate) fn invalid_input(code: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidInput {
            code,
            message: message.into(),
        }
    }

    /// Refuses an isolation level other than READ COMMITTED (or READ UNCOMMITTED, which
    /// PostgreSQL runs as READ COMMITTED), as `current_setting('transaction_isolation')` names
    /// it.
    pub(crate) fn require_read_committed(level: &str) -> Result<()> {
        match level {
            "read committed" | "read uncommitted" => Ok(()),
            other => Err(Self::IsolationLevelUnsupported {
                level: other.to_owned(),
            }),
        }
    }

    pub(crate) fn corrupt(detail: impl fmt::Display) -> Self {
        Self::CorruptRow {
            detail: detail.to_string(),
        }
    }
}
