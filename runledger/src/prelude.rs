//! The names most code needs: `use runledger::prelude::*;`.
//!
//! ```
//! use runledger::prelude::*;
//!
//! #[job(name = "prelude.example")]
//! async fn example(n: u32) -> Result<u32, JobError> {
//!     Ok(n + 1)
//! }
//! # let _ = Example { n: 1 };
//! ```

pub use crate::{
    Chunks, EnqueueOptions, External, FanOut, Job, JobContext, JobError, JobProgressUpdate, Step,
    Wait, Worker, Workflow, WorkflowHandle, WorkflowOptions, job, schedule, workflow,
};
