//! Operator operations: what an admin page, a script or an incident runbook does to jobs,
//! runs, queues, job types and schedules, across every organization.
//!
//! Each call is one statement (or one short transaction) on a pool, a connection or the
//! caller's transaction, takes ids and names as the typed API gives them ([`JobHandle::id`],
//! [`WorkflowHandle::id`], `#[job(name = "..")]`, `#[schedule(name = "..")]`), and fails with
//! [`Error`] and a stable code. A typed handle does the same for one job or run in its own
//! organization ([`JobHandle::requeue_if`], [`JobHandle::replay`], [`WorkflowHandle::cancel`]);
//! these calls are for operators, who act on any organization's work. The operator tool
//! (the binary `runledger`, package `runledger-cli`) runs the same operations from a shell.
//!
//! ```no_run
//! use runledger::admin;
//! use runledger::admin::DeadLetterListFilter;
//!
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
//! // An upstream was down: look at what died, fix it, then run those jobs again.
//! let dead = admin::list_dead_letters(&pool, &DeadLetterListFilter::new().job_type("invoices.send")).await?;
//! for letter in &dead {
//!     admin::requeue_job(&pool, letter.job_id).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! [`JobHandle::id`]: crate::JobHandle::id
//! [`JobHandle::requeue_if`]: crate::JobHandle::requeue_if
//! [`JobHandle::replay`]: crate::JobHandle::replay
//! [`WorkflowHandle::id`]: crate::WorkflowHandle::id
//! [`WorkflowHandle::cancel`]: crate::WorkflowHandle::cancel

use chrono::{DateTime, Utc};
use sqlx::{Acquire, PgExecutor, PgPool, Postgres};

use crate::engine::core::jobs::{JobId, WorkflowRunId};
use crate::engine::postgres::jobs::{self as store, JobReplay, TenantScope};
use crate::engine::runtime::config::JobsConfig;
use crate::engine::runtime::pruner::{Pruner, PrunerConfig};
use crate::error::Error;

pub use crate::engine::core::jobs::Retention;
pub use crate::engine::postgres::jobs::{
    DeadLetterListFilter, JobDeadLetter, JobDefinition, JobExplanation, JobHold,
    JobRequeueExpectation, JobRequeueOutcome, JobSchedule, PruneCounts, QueueSettings, ReplayedJob,
    WaitingStep,
};
pub use crate::engine::runtime::pruner::PrunerPass;

/// Why a job is not running: its status and every rule that holds it now (scheduled for
/// later, its queue paused, a queue or type limit reached, its resource key held, its workflow
/// prerequisites, a gate waiting, no live worker serving it). A workflow step not released yet
/// is explained by its id. `None` when no job or step has the id.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger::engine::core::jobs::JobId) -> Result<(), runledger::Error> {
/// if let Some(explanation) = runledger::admin::explain_job(&pool, job_id).await? {
///     for hold in &explanation.holds {
///         println!("held: {hold}");
///     }
/// }
/// # Ok(()) }
/// ```
pub async fn explain_job<'c>(
    acquire: impl Acquire<'c, Database = Postgres>,
    job: JobId,
) -> Result<Option<JobExplanation>, Error> {
    Ok(store::explain_job(acquire, job, TenantScope::Admin).await?)
}

/// Cancels a `PENDING` or `LEASED` job. A worker still running it is stopped at its next
/// heartbeat, and whatever it reports is refused.
///
/// Fails with `job.not_found`, `job.cancel_invalid_state` (it already finished) or
/// `job.workflow_cancel_not_supported` (a workflow step: cancel its run with
/// [`cancel_workflow_run`]).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger::engine::core::jobs::JobId) -> Result<(), runledger::Error> {
/// runledger::admin::cancel_job(&pool, job_id).await?;
/// # Ok(()) }
/// ```
pub async fn cancel_job<'e>(executor: impl PgExecutor<'e>, job: JobId) -> Result<(), Error> {
    Ok(store::cancel_job(executor, job, TenantScope::Admin).await?)
}

