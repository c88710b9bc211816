//! Job and workflow contracts: identifiers, ids, statuses and the handler interface.

mod definition;
mod fresh_ids;
mod handler;
mod identifiers;
mod ids;
pub mod limits;
mod logs;
mod retention;
mod status;
mod workflow;

pub use definition::JobDefaults;
pub(crate) use fresh_ids::{fresh_uuid, fresh_uuids};
pub(crate) use handler::JobServices;
pub use handler::{
    FanOutChild, FanOutPage, JobCompletion, JobContext, JobContextError, JobContinuation,
    JobFailure, JobHandler, JobProgressSink, JobProgressUpdate, JobProgressWriter, StepOutputError,
    StepOutputReader, StepOutputs, WorkflowAppender, WorkflowStepAppender,
};
pub use identifiers::{
    IdentifierError, JobType, MAX_IDENTIFIER_CHARS, NAME_CHARACTERS, NameError, StepKey,
    WorkflowType,
};
pub use ids::{JobId, JobIntentId, JobScheduleId, WorkflowRunId, WorkflowStepId};
pub use logs::{JobLogLine, JobLogSink, JobLogWriter, MAX_LOG_MESSAGE_CHARS};
pub use retention::{
    DEFAULT_RETAIN_CANCELED, DEFAULT_RETAIN_DEAD_LETTERED, DEFAULT_RETAIN_SUCCEEDED, MAX_RETENTION,
    MIN_RETENTION, Retention,
};
pub use status::{
    JobAttemptOutcome, JobEventType, JobFailureKind, JobIntentStatus, JobLogLevel, JobStage,
    JobStatus, UnknownStatus, WorkflowRunStatus, WorkflowStepStatus,
};
pub use workflow::{
    WorkflowDagBuilder, WorkflowDependencyCondition, WorkflowRunEnqueue, WorkflowRunEnqueueBuilder,
    WorkflowStepDependency, WorkflowStepEnqueue, WorkflowStepEnqueueBuilder, WorkflowStepKind,
    WorkflowValidationError, canonical_steps, check_step_organizations, validate_steps,
};
