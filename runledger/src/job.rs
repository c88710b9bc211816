//! Typed jobs: the [`Job`] trait that `#[job]` implements, typed enqueueing, and the handles
//! on what was enqueued: [`JobHandle`] for a job, [`IntentHandle`] for a durable enqueue
//! intent.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::{Acquire, Postgres};
use std::future::Future;
use std::marker::PhantomData;
use uuid::Uuid;

use crate::context::JobContext;
use crate::engine::core::jobs::{JobDefaults, JobId, JobIntentId, JobIntentStatus, JobStatus};
use crate::engine::postgres::jobs::{
    EnqueueOutcome, JobEnqueue, JobExplanation, JobIntentRecord, JobRecord, JobReplay,
    JobRequeueExpectation, JobRequeueOutcome, TenantScope, enqueue_jobs, explain_job,
    get_job_by_id, get_job_enqueue_intent, record_job_enqueue_intent, replay_job, requeue_job_if,
};
use crate::enqueue_options::EnqueueOptions;
use crate::error::{Error, JobError};
use crate::output;

/// A job payload type: what `#[job]` generates from an `async fn`.
///
/// The payload is the job's arguments (stored as JSON); [`NAME`](Self::NAME) is the stable
/// job type stored in the database, so renaming the Rust function does not orphan queued jobs.
/// Implemented by the macro; implement it by hand only for a payload that is not a function's
/// argument list.
///
/// ```
/// use runledger::prelude::*;
///
/// #[job(name = "emails.send", max_attempts = 5, timeout = "30s")]
/// async fn send_email(to: String) -> Result<u32, JobError> {
///     Ok(to.len() as u32)
/// }
///
/// assert_eq!(SendEmail::NAME, "emails.send");
/// assert_eq!(SendEmail::DEFAULTS.max_attempts, Some(5));
/// assert_eq!(SendEmail::DEFAULTS.timeout_seconds, Some(30));
/// # let _ = SendEmail { to: "a@example.com".into() };
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a Runledger job",
    label = "not a job payload",
    note = "annotate an `async fn` with `#[job]`: it generates a payload struct that implements `Job`"
)]
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The job type stored in the database (`#[job(name = "...")]`; default: the fn name).
    const NAME: &'static str;

    /// Definition values written when a worker syncs definitions at startup.
    const DEFAULTS: JobDefaults = JobDefaults::new();

    /// The prerequisite outputs the job reads (its `#[output(..)]` arguments), checked by each
    /// `#[workflow]` that uses it (generated).
    #[doc(hidden)]
    const READS: &'static [ReadDecl] = &[];

    /// What a successful attempt returns; stored as JSON on the job (and on its workflow step),
    /// so a serde type (`#[job]` checks it at compile time; [`JobHandle::output`] requires
    /// `Deserialize`).
    type Output: Send + 'static;

    /// Runs one attempt.
    fn run(self, ctx: JobContext) -> impl Future<Output = Result<Self::Output, JobError>> + Send;

    /// Enqueues this payload on a pool, a connection, or inside the caller's transaction
    /// (`&mut *tx`), so that the job commits or rolls back with the caller's own rows.
    ///
    /// ```no_run
    /// # use runledger::prelude::*;
    /// # #[job] async fn send_email(to: String) -> Result<(), JobError> { Ok(()) }
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let mut tx = pool.begin().await?;
    /// // ... insert the user row with &mut *tx ...
    /// let job = SendEmail { to: "ada@example.com".into() }.enqueue(&mut *tx).await?;
    /// tx.commit().await?;
    /// println!("enqueued {}", job.id());
    /// # Ok(()) }
    /// ```
    fn enqueue<'c, A>(
        &self,
        executor: A,
    ) -> impl Future<Output = Result<JobHandle<Self>, Error>> + Send
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        self.enqueue_with(executor, EnqueueOptions::new())
    }

    /// Enqueues this payload with [`EnqueueOptions`] (idempotency key, delay, priority,
    /// organization).
    fn enqueue_with<'c, A>(
        &self,
        executor: A,
        options: EnqueueOptions,
    ) -> impl Future<Output = Result<JobHandle<Self>, Error>> + Send
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        let payload = serde_json::to_value(self);
        async move {
            let payload = payload.map_err(|e| Error::serialize("job payload", &e))?;
            let mut handles = enqueue_values::<Self, A>(executor, &[(payload, options)]).await?;
            handles.pop().ok_or_else(|| {
                Error::Database(crate::engine::postgres::Error::CorruptRow {
                    detail: "enqueue returned no job".to_owned(),
                })
            })
        }
    }

    /// Records a durable enqueue intent for this payload under `idempotency_key`, inside the
    /// caller's transaction (`&mut *tx`): the job is enqueued later by the intent promoter of
    /// a worker that runs this job type, even one deployed after the intent was recorded.
    ///
    /// Choose it over [`enqueue`](Self::enqueue) when the producer may commit before any
    /// worker registered the type (a rolling deploy, a new job type): `enqueue` fails then
    /// with `job.definition_not_found_or_disabled`, an intent waits. Recording the same payload
    /// under the same key again returns the first intent; another payload under it fails with
    /// `job.intent_idempotency_conflict`. If a job with this key but another request already
    /// exists when the promoter runs, the intent ends `CONFLICTED`.
    ///
    /// ```no_run
    /// # use runledger::prelude::*;
    /// # #[job] async fn confirm_order(order_id: u64) -> Result<(), JobError> { Ok(()) }
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let mut tx = pool.begin().await?;
    /// // ... insert the order row with &mut *tx ...
    /// let intent = ConfirmOrder { order_id: 42 }.record_intent(&mut *tx, "order:42:confirm").await?;
    /// tx.commit().await?; // a rollback would leave no intent and no job
    /// # let _ = intent;
    /// # Ok(()) }
    /// ```
    fn record_intent<'c, A>(
        &self,
        executor: A,
        idempotency_key: &str,
    ) -> impl Future<Output = Result<IntentHandle<Self>, Error>> + Send
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        self.record_intent_with(
            executor,
            EnqueueOptions::new().idempotency_key(idempotency_key),
        )
    }

    /// Like [`record_intent`](Self::record_intent), with [`EnqueueOptions`]; the options must
    /// carry the idempotency key (`job.intent_idempotency_key_required` otherwise).
    fn record_intent_with<'c, A>(
        &self,
        executor: A,
        options: EnqueueOptions,
    ) -> impl Future<Output = Result<IntentHandle<Self>, Error>> + Send
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        let payload = serde_json::to_value(self);
        async move {
            let payload = payload.map_err(|e| Error::serialize("job payload", &e))?;
            record_intent::<Self, A>(executor, &payload, &options).await
        }
    }
}

