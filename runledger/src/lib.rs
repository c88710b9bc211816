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
//! // A step receives its prerequisites' outputs as `#[output(..)]` arguments; the compiler
//! // checks that each is a prerequisite of the step in every workflow that uses it.
//! #[job(name = "profiles.score")]
//! async fn score(#[output(Research::CRAWL)] page: String) -> Result<usize, JobError> {
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
//! Operator operations (cancel, requeue, pause a queue, disable a job type, prune, ...) are
//! in [`admin`]. The untyped engine underneath (handlers over JSON, the DAG builder, admin
//! reads, the Supervisor) is [`engine`]; drop down to it for job types chosen at run time,
//! schedules created per tenant, or your own dashboards.

#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items say which feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod catalog;
mod context;
mod continuation;
mod enqueue_options;
mod error;
mod fan_out;
mod handler;
mod job;
mod output;
mod reads;
mod step;
mod worker;
mod workflow;

pub mod admin;
#[cfg(feature = "opentelemetry")]
#[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
pub mod opentelemetry;
pub mod prelude;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

#[doc(hidden)]
#[path = "private/mod.rs"]
pub mod __private;

/// The kinds of workflow steps: a job step, a gate ([`External`]) or a [`FanOut`].
/// [`WorkflowHandle::complete_gate`] accepts only a step whose kind is a
/// [`Gate`](step_kinds::Gate), so completing a job step or a fan-out from outside does not
/// compile. Code rarely names these markers; compiler messages do.
pub mod step_kinds {
    pub use crate::fan_out::FanOutStep;
    pub use crate::step::{Gate, GateStep, JobStep, StepKind};
}

/// The untyped engine this crate is built on, under the module paths of the original
/// `runledger_core`, `runledger_postgres` and `runledger_runtime` crates (`engine::core`,
/// `engine::postgres`, `engine::runtime`): handlers over JSON, the DAG builder, the admin
/// reads, the `Supervisor` and its loops.
pub use runledger_engine as engine;

/// The `sqlx` this version is built on (0.9): pools, transactions and executors in Runledger's
/// signatures are its types. Use it through this path, or depend on the same minor version
/// of `sqlx` yourself, so that both name one crate.
///
/// ```no_run
/// # async fn demo() -> Result<(), runledger::Error> {
/// let pool = runledger::sqlx::PgPool::connect("postgres://localhost/app").await?;
/// let mut tx = pool.begin().await?; // `?` converts sqlx::Error into runledger::Error
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub use sqlx;

/// The `chrono` used for timestamps in Runledger's signatures.
pub use chrono;
/// The `serde_json` used for payloads and outputs in the engine's signatures.
pub use serde_json;
/// The `uuid` behind Runledger's ids.
pub use uuid;

pub use runledger_engine::core::jobs::JobProgressUpdate;
pub use runledger_engine::runtime::config::JobsConfig;

pub use context::JobContext;
pub use continuation::Continuation;
pub use enqueue_options::{EnqueueOptions, EnqueueOutcome, UniqueWhile};
pub use error::{Error, JobError};
pub use fan_out::{Chunks, FanOut};
pub use job::{IntentHandle, Job, JobHandle, enqueue_batch, enqueue_batch_with};
pub use step::{External, Step, WorkflowStep};
pub use worker::{RunningWorker, SchemaMode, Worker, WorkerBuilder};
pub use workflow::{Wait, Workflow, WorkflowHandle, WorkflowOptions};

