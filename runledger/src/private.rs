//! What the macros' generated code names. Not a public API: it changes without notice.

pub use inventory;
pub use serde;
pub use serde_json;

pub use crate::registry::{JobRegistration, ScheduleRegistration};
pub use crate::workflow::{StepDraft, StepSpec};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::JobError;
use crate::job::Job;
use crate::workflow::WorkflowStep;

/// A type a `#[job]` argument may have.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a job argument",
    label = "not serializable",
    note = "job arguments are stored as JSON: the type must implement serde's `Serialize` and `Deserialize`"
)]
pub trait JobArgument: Serialize + DeserializeOwned {}
impl<T: Serialize + DeserializeOwned> JobArgument for T {}

/// A type a `#[job]` output may have.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a job output",
    label = "not serializable",
    note = "job outputs are stored as JSON: the type must implement serde's `Serialize` and `Deserialize`"
)]
pub trait JobOutput: Serialize + DeserializeOwned + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Send + 'static> JobOutput for T {}

/// An error type a `#[job]` fn may return.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a job error",
    label = "does not convert into `runledger::JobError`",
    note = "return `Result<T, E>` where `E` is `runledger::JobError` or any `std::error::Error + Send + Sync + 'static`"
)]
pub trait IntoJobError {
    /// Converts.
    fn into_job_error(self) -> JobError;
}
impl<E: Into<JobError>> IntoJobError for E {
    fn into_job_error(self) -> JobError {
        self.into()
    }
}

/// Checks a job argument type (spanned on the user's type).
pub const fn assert_job_argument<T: JobArgument>() {}
/// Checks a job output type (spanned on the user's type).
pub const fn assert_job_output<T: JobOutput>() {}
/// Checks a job error type (spanned on the user's type).
pub const fn assert_job_error<E: IntoJobError>() {}
/// Checks a workflow step type (spanned on the user's type).
pub const fn assert_workflow_step<S: WorkflowStep>() {}

/// Converts a handler's error.
pub fn into_job_error<E: IntoJobError>(error: E) -> JobError {
    error.into_job_error()
}

/// The job type and JSON payload a `#[schedule]` fn returns (taken by value so that the
/// generated call reads `schedule_payload(user_fn())`).
#[allow(clippy::needless_pass_by_value)]
pub fn schedule_payload<J: Job>(payload: J) -> Result<(&'static str, serde_json::Value), String> {
    serde_json::to_value(&payload)
        .map(|value| (J::NAME, value))
        .map_err(|e| format!("the payload could not be serialized: {e}"))
}

/// The payload of a `#[schedule]` stacked on a `#[job]` fn: `{}`, which must deserialize.
pub fn schedule_empty_payload<J: Job>() -> Result<(&'static str, serde_json::Value), String> {
    let empty = serde_json::Value::Object(serde_json::Map::new());
    serde_json::from_value::<J>(empty.clone())
        .map(|_| (J::NAME, empty))
        .map_err(|e| format!("the job's payload has required fields: {e}"))
}
