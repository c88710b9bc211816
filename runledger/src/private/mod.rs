//! What the macros' generated code names. Not a public API: it changes without notice.

pub use inventory;
pub use serde;
pub use serde_json;

pub use crate::catalog::{JobRegistration, ScheduleRegistration, WorkflowRegistration};
pub use crate::context::Data;
pub use crate::engine::core::jobs::JobDefaults;
pub use crate::engine::runtime::registry::JobHandler;
pub use crate::job::ReadDecl;
pub use crate::reads::{
    Edge, ReadOk, ReadOutputs, ReadProbe, ReadUnreadable, StepReads, check as check_reads,
    declare_read,
};
pub use crate::workflow::StepSpec;

pub mod checks;

pub use runledger_macros::RunledgerAttached;

use crate::job::Job;

/// The return type of a `#[job]` fn: a `Result` (or an alias of one, such as
/// `anyhow::Result<T>` or `std::io::Result<T>`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `Result`: a #[job] fn returns `Result<T, E>`",
    label = "not a `Result`",
    note = "`T` is the job's output (a serde type) and `E` its error (`runledger::JobError`, any `std::error::Error`, `String`, ...)"
)]
pub trait JobReturn {
    /// The output.
    type Ok;
    /// The error.
    type Err;
    /// The `Result` itself.
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
}

impl<T, E> JobReturn for Result<T, E> {
    type Ok = T;
    type Err = E;

    fn into_result(self) -> Self {
        self
    }
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