/// One `#[output(..)]` argument of a job: which step of which workflow it reads, and whether
/// it reads it as an `Option` (generated code only; made by `declare_read`, which checks the
/// argument's type against the step's output).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDecl {
    pub(crate) workflow: &'static str,
    pub(crate) key: &'static str,
    pub(crate) optional: bool,
    pub(crate) paged: bool,
}

impl ReadDecl {
    /// The workflow whose step is read.
    pub const fn workflow(&self) -> &'static str {
        self.workflow
    }

    /// The key of the step read.
    pub const fn key(&self) -> &'static str {
        self.key
    }

    /// Whether the argument is an `Option` (a missing output reads as `None`).
    pub const fn optional(&self) -> bool {
        self.optional
    }
}

/// Enqueues many payloads of one job type in one statement, all or nothing.
///
/// ```no_run
/// # use runledger::prelude::*;
/// # #[job] async fn render(n: u32) -> Result<(), JobError> { Ok(()) }
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
/// let jobs = runledger::enqueue_batch(&pool, (0..100).map(|n| Render { n })).await?;
/// assert_eq!(jobs.len(), 100);
/// # Ok(()) }
/// ```
pub async fn enqueue_batch<'c, J, A, I>(
    executor: A,
    payloads: I,
) -> Result<Vec<JobHandle<J>>, Error>
where
    J: Job,
    A: Acquire<'c, Database = Postgres> + Send,
    I: IntoIterator<Item = J>,
{
    enqueue_batch_with(
        executor,
        payloads.into_iter().map(|p| (p, EnqueueOptions::new())),
    )
    .await
}