/// Turns an `async fn` into a job type.
///
/// The arguments after an optional leading [`JobContext`] become the public fields of a
/// generated payload struct (serde, `Debug`, `Clone`) named in PascalCase after the fn; the
/// struct implements [`Job`] and is registered so that every [`Worker`] in the binary runs it.
/// An argument marked `#[output(Workflow::STEP)]` is no payload field: it receives the stored
/// output of that workflow step, which must be a prerequisite of this job's step (see
/// [`#[workflow]`](macro@workflow)); its type is the step's output type, or an `Option` of it
/// for an `#[after_terminal]` prerequisite (`None` when the prerequisite did not succeed).
/// The fn returns `Result<T, E>` (or an alias whose name ends in `Result`, such as
/// `anyhow::Result<T>` or `std::io::Result<T>`): `T` (any serde type) is the stored output, and
/// `E` is [`JobError`], or one of these, converted into a retryable failure carrying the error's
/// text: any `std::error::Error + Send + Sync + 'static`, `Box<dyn std::error::Error + Send +
/// Sync>`, `String`, `&'static str`, and `anyhow::Error` with this crate's `anyhow` feature. Any
/// other error type fails to compile with "`E` cannot be a job error", on the return type.
/// Arguments are owned serde types (`String`, not `&str`). The fn stays an ordinary async fn
/// you can call in unit tests.
///
/// Names (`name = "..."` here, in `#[workflow]`, `#[step(key = ..)]` and `#[schedule]`) follow
/// one rule, checked at compile time and by the engine: 1 to 255 ASCII letters, digits, `.`,
/// `_`, `-`, `:` or `/`.
///
/// | key | example | meaning |
/// | --- | --- | --- |
/// | `name` | `name = "emails.send"` | the stable job type (default: the fn name) |
/// | `payload` | `payload = SendMail` | the generated struct's name |
/// | `max_attempts` | `max_attempts = 5` | attempts before dead-lettering (≥ 1) |
/// | `timeout` | `timeout = "30s"` | per-attempt timeout: a whole number of `s`, `m`, `h` or `d` |
/// | `priority` | `priority = 10` | claim priority, higher first (may be negative) |
/// | `version` | `version = 2` | definition version (≥ 1) |
/// | `enabled` | `enabled = false` | the definition's enabled flag |
/// | `retain` | `retain = "3d"` | how long finished jobs of this type are kept before the pruner deletes them, whatever their end (default: the worker's `JOBS_RETAIN_*`, 1 day after success, 7 days after a dead letter or a cancel) |
/// | `queue` | `queue = "emails"` | the queue its jobs enter (default `default`); a worker runs the jobs of the queues it serves ([`WorkerBuilder::queues`](crate::WorkerBuilder::queues)) |
/// | `global_concurrency` | `global_concurrency = 2` | most jobs of this type running at once across all workers (≥ 1; default: no limit) |
///
/// ```
/// use runledger::prelude::*;
///
/// #[job(name = "emails.send", max_attempts = 5, timeout = "30s", priority = 10)]
/// async fn send_email(ctx: JobContext, to: String, subject: String) -> Result<(), JobError> {
///     if !to.contains('@') {
///         return Err(JobError::terminal("no @ in the address").with_code("email.invalid"));
///     }
///     let _ = (ctx.attempt(), subject);
///     Ok(())
/// }
///
/// let payload = SendEmail { to: "ada@example.com".into(), subject: "hi".into() };
/// assert_eq!(SendEmail::NAME, "emails.send");
/// # let _ = payload;
/// ```
pub use runledger_macros::job;

