//! Job and workflow contracts: identifiers, ids, statuses and the handler interface.

mod handler;
mod identifiers;
mod ids;
mod status;

pub use handler::{JobCompletion, JobContext, JobFailure, JobHandler, JobProgressUpdate};
pub use identifiers::{IdentifierError, JobType, MAX_IDENTIFIER_CHARS, StepKey, WorkflowType};
pub use ids::{JobId, JobScheduleId, WorkflowRunId, WorkflowStepId};
pub use status::{
    JobAttemptOutcome, JobEventType, JobFailureKind, JobStatus, UnknownStatus, WorkflowRunStatus,
    WorkflowStepStatus,
};