/// Like [`enqueue_batch`], with options per payload.
pub async fn enqueue_batch_with<'c, J, A, I>(
    executor: A,
    payloads: I,
) -> Result<Vec<JobHandle<J>>, Error>
where
    J: Job,
    A: Acquire<'c, Database = Postgres> + Send,
    I: IntoIterator<Item = (J, EnqueueOptions)>,
{
    let mut values = Vec::new();
    for (payload, options) in payloads {
        let value =
            serde_json::to_value(&payload).map_err(|e| Error::serialize("job payload", &e))?;
        values.push((value, options));
    }
    enqueue_values::<J, A>(executor, &values).await
}

async fn enqueue_values<'c, J: Job, A>(
    executor: A,
    payloads: &[(Value, EnqueueOptions)],
) -> Result<Vec<JobHandle<J>>, Error>
where
    A: Acquire<'c, Database = Postgres> + Send,
{
    let requests: Vec<JobEnqueue<'_>> = payloads
        .iter()
        .map(|(payload, options)| options.apply(JobEnqueue::new(J::NAME, payload)))
        .collect();
    let enqueued = enqueue_jobs(executor, &requests).await?;
    Ok(enqueued
        .into_iter()
        .zip(payloads)
        .map(|(job, (_, options))| JobHandle {
            id: job.id,
            organization_id: options.organization_id,
            outcome: job.outcome,
            _job: PhantomData,
        })
        .collect())
}

/// A typed reference to an enqueued job, seen in the scope of the job's organization: reads
/// through a handle never see another organization's job (it is reported as not found).
pub struct JobHandle<J> {
    id: JobId,
    organization_id: Option<Uuid>,
    outcome: EnqueueOutcome,
    _job: PhantomData<fn() -> J>,
}

impl<J> Clone for JobHandle<J> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<J> Copy for JobHandle<J> {}

impl<J> std::fmt::Debug for JobHandle<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("id", &self.id)
            .field("organization_id", &self.organization_id)
            .field("outcome", &self.outcome)
            .finish()
    }
}

impl<J: Job> JobHandle<J> {
    /// A handle on an existing job (e.g. an id stored by the caller) in the scope of
    /// `organization_id` (`None`: jobs without organization), as for
    /// [`WorkflowHandle::from_id`](crate::WorkflowHandle::from_id). Every read checks that the
    /// job is a `J` and fails with `job.type_mismatch` otherwise.
    pub fn from_id(id: JobId, organization_id: Option<Uuid>) -> Self {
        Self {
            id,
            organization_id,
            outcome: EnqueueOutcome::Inserted,
            _job: PhantomData,
        }
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.id
    }

    /// `false` when an idempotency key matched an existing job, or a unique key was held by one
    /// (the handle is then that job's).
    pub fn was_created(&self) -> bool {
        self.outcome == EnqueueOutcome::Inserted
    }

    /// What the enqueue that made this handle did: inserted a job, found the job of the same
    /// idempotent request, dropped the request for the job holding its unique key (a
    /// singleton, a throttle), or replaced a debounced job's arguments. A handle rebuilt with
    /// [`from_id`](Self::from_id) reports `Inserted`.
    pub fn outcome(&self) -> EnqueueOutcome {
        self.outcome
    }

    /// The job's current status (`job.not_found` when it does not exist in the handle's
    /// organization).
    pub async fn status<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<JobStatus, Error> {
        Ok(self.record(executor).await?.status)
    }

    /// The typed output once the job has succeeded; `None` before that.
    ///
    /// ```no_run
    /// # use runledger::prelude::*;
    /// # #[job] async fn word_count(text: String) -> Result<usize, JobError> { Ok(0) }
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let job = WordCount { text: "a b c".into() }.enqueue(&pool).await?;
    /// // ... later, once a worker ran it:
    /// let count: Option<usize> = job.output(&pool).await?;
    /// # Ok(()) }
    /// ```
    pub async fn output<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<Option<J::Output>, Error>
    where
        J::Output: DeserializeOwned,
    {
        let record = self.record(executor).await?;
        if record.status != JobStatus::Succeeded {
            return Ok(None);
        }
        output::decode(J::NAME, record.output).map(Some)
    }

