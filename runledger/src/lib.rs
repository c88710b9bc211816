//! Runledger: a durable job queue and workflow engine for Rust, backed only by PostgreSQL.
//!
//! Annotate async functions with [`#[job]`](macro@job), declare multi-step work as typed
//! structs with [`#[workflow]`](macro@workflow), declare recurring work with
//! [`#[schedule]`](macro@schedule), and run a [`Worker`]: it finds everything annotated in the
//! binary by itself. State lives only in your PostgreSQL database.
//!
//! ```no_run
//! use std::time::Duration;
//! use runledger::prelude::*;
//!
//! #[job(name = "profiles.crawl", max_attempts = 5, timeout = "30s")]
//! async fn crawl(profile_id: u64) -> Result<String, JobError> {
//!     Ok(format!("page of {profile_id}"))
//! }
//!
//! #[job(name = "profiles.score")]
//! async fn score(ctx: JobContext) -> Result<usize, JobError> {
//!     let page = ctx.output(Research::CRAWL).await?;
//!     Ok(page.len())
//! }
//!
//! #[workflow(name = "profiles.research")]
//! struct Research {
//!     crawl: Crawl,
//!     #[after(crawl)]
//!     #[result]
//!     score: Score,
//! }
//!
//! #[schedule(cron = "0 */5 * * * *", name = "profiles.crawl.pinned")]
//! fn crawl_pinned() -> Crawl {
//!     Crawl { profile_id: 1 }
//! }
//!
//! # async fn demo() -> Result<(), runledger::Error> {
//! let worker = Worker::from_env()?;
//! let pool = worker.pool().clone();
//! let running = worker.start().await?;
//! let run = Research { crawl: Crawl { profile_id: 42 }, score: Score {} }
//!     .enqueue(&pool)
//!     .await?;
//! let score: usize = run.result(&pool, Wait::up_to(Duration::from_secs(30))).await?;
//! running.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! The untyped engine underneath (handlers over JSON, the DAG builder, admin reads, the
//! Supervisor) is [`engine`]; drop down to it for job types chosen at run time, schedules
//! created per tenant, or operator tools.

mod error;
mod job;
mod registry;
mod worker;
mod workflow;

pub mod prelude;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use runledger_engine as engine;

pub use error::{Error, HANDLER_ERROR_CODE, JobError};
pub use job::{
    EnqueueOptions, Job, JobContext, JobDefaults, JobHandle, enqueue_batch, enqueue_batch_with,
};
pub use registry::{
    RegisteredJob, RegisteredSchedule, SourceLocation, registered_jobs, registered_schedules,
};
pub use worker::{DEFAULT_SHUTDOWN_DEADLINE, RunningWorker, SchemaMode, Worker, WorkerBuilder};
pub use workflow::{External, Step, Wait, Workflow, WorkflowHandle, WorkflowOptions, WorkflowStep};

pub use runledger_macros::{job, schedule, workflow};