/// Puts a `DEAD_LETTERED` or `CANCELED` job back in the queue, due now, with a fresh
/// allowance of attempts: a new run (its run number grows by one); its history is kept.
///
/// Fails with `job.not_found`, `job.requeue_invalid_state` (for instance, already requeued) or
/// `job.workflow_requeue_not_supported` (a workflow step: requeuing it would bypass the DAG).
/// Prefer [`requeue_job_if`] when acting on what an operator saw.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger::engine::core::jobs::JobId) -> Result<(), runledger::Error> {
/// runledger::admin::requeue_job(&pool, job_id).await?;
/// # Ok(()) }
/// ```
pub async fn requeue_job<'e>(executor: impl PgExecutor<'e>, job: JobId) -> Result<(), Error> {
    Ok(store::requeue_job(executor, job, TenantScope::Admin).await?)
}

/// Compare-and-requeue: requeues the job only while its status and run number are still
/// those `expected` saw, so two operators acting on one failure (or one acting on a stale
/// screen) requeue it once; otherwise returns [`JobRequeueOutcome::ExpectationMismatch`] with
/// the current state and changes nothing. Fails like [`requeue_job`].
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger::engine::core::jobs::JobId) -> Result<(), runledger::Error> {
/// use runledger::admin::{self, JobRequeueExpectation, JobRequeueOutcome};
/// use runledger::engine::core::jobs::JobStatus;
///
/// // The dead letter an operator is looking at is the job's first run.
/// let seen = JobRequeueExpectation::new(JobStatus::DeadLettered, 1);
/// match admin::requeue_job_if(&pool, job_id, seen).await? {
///     JobRequeueOutcome::Requeued { run_number } => println!("run {run_number} started"),
///     _ => println!("someone else acted first"),
/// }
/// # Ok(()) }
/// ```
pub async fn requeue_job_if<'e>(
    executor: impl PgExecutor<'e>,
    job: JobId,
    expected: JobRequeueExpectation,
) -> Result<JobRequeueOutcome, Error> {
    Ok(store::requeue_job_if(executor, job, TenantScope::Admin, expected).await?)
}

/// Replays a `SUCCEEDED` job as a new job with the same type, payload, organization,
/// priority, attempts and timeout, and records the lineage (for instance once a bug that
/// made its output wrong is fixed). Idempotent on `replay_key`: the same key and reason
/// return the first replay (`created: false`); the key reused with another reason or job
/// fails with `job.replay_idempotency_conflict`.
///
/// Fails with `job.not_found`, `job.replay_invalid_state` (it has not succeeded),
/// `job.workflow_replay_not_supported` (a workflow step) or
/// `job.definition_not_found_or_disabled`.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger::engine::core::jobs::JobId) -> Result<(), runledger::Error> {
/// let replay = runledger::admin::replay_job(&pool, job_id, "fix-1234", "the exporter dropped rows").await?;
/// println!("replayed {} as {}", replay.source_job_id, replay.job_id);
/// # Ok(()) }
/// ```
pub async fn replay_job<'c, A>(
    acquire: A,
    job: JobId,
    replay_key: &str,
    reason: &str,
) -> Result<ReplayedJob, Error>
where
    A: Acquire<'c, Database = Postgres>,
{
    Ok(store::replay_job(acquire, &JobReplay::new(job, replay_key, reason)).await?)
}

/// Makes the `PENDING` jobs of `job_types` that wait for a time up to `up_to` (a delay, or
/// the backoff before a retry) claimable now, and wakes the workers. Returns how many jobs
/// were moved.
///
/// ```no_run
/// # use runledger::prelude::*;
/// # #[job(name = "emails.send")] async fn send_email(to: String) -> Result<(), JobError> { Ok(()) }
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// use runledger::chrono::{TimeDelta, Utc};
///
/// // The mail server is back: retry now what would have waited up to an hour.
/// let moved = runledger::admin::run_waiting_jobs_now(
///     &pool,
///     &[SendEmail::NAME],
///     Utc::now() + TimeDelta::hours(1),
/// )
/// .await?;
/// println!("{moved} jobs run now");
/// # Ok(()) }
/// ```
pub async fn run_waiting_jobs_now<'e>(
    executor: impl PgExecutor<'e>,
    job_types: &[&str],
    up_to: DateTime<Utc>,
) -> Result<u64, Error> {
    let job_types: Vec<String> = job_types.iter().map(|&t| t.to_owned()).collect();
    Ok(store::run_waiting_jobs_now(executor, up_to, &job_types).await?)
}