    /// Why the job is not running: its status and every rule that holds it now (see
    /// [`JobHold`](crate::admin::JobHold)); no hold on a pending job means the next claim of a
    /// worker serving it may take it.
    ///
    /// ```no_run
    /// # use runledger::prelude::*;
    /// # #[job] async fn export(day: String) -> Result<(), JobError> { Ok(()) }
    /// # async fn demo(pool: sqlx::PgPool, job: runledger::JobHandle<Export>) -> Result<(), runledger::Error> {
    /// for hold in job.explain(&pool).await?.holds {
    ///     println!("held: {hold}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn explain<'c, A>(&self, acquire: A) -> Result<JobExplanation, Error>
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        let mut conn = acquire.acquire().await?;
        self.record(&mut *conn).await?;
        let scope = TenantScope::from_organization(self.organization_id);
        explain_job(&mut *conn, self.id, scope)
            .await?
            .ok_or(Error::from(crate::engine::postgres::Error::JobNotFound {
                job_id: self.id,
            }))
    }

    /// The status and run number of the job as it is now: what [`requeue_if`](Self::requeue_if)
    /// compares, so read it before deciding to requeue.
    pub async fn observe<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<JobRequeueExpectation, Error> {
        Ok((&self.record(executor).await?).into())
    }

    /// Compare-and-requeue: puts the dead-lettered or canceled job back in the queue (a new
    /// run with a fresh attempt budget) only while its status and run number are still the
    /// ones `expected` saw; otherwise returns
    /// [`JobRequeueOutcome::ExpectationMismatch`] and changes nothing. A workflow step fails
    /// with `job.workflow_requeue_not_supported`.
    ///
    /// ```no_run
    /// # use runledger::prelude::*;
    /// # use runledger::admin::JobRequeueOutcome;
    /// # #[job] async fn export(day: String) -> Result<(), JobError> { Ok(()) }
    /// # async fn demo(pool: sqlx::PgPool, job: runledger::JobHandle<Export>) -> Result<(), runledger::Error> {
    /// let seen = job.observe(&pool).await?;
    /// // ... an operator looks at the failure and decides to retry it ...
    /// match job.requeue_if(&pool, seen).await? {
    ///     JobRequeueOutcome::Requeued { run_number } => println!("run {run_number} started"),
    ///     _ => println!("someone else acted first"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn requeue_if<'c, A>(
        &self,
        acquire: A,
        expected: JobRequeueExpectation,
    ) -> Result<JobRequeueOutcome, Error>
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        let mut conn = acquire.acquire().await?;
        self.record(&mut *conn).await?;
        let scope = TenantScope::from_organization(self.organization_id);
        Ok(requeue_job_if(&mut *conn, self.id, scope, expected).await?)
    }

    /// Replays this succeeded job as a new job of the same type and payload, and records the
    /// lineage. Idempotent on `replay_key`: the same key and reason return the first replay;
    /// the key reused with another reason (or for another job) fails with
    /// `job.replay_idempotency_conflict`. A job that has not succeeded fails with
    /// `job.replay_invalid_state`, a workflow step with `job.workflow_replay_not_supported`.
    ///
    /// ```no_run
    /// # use runledger::prelude::*;
    /// # #[job] async fn export(day: String) -> Result<(), JobError> { Ok(()) }
    /// # async fn demo(pool: sqlx::PgPool, job: runledger::JobHandle<Export>) -> Result<(), runledger::Error> {
    /// let again = job.replay(&pool, "export-fix-1234", "the exporter dropped rows").await?;
    /// println!("replayed as {}", again.id());
    /// # Ok(()) }
    /// ```
    pub async fn replay<'c, A>(
        &self,
        acquire: A,
        replay_key: &str,
        reason: &str,
    ) -> Result<JobHandle<J>, Error>
    where
        A: Acquire<'c, Database = Postgres> + Send,
    {
        let mut conn = acquire.acquire().await?;
        self.record(&mut *conn).await?;
        let scope = TenantScope::from_organization(self.organization_id);
        let replayed = replay_job(
            &mut *conn,
            &JobReplay::new(self.id, replay_key, reason).scope(scope),
        )
        .await?;
        Ok(JobHandle {
            id: replayed.job_id,
            organization_id: self.organization_id,
            outcome: if replayed.created {
                EnqueueOutcome::Inserted
            } else {
                EnqueueOutcome::Existing
            },
            _job: PhantomData,
        })
    }

    /// The job's row, in the handle's organization scope, once it is known to be a `J`.
    async fn record<'e>(&self, executor: impl sqlx::PgExecutor<'e>) -> Result<JobRecord, Error> {
        let scope = TenantScope::from_organization(self.organization_id);
        let record = get_job_by_id(executor, self.id, scope)
            .await?
            .ok_or(Error::Database(
                crate::engine::postgres::Error::JobNotFound { job_id: self.id },
            ))?;
        if record.job_type != J::NAME {
            return Err(Error::JobTypeMismatch {
                id: self.id,
                expected: J::NAME,
                found: record.job_type,
            });
        }
        Ok(record)
    }
}