/// Turns a struct whose fields are steps into a typed workflow.
///
/// Each field is a step: a `#[job]` payload type or an [`External<T>`] gate. Field attributes
/// declare the DAG, checked at compile time (unknown steps, cycles, self and duplicate edges,
/// several results are errors on your tokens). The data flow is checked too: each
/// `#[output(W::STEP)]` argument of a step's job must name a step of this workflow that is
/// one of the step's prerequisites, read as an `Option` when it is an `#[after_terminal]`
/// one; otherwise the build fails with a message naming both steps, on the step's field. A job
/// whose reads name one workflow's steps is a step of that workflow only; a job that reads
/// nothing can be a step of any number of workflows.
///
/// | attribute | example | meaning |
/// | --- | --- | --- |
/// | `#[after(..)]` | `#[after(crawl, score)]` | runs once these steps succeeded; canceled if one does not |
/// | `#[after_terminal(..)]` | `#[after_terminal(charge)]` | runs once these steps finished, whatever the outcome |
/// | `#[result]` | `#[result]` | this step's output is the run's typed result ([`Workflow::Output`]) |
/// | `#[step(key = ..)]` | `#[step(key = "fetch")]` | the stored step key (default: the field name) |
/// | `#[step(priority = ..)]` | `#[step(priority = 10)]` | the step job's priority |
/// | `#[step(max_attempts = ..)]` | `#[step(max_attempts = 2)]` | the step job's attempts |
/// | `#[step(timeout = ..)]` | `#[step(timeout = "5m")]` | the step job's timeout |
/// | `#[step(continuation = ..)]` | `#[step(continuation = true)]` | the step's job may end attempts with a [`Continuation`]; the step (and its dependents) wait for the run that finishes |
///
/// A [`FanOut<J>`] field is a step filled at run time by another step with any number of `J`
/// jobs ([`JobContext::fan_out`]); its output is the `Vec` of theirs.
///
/// Each step field is a `#[job]` payload, an `External<T>` gate whose `T` is a serde type, or a
/// `FanOut<J>`;
/// a nested workflow, a `Vec` or an `Option` of jobs, and `#[step(priority | max_attempts |
/// timeout)]` on a gate are compile errors that say what to write instead. Two workflows with
/// the same name fail worker startup with `worker.duplicate_workflow`.
///
/// The attribute takes `name = "..."` (default: the struct name in snake case, acronyms kept
/// whole: `HTTPCrawl` is `http_crawl`). It implements
/// [`Workflow`] and adds one [`Step`] constant per field (`Research::CRAWL`) for typed reads
/// (`#[output(Research::CRAWL)]`) and typed gate completion
/// ([`WorkflowHandle::complete_gate`]).
///
/// ```
/// use runledger::prelude::*;
///
/// #[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
/// #[job] async fn score(
///     #[output(Research::CRAWL)] page: String,
///     #[output(Research::APPROVAL)] approved: bool,
/// ) -> Result<usize, JobError> {
///     Ok(if approved { page.len() } else { 0 })
/// }
///
/// #[workflow(name = "profiles.research")]
/// struct Research {
///     #[step(timeout = "2m")]
///     crawl: Crawl,
///     #[after(crawl)]
///     approval: External<bool>,
///     #[after(crawl, approval)]
///     #[result]
///     score: Score,
/// }
///
/// assert_eq!(Research::CRAWL.key(), "crawl");
/// assert_eq!(<Research as Workflow>::RESULT_STEP, Some("score"));
/// ```
pub use runledger_macros::workflow;

/// Declares a recurring job, synced by every [`Worker`] at startup and fired by their
/// schedulers (each fire exactly once, however many workers run).
///
/// Put it on a plain fn that returns the job payload to enqueue, or stack it on a `#[job]` fn
/// whose arguments are all `Option`s (each fire then enqueues `{}`). The cron expression is
/// checked at compile time with the scheduler's own parser, including that it fires at all
/// (`0 0 30 2 *` does not compile); it is evaluated in UTC, or in the IANA time zone `tz`.
///
/// **Weekdays** are numbered as in crontab in every form: `0` and `7` are Sunday, `1` is
/// Monday, `6` Saturday, and names work (`MON-FRI`), so `0 3 * * 1-5` and `0 0 3 * * 1-5` both
/// fire at 03:00 Monday to Friday. When day-of-month and day-of-week are both restricted, a
/// fire matches both. **Time zones**: with `tz`, fires are wall-clock times there, computed
/// across daylight-saving changes (a fire in the skipped spring hour runs at the first valid
/// time after it; a fixed-time fire in the repeated autumn hour runs once); the zone is stored
/// on the schedule.
///
/// | key | example | meaning |
/// | --- | --- | --- |
/// | `cron` | `cron = "0 */5 * * * *"` | required: a 5-field crontab line, 6 fields (seconds first, optional 7th year), or `@hourly`-style |
/// | `tz` | `tz = "Europe/Berlin"` | the IANA time zone the expression is evaluated in (default `UTC`), checked at compile time |
/// | `name` | `name = "reports.refresh"` | the unique schedule name (default: the fn name) |
/// | `jitter` | `jitter = "30s"` | upper bound of a deterministic per-fire delay |
/// | `active` | `active = false` | whether it fires (applied on every sync) |
///
/// ```
/// use runledger::prelude::*;
///
/// #[job(name = "reports.refresh")]
/// async fn refresh_reports(full: bool) -> Result<(), JobError> { let _ = full; Ok(()) }
///
/// #[schedule(cron = "0 */5 * * * *", name = "reports.refresh.5m", jitter = "30s")]
/// fn refresh() -> RefreshReports {
///     RefreshReports { full: false }
/// }
///
/// #[schedule(cron = "0 3 * * 1-5", tz = "Europe/Berlin", name = "sessions.cleanup.weekdays")]
/// #[job(name = "sessions.cleanup")]
/// async fn cleanup(older_than_days: Option<u32>) -> Result<u32, JobError> {
///     Ok(older_than_days.unwrap_or(30))
/// }
/// ```
pub use runledger_macros::schedule;