/// Cancels a workflow run: its pending and leased step jobs, open gates and blocked steps end
/// `CANCELED`, and nothing is released afterwards. Canceling a canceled run changes nothing.
///
/// Fails with `workflow.run_not_found` or `workflow.run_not_cancelable` (it finished).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, run_id: runledger::engine::core::jobs::WorkflowRunId) -> Result<(), runledger::Error> {
/// runledger::admin::cancel_workflow_run(&pool, run_id).await?;
/// # Ok(()) }
/// ```
pub async fn cancel_workflow_run<'e>(
    executor: impl PgExecutor<'e>,
    run: WorkflowRunId,
) -> Result<(), Error> {
    Ok(store::cancel_workflow_run(executor, run, TenantScope::Admin).await?)
}

/// Lists dead letters, newest first: the payload, final attempt, failure kind and error of
/// each job that died (a job that died in several runs has several).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// use runledger::admin::{self, DeadLetterListFilter};
///
/// let filter = DeadLetterListFilter::new().job_type("invoices.send").limit(50);
/// for dead in admin::list_dead_letters(&pool, &filter).await? {
///     println!("{} {:?} {:?}: {:?}", dead.job_id, dead.failure_kind, dead.error_code, dead.error_message);
/// }
/// # Ok(()) }
/// ```
pub async fn list_dead_letters<'e>(
    executor: impl PgExecutor<'e>,
    filter: &DeadLetterListFilter,
) -> Result<Vec<JobDeadLetter>, Error> {
    Ok(store::list_dead_letters(executor, filter).await?)
}

/// Pauses queue `name`: no worker claims its jobs until [`resume_queue`]. Running jobs
/// finish; enqueues go on. Worker restarts keep the pause. `job.invalid_queue` for a blank
/// name or one over 255 characters.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// use runledger::admin;
///
/// let settings = admin::pause_queue(&pool, "emails").await?;
/// assert!(settings.is_paused);
/// admin::resume_queue(&pool, "emails").await?;
/// # Ok(()) }
/// ```
pub async fn pause_queue<'e>(
    executor: impl PgExecutor<'e>,
    name: &str,
) -> Result<QueueSettings, Error> {
    Ok(store::pause_queue(executor, name).await?)
}

/// Resumes queue `name`: its pending jobs are claimable again at the next claim. See
/// [`pause_queue`].
pub async fn resume_queue<'e>(
    executor: impl PgExecutor<'e>,
    name: &str,
) -> Result<QueueSettings, Error> {
    Ok(store::resume_queue(executor, name).await?)
}

/// Sets (or, with `None`, removes) queue `name`'s global concurrency limit: at most `limit` of
/// its jobs run at once across all workers. The statement re-flags every pending job of the
/// queue: set limits when deploying, not in a loop. `job.invalid_global_concurrency` for a
/// limit below 1.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// let settings = runledger::admin::set_queue_global_concurrency(&pool, "emails", Some(5)).await?;
/// assert_eq!(settings.global_concurrency, Some(5));
/// # Ok(()) }
/// ```
pub async fn set_queue_global_concurrency<'e>(
    executor: impl PgExecutor<'e>,
    name: &str,
    limit: Option<i32>,
) -> Result<QueueSettings, Error> {
    Ok(store::set_queue_global_concurrency(executor, name, limit).await?)
}