/// Records an intent for `payload` of `J` with `options` (which must carry the key).
async fn record_intent<'c, J: Job, A>(
    executor: A,
    payload: &Value,
    options: &EnqueueOptions,
) -> Result<IntentHandle<J>, Error>
where
    A: Acquire<'c, Database = Postgres> + Send,
{
    let request = options.apply(JobEnqueue::new(J::NAME, payload));
    let recorded = record_job_enqueue_intent(executor, &request).await?;
    Ok(IntentHandle {
        id: recorded.id,
        organization_id: request.organization_id,
        created: recorded.created,
        _job: PhantomData,
    })
}

/// A typed reference to a durable enqueue intent, made by [`Job::record_intent`]; seen in the
/// scope of its organization, like a [`JobHandle`].
pub struct IntentHandle<J> {
    id: JobIntentId,
    organization_id: Option<Uuid>,
    created: bool,
    _job: PhantomData<fn() -> J>,
}

impl<J> Clone for IntentHandle<J> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<J> Copy for IntentHandle<J> {}

impl<J> std::fmt::Debug for IntentHandle<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntentHandle")
            .field("id", &self.id)
            .field("organization_id", &self.organization_id)
            .field("created", &self.created)
            .finish()
    }
}

impl<J: Job> IntentHandle<J> {
    /// The intent's id.
    pub fn id(&self) -> JobIntentId {
        self.id
    }

    /// `false` when the key matched an intent recorded earlier with the same request.
    pub fn was_created(&self) -> bool {
        self.created
    }

    /// Where the intent is: pending, promoted into a job, or conflicted (a job with its key
    /// but another request exists). `job.intent_not_found` when it does not exist in the
    /// handle's organization (for instance, it was recorded in a transaction that rolled
    /// back).
    pub async fn status<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<JobIntentStatus, Error> {
        Ok(self.record(executor).await?.status)
    }

    /// The job the intent became, once a promoter promoted it; `None` while it is pending or
    /// after a conflict.
    ///
    /// ```no_run
    /// # use runledger::prelude::*;
    /// # #[job] async fn confirm_order(order_id: u64) -> Result<(), JobError> { Ok(()) }
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
    /// let mut tx = pool.begin().await?;
    /// let intent = ConfirmOrder { order_id: 42 }.record_intent(&mut *tx, "order:42:confirm").await?;
    /// tx.commit().await?;
    /// // ... later, once a worker that runs `confirm_order` promoted it:
    /// if let Some(job) = intent.job(&pool).await? {
    ///     println!("job {} is {:?}", job.id(), job.status(&pool).await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn job<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<Option<JobHandle<J>>, Error> {
        let record = self.record(executor).await?;
        Ok(record
            .job_id
            .map(|job_id| JobHandle::from_id(job_id, self.organization_id)))
    }

    async fn record<'e>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
    ) -> Result<JobIntentRecord, Error> {
        let scope = TenantScope::from_organization(self.organization_id);
        get_job_enqueue_intent(executor, self.id, scope)
            .await?
            .ok_or(Error::Database(
                crate::engine::postgres::Error::IntentNotFound { intent_id: self.id },
            ))
    }
}
