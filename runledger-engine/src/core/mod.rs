//! Pure contracts shared by every layer: identifiers, ids, statuses and handler types.
//! Nothing here touches the database or spawns tasks.

pub mod jobs;
pub mod metrics;
pub mod schedules;
pub mod trace;

/// Common imports for handler code.
///
/// ```
/// use runledger_engine::core::prelude::*;
///
/// let _ = JobCompletion::success();
/// ```
pub mod prelude {
    pub use super::jobs::{
        JobCompletion, JobContext, JobFailure, JobFailureKind, JobHandler, JobId,
        JobProgressUpdate, JobStatus, JobType, StepKey, WorkflowRunId, WorkflowRunStatus,
        WorkflowStepStatus, WorkflowType,
    };
    pub use async_trait::async_trait;
}