/// Every queue an operator paused or limited, by name.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// for queue in runledger::admin::list_queues(&pool).await? {
///     println!("{} paused={} limit={:?}", queue.name, queue.is_paused, queue.global_concurrency);
/// }
/// # Ok(()) }
/// ```
pub async fn list_queues<'e>(executor: impl PgExecutor<'e>) -> Result<Vec<QueueSettings>, Error> {
    Ok(store::list_queue_settings(executor).await?)
}

/// Disables job type `job_type`: enqueues are refused with
/// `job.definition_not_found_or_disabled`, while jobs already queued still run. Worker
/// restarts keep it disabled (a worker's sync never re-enables a type).
///
/// Fails with `job_definition.not_found`, or `job_definition.active_schedule_exists` while an
/// active schedule enqueues it ([`deactivate_schedule`] first).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// use runledger::admin;
///
/// admin::disable_job_type(&pool, "invoices.send").await?;
/// // ... the invoicing provider is fixed ...
/// admin::enable_job_type(&pool, "invoices.send").await?;
/// # Ok(()) }
/// ```
pub async fn disable_job_type<'c, A>(acquire: A, job_type: &str) -> Result<JobDefinition, Error>
where
    A: Acquire<'c, Database = Postgres>,
{
    Ok(store::set_job_definition_enabled(acquire, job_type, false).await?)
}

/// Enables job type `job_type` again (see [`disable_job_type`]). `job_definition.not_found`
/// when no worker has synced it.
pub async fn enable_job_type<'c, A>(acquire: A, job_type: &str) -> Result<JobDefinition, Error>
where
    A: Acquire<'c, Database = Postgres>,
{
    Ok(store::set_job_definition_enabled(acquire, job_type, true).await?)
}

/// Stops schedule `name` from firing. A `#[schedule]` is synced with its `active` value at
/// every worker start, so this lasts until the next start unless the code says
/// `active = false`; a schedule written with the engine's `upsert_job_schedule` keeps it.
///
/// Fails with `job_schedule.not_found`.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// use runledger::admin;
///
/// admin::deactivate_schedule(&pool, "reports.nightly").await?;
/// admin::activate_schedule(&pool, "reports.nightly").await?;
/// # Ok(()) }
/// ```
pub async fn deactivate_schedule(pool: &PgPool, name: &str) -> Result<JobSchedule, Error> {
    Ok(store::set_job_schedule_active(pool, name, false).await?)
}

/// Lets schedule `name` fire again (see [`deactivate_schedule`]). Its job type must be
/// enabled: `job_schedule.definition_not_found_or_disabled` otherwise.
pub async fn activate_schedule(pool: &PgPool, name: &str) -> Result<JobSchedule, Error> {
    Ok(store::set_job_schedule_active(pool, name, true).await?)
}

/// Counts what a prune under `retention` would delete now, by how the work ended, without
/// deleting or locking anything.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// use runledger::admin::{self, Retention};
///
/// let due = admin::count_prunable(&pool, &Retention::default()).await?;
/// println!("{} jobs and {} runs are past their retention", due.jobs(), due.runs());
/// # Ok(()) }
/// ```
pub async fn count_prunable<'e>(
    executor: impl PgExecutor<'e>,
    retention: &Retention,
) -> Result<PruneCounts, Error> {
    Ok(store::count_prunable(executor, retention).await?)
}

/// Runs one pass of the pruner by hand: deletes finished jobs and workflow runs past
/// `retention` (a job type's own `retain` wins for its jobs), in bounded batches, repeated
/// while they come back full. When a worker's pruner holds the lock, the pass stops at once
/// and says so in [`PrunerPass::locked_out`].
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// use runledger::admin::{self, Retention};
///
/// let pass = admin::prune(&pool, &Retention::default()).await?;
/// println!("deleted {} jobs and {} runs", pass.deleted.jobs(), pass.deleted.runs());
/// # Ok(()) }
/// ```
pub async fn prune(pool: &PgPool, retention: &Retention) -> Result<PrunerPass, Error> {
    let config = PrunerConfig::from_jobs_config(&JobsConfig::default()).retention(*retention);
    Ok(Pruner::new(pool.clone(), config)?.run_once().await?)
}
