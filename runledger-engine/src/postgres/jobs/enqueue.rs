//! Enqueue: one job or many in one statement, on a pool or inside the caller's transaction,
//! with idempotency keys backed by canonical request snapshots.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::types::Json;
use sqlx::{Acquire, Postgres};
use uuid::Uuid;

use crate::core::jobs::{JobId, JobStatus, JobType, fresh_uuid, fresh_uuids};
use crate::core::trace::TraceContext;
use crate::postgres::error::{Error, Result};
use crate::postgres::input::{check_key, check_payload, check_timestamp};

/// A request to put one job in the queue. Unset settings come from the job definition.
///
/// ```
/// use runledger_engine::postgres::jobs::JobEnqueue;
///
/// let payload = serde_json::json!({"to": "ada@example.com"});
/// let request = JobEnqueue::new("emails.send", &payload)
///     .idempotency_key("signup:42:welcome")
///     .priority(10);
/// assert_eq!(request.priority, Some(10));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobEnqueue<'a> {
    /// The job type; must have an enabled definition.
    pub job_type: JobType<'a>,
    /// The JSON payload handed to the handler.
    pub payload: &'a Value,
    /// Owning organization, if any (an opaque id; no foreign key).
    pub organization_id: Option<Uuid>,
    /// Deduplication key: a retry with the same request returns the original job.
    pub idempotency_key: Option<&'a str>,
    /// Priority (higher runs first); defaults to the definition's.
    pub priority: Option<i32>,
    /// Attempts before dead-lettering; defaults to the definition's.
    pub max_attempts: Option<i32>,
    /// Per-attempt timeout; defaults to the definition's.
    pub timeout_seconds: Option<i32>,
    /// Earliest time to run; defaults to now.
    pub run_at: Option<DateTime<Utc>>,
    /// Runs no sooner than this long after the enqueue (ignored when `run_at` is set). Unlike
    /// `run_at`, a keyed retry with the same delay is the same request.
    pub delay: Option<std::time::Duration>,
    /// The user who asked for the job, if any (an opaque id).
    pub created_by_user_id: Option<Uuid>,
    /// An execution resource the job holds while it runs: at most one job holding a given key
    /// runs at a time across all workers (1 to 255 characters, not blank, no NUL).
    pub resource_key: Option<&'a str>,
    /// A unique key and how it dedupes: a singleton ([`JobEnqueue::unique`]), a debounce
    /// ([`JobEnqueue::debounce`]) or a throttle ([`JobEnqueue::throttle`]).
    pub unique: Option<(&'a str, UniqueRule)>,
    /// The instant `delay` counts from; now when `None`. A promoted intent counts its delay
    /// from when it was recorded, not from when a worker promoted it.
    pub(crate) delay_from: Option<DateTime<Utc>>,
}

impl<'a> JobEnqueue<'a> {
    /// A request for `job_type` with `payload` and every setting at its default.
    pub fn new(job_type: impl Into<JobType<'a>>, payload: &'a Value) -> Self {
        Self {
            job_type: job_type.into(),
            payload,
            organization_id: None,
            idempotency_key: None,
            priority: None,
            max_attempts: None,
            timeout_seconds: None,
            run_at: None,
            delay: None,
            created_by_user_id: None,
            resource_key: None,
            unique: None,
            delay_from: None,
        }
    }

    /// Sets the owning organization.
    pub fn organization_id(mut self, organization_id: Uuid) -> Self {
        self.organization_id = Some(organization_id);
        self
    }

    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: &'a str) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Names an execution resource the job holds while it runs: at most one job holding
    /// `key` runs at a time across all workers (a printer, an account being synchronised, a
    /// tenant's migration). Others wait `PENDING`, spending no attempt.
    pub fn resource_key(mut self, key: &'a str) -> Self {
        self.resource_key = Some(key);
        self
    }

    /// Makes the job a singleton: while a job of the same organization and type holds `key`
    /// in the states `scope` names, an enqueue with the key inserts nothing and returns that
    /// job (`created: false`); once the holder leaves those states the key is free again.
    /// Unlike an idempotency key, it dedupes against live work only. A key has 1 to 255
    /// characters (`job.invalid_unique_key`) and cannot be combined with an idempotency key
    /// (`job.unique_key_with_idempotency_key`).
    ///
    /// ```
    /// use runledger_engine::postgres::jobs::{JobEnqueue, UniqueWhile};
    ///
    /// let payload = serde_json::json!({"account": 42});
    /// let request = JobEnqueue::new("accounts.sync", &payload).unique("account:42", UniqueWhile::Queued);
    /// assert!(request.unique.is_some());
    /// ```
    pub fn unique(mut self, key: &'a str, scope: UniqueWhile) -> Self {
        self.unique = Some((key, UniqueRule::Singleton(scope)));
        self
    }

    /// Debounces: the job runs `window` after the last enqueue of a burst, with that enqueue's
    /// payload. While a job of the same organization and type holds `key` and has not started,
    /// an enqueue with the key replaces its payload and pushes its start to `window` from now
    /// ([`EnqueueOutcome::Replaced`]); otherwise it inserts a job due in `window`. The key and
    /// its codes are those of [`unique`](Self::unique); a window must be positive
    /// (`job.invalid_unique_window`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use runledger_engine::postgres::jobs::JobEnqueue;
    ///
    /// let payload = serde_json::json!({"document": 7, "text": "latest"});
    /// let request = JobEnqueue::new("documents.index", &payload)
    ///     .debounce("document:7", Duration::from_secs(5));
    /// assert!(request.unique.is_some());
    /// ```
    pub fn debounce(mut self, key: &'a str, window: std::time::Duration) -> Self {
        self.unique = Some((key, UniqueRule::Debounce(window)));
        self
    }

    /// Throttles: at most one job per `key` (of its organization and type) is enqueued per
    /// `window`, counted from the enqueue of the job that was kept. An enqueue within the
    /// window of the kept job inserts nothing and returns it ([`EnqueueOutcome::Dropped`]),
    /// whatever its state. The key and its codes are those of [`unique`](Self::unique); a
    /// window must be positive (`job.invalid_unique_window`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use runledger_engine::postgres::jobs::JobEnqueue;
    ///
    /// let payload = serde_json::json!({"user": 42});
    /// let request = JobEnqueue::new("alerts.send", &payload)
    ///     .throttle("user:42", Duration::from_secs(3_600));
    /// assert!(request.unique.is_some());
    /// ```
    pub fn throttle(mut self, key: &'a str, window: std::time::Duration) -> Self {
        self.unique = Some((key, UniqueRule::Throttle(window)));
        self
    }

    /// Overrides the priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Overrides the attempts before dead-lettering.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Overrides the per-attempt timeout.
    pub fn timeout_seconds(mut self, timeout_seconds: i32) -> Self {
        self.timeout_seconds = Some(timeout_seconds);
        self
    }

    /// Delays the job until `run_at`. Part of the idempotency snapshot: a keyed retry must send
    /// the same instant.
    pub fn run_at(mut self, run_at: DateTime<Utc>) -> Self {
        self.run_at = Some(run_at);
        self.delay = None;
        self
    }

    /// Delays the job by `delay` from the enqueue. The snapshot records the delay, not the
    /// instant, so a keyed retry with the same delay returns the original job.
    pub fn delay(mut self, delay: std::time::Duration) -> Self {
        self.delay = Some(delay);
        self.run_at = None;
        self
    }

    /// `run_at`, or now plus `delay`.
    fn effective_run_at(&self) -> Option<DateTime<Utc>> {
        self.run_at.or_else(|| {
            self.delay.map(|delay| {
                let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
                self.delay_from
                    .unwrap_or_else(Utc::now)
                    .checked_add_signed(delay)
                    .unwrap_or(DateTime::<Utc>::MAX_UTC)
            })
        })
    }

    /// Records who asked for the job.
    pub fn created_by_user_id(mut self, user_id: Uuid) -> Self {
        self.created_by_user_id = Some(user_id);
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.job_type.validate()?;
        if let Some(key) = self.idempotency_key {
            check_key(key, "job.invalid_idempotency_key", "the idempotency key")?;
        }
        if let Some(key) = self.resource_key {
            check_key(key, "job.invalid_resource_key", "the resource key")?;
        }
        if let Some((key, rule)) = self.unique {
            check_key(key, "job.invalid_unique_key", "the unique key")?;
            if let UniqueRule::Debounce(window) | UniqueRule::Throttle(window) = rule
                && (window.is_zero() || chrono::Duration::from_std(window).is_err())
            {
                return Err(Error::invalid_input(
                    "job.invalid_unique_window",
                    "a debounce or throttle window must be positive",
                ));
            }
            if self.idempotency_key.is_some() {
                return Err(Error::invalid_input(
                    "job.unique_key_with_idempotency_key",
                    "a job takes a unique key or an idempotency key, not both",
                ));
            }
        }
        check_payload(self.payload, "the payload")?;
        if let Some(run_at) = self.run_at {
            check_timestamp(run_at, "job.invalid_run_at", "run_at")?;
        }
        if self.run_at.is_none()
            && let Some(run_at) = self.effective_run_at()
        {
            check_timestamp(run_at, "job.invalid_delay", "now plus the delay")?;
        }
        if self.max_attempts.is_some_and(|value| value <= 0) {
            return Err(Error::invalid_input(
                "job.invalid_max_attempts",
                "max_attempts must be positive",
            ));
        }
        if self.timeout_seconds.is_some_and(|value| value <= 0) {
            return Err(Error::invalid_input(
                "job.invalid_timeout",
                "timeout_seconds must be positive",
            ));
        }
        Ok(())
    }

    /// The canonical snapshot stored with a keyed job: everything that defines the request.
    /// JSONB equality ignores key order, so a reordered payload is the same request.
    pub(crate) fn snapshot(&self) -> Value {
        let mut snapshot = json!({
            "job_type": self.job_type.as_str(),
            "payload": self.payload,
            "organization_id": self.organization_id,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "timeout_seconds": self.timeout_seconds,
            "run_at": self.run_at,
            "delay_ms": self.delay.filter(|_| self.run_at.is_none()).map(|d| d.as_millis()),
            "created_by_user_id": self.created_by_user_id,
        });
        // Only when set, so that snapshots stored before resource keys existed still match.
        if let (Some(key), Value::Object(fields)) = (self.resource_key, &mut snapshot) {
            fields.insert("resource_key".to_owned(), Value::from(key));
        }
        snapshot
    }
}

/// The states in which a singleton holds its unique key ([`JobEnqueue::unique`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UniqueWhile {
    /// Pending and never started: at most one waits, and a new one may queue behind a running
    /// one (a "run again after this one" request).
    Queued,
    /// Pending or leased: at most one exists until it finishes, so never two run at once.
    Active,
}

impl UniqueWhile {
    /// The stored form: `QUEUED` or `ACTIVE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::Active => "ACTIVE",
        }
    }
}

/// How a unique key dedupes ([`JobEnqueue::unique`], [`JobEnqueue::debounce`],
/// [`JobEnqueue::throttle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UniqueRule {
    /// A singleton, holding its key in the states named.
    Singleton(UniqueWhile),
    /// A debounce over this window.
    Debounce(std::time::Duration),
    /// A throttle of one job per this window.
    Throttle(std::time::Duration),
}

impl UniqueRule {
    /// The stored `unique_while` and the window the enqueue function takes.
    fn parts(self) -> (&'static str, Option<sqlx::postgres::types::PgInterval>) {
        let interval =
            |window: std::time::Duration| sqlx::postgres::types::PgInterval::try_from(window).ok();
        match self {
            Self::Singleton(scope) => (scope.as_str(), None),
            Self::Debounce(window) => ("QUEUED", interval(window)),
            Self::Throttle(window) => ("WINDOW", interval(window)),
        }
    }
}

/// What an enqueue did with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum EnqueueOutcome {
    /// A new job.
    Inserted,
    /// An idempotency key matched the job of the same request: a retry.
    Existing,
    /// A unique key was held (a singleton, a throttle's window): nothing was inserted, the job
    /// is the holder.
    Dropped,
    /// A debounce replaced the waiting holder's payload and pushed its start.
    Replaced,
}

/// The job an enqueue call resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnqueuedJob {
    /// The job's id.
    pub id: JobId,
    /// Its status when the call returned.
    pub status: JobStatus,
    /// `false` when an idempotency key matched an existing job with the same request, or a
    /// unique key a job holds.
    pub created: bool,
    /// What the enqueue did.
    pub outcome: EnqueueOutcome,
}

/// Enqueues one job.
///
/// Runs on a pool, a connection, or the caller's open transaction (`&mut *tx`), so the job
/// commits atomically with the business row that caused it. Fails with
/// `job.definition_not_found_or_disabled` for an unknown or disabled type, with
/// `job.idempotency_conflict` when the key was used for a different request of the same
/// organization and job type (keys are scoped by both),
/// `validation.isolation_level_unsupported` for a keyed request inside a REPEATABLE READ or
/// SERIALIZABLE transaction (keyed retries need READ COMMITTED to see the original job), and
/// with a validation code for input
/// PostgreSQL would refuse or a worker could not decode: `job.invalid_payload` (a NUL
/// character, too large), `job.payload_too_deep`, `job.invalid_run_at`, `job.invalid_delay`.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use runledger_engine::postgres::jobs::{enqueue_job, JobEnqueue};
///
/// let payload = serde_json::json!({"user_id": 42});
/// let mut tx = pool.begin().await?;
/// // ... insert the user row with &mut *tx ...
/// let job = enqueue_job(&mut *tx, &JobEnqueue::new("emails.welcome", &payload)).await?;
/// tx.commit().await?;
/// println!("enqueued {}", job.id);
/// # Ok(()) }
/// ```
pub async fn enqueue_job<'c, A>(acquire: A, request: &JobEnqueue<'_>) -> Result<EnqueuedJob>
where
    A: Acquire<'c, Database = Postgres>,
{
    let mut jobs = enqueue_jobs(acquire, std::slice::from_ref(request)).await?;
    jobs.pop()
        .ok_or_else(|| Error::corrupt("enqueue returned no job"))
}

/// Enqueues many jobs, all or nothing: if any type is missing or disabled, nothing is inserted.
/// A batch of one job type is one statement; a batch of several is one statement per type in a
/// transaction (a savepoint inside the caller's). Returns one [`EnqueuedJob`] per request, in
/// request order.
///
/// When a [trace propagator](crate::core::trace) is installed and the call runs inside a
/// traced span, every job of the call stores that span's context, and its handler's span
/// continues the trace. [`enqueue_job`] does the same.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{enqueue_jobs, JobEnqueue};
///
/// let payloads: Vec<_> = (0..100).map(|n| serde_json::json!({"n": n})).collect();
/// let requests: Vec<_> = payloads.iter().map(|p| JobEnqueue::new("reports.render", p)).collect();
/// let jobs = enqueue_jobs(&pool, &requests).await?;
/// assert_eq!(jobs.len(), 100);
/// # Ok(()) }
/// ```
pub async fn enqueue_jobs<'c, A>(
    acquire: A,
    requests: &[JobEnqueue<'_>],
) -> Result<Vec<EnqueuedJob>>
where
    A: Acquire<'c, Database = Postgres>,
{
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    for request in requests {
        request.validate()?;
    }
    let trace_context = crate::core::trace::current_trace_context();
    let mut conn = acquire.acquire().await?;
    // A batch with keyed requests may find a conflict after inserting the others, and an
    // unkeyed batch of several types is inserted one type at a time; run either in a transaction
    // (a savepoint inside the caller's) so that an error leaves nothing behind. A single request
    // or an unkeyed batch of one type is all-or-nothing in one statement already.
    let keyed = requests
        .iter()
        .any(|r| r.idempotency_key.is_some() || r.unique.is_some());
    let first_type = requests[0].job_type.as_str();
    let mixed = requests.iter().any(|r| r.job_type.as_str() != first_type);
    if requests.len() > 1 && (keyed || mixed) {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let jobs = enqueue_on(&mut tx, requests, trace_context.as_ref()).await?;
        tx.commit().await?;
        Ok(jobs)
    } else {
        enqueue_on(&mut conn, requests, trace_context.as_ref()).await
    }
}

/// Inserts `requests` on `conn`; every job stores `trace_context` (one value for the whole
/// statement, so a batch pays nothing per row when there is none). A batch with keys or of
/// several job types takes more than one statement: run it in a transaction, as
/// [`enqueue_jobs`] does, for it to be all or nothing.
pub(crate) async fn enqueue_on(
    conn: &mut sqlx::PgConnection,
    requests: &[JobEnqueue<'_>],
    trace_context: Option<&TraceContext>,
) -> Result<Vec<EnqueuedJob>> {
    if requests.iter().any(|r| r.unique.is_some()) {
        // Requests with a unique key resolve one by one (each may return another job); the
        // rest one at a time beside them, keyed or not.
        let mut jobs = Vec::with_capacity(requests.len());
        for request in requests {
            match request.unique {
                Some(unique) => {
                    jobs.push(enqueue_unique(conn, request, unique, trace_context).await?);
                }
                None if request.idempotency_key.is_some() => {
                    let one = std::slice::from_ref(request);
                    jobs.extend(enqueue_keyed(conn, one, trace_context).await?);
                }
                None => jobs.push(enqueue_one(conn, request, trace_context).await?),
            }
        }
        return Ok(jobs);
    }
    if requests.iter().all(|r| r.idempotency_key.is_none()) {
        enqueue_unkeyed(conn, requests, trace_context).await
    } else {
        enqueue_keyed(conn, requests, trace_context).await
    }
}

/// Inserts one job with a unique key, or resolves it to the job holding the key (replacing
/// a debounced holder's payload): `runledger.enqueue_unique_job`
/// (`runledger-engine/sql/05_enqueue.sql`).
async fn enqueue_unique(
    conn: &mut sqlx::PgConnection,
    request: &JobEnqueue<'_>,
    (key, rule): (&str, UniqueRule),
    trace_context: Option<&TraceContext>,
) -> Result<EnqueuedJob> {
    let job_type = request.job_type.as_str();
    let (unique_while, window) = rule.parts();
    let row = sqlx::query!(
        r#"
        SELECT queue, id, status AS "status: JobStatus", outcome, refused_level
        FROM runledger.enqueue_unique_job(
            $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14
        )
        "#,
        fresh_uuid(),
        job_type,
        request.organization_id,
        Json(request.payload) as Json<&Value>,
        request.priority,
        request.max_attempts,
        request.timeout_seconds,
        request.effective_run_at(),
        request.created_by_user_id,
        request.resource_key,
        trace_context as Option<&TraceContext>,
        key,
        unique_while,
        window,
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| Error::DefinitionNotFoundOrDisabled {
        job_type: job_type.to_owned(),
    })?;
    if let Some(level) = row.refused_level {
        return Err(Error::IsolationLevelUnsupported { level });
    }
    let (Some(id), Some(queue), Some(status)) = (row.id, row.queue, row.status) else {
        return Err(Error::corrupt("a unique-key enqueue returned no job"));
    };
    let outcome = match row.outcome.as_deref() {
        Some("INSERTED") => EnqueueOutcome::Inserted,
        Some("REPLACED") => EnqueueOutcome::Replaced,
        Some("DROPPED") => EnqueueOutcome::Dropped,
        other => {
            return Err(Error::corrupt(format!(
                "a unique-key enqueue returned the outcome {other:?}"
            )));
        }
    };
    if outcome == EnqueueOutcome::Inserted {
        crate::core::metrics::count_enqueued(job_type, &queue, 1);
    }
    Ok(EnqueuedJob {
        id: JobId(id),
        status,
        created: outcome == EnqueueOutcome::Inserted,
        outcome,
    })
}

/// Inserts requests without idempotency keys: nothing can conflict, so every row is a plain
/// insert (no speculative insertion), one statement per job type, and each statement's only
/// answer is the type's queue, or that its type is missing or disabled.
///
/// The enqueue statements wake idle workers themselves: the due rows of a statement send one
/// notification on their type's channel, the job queue's or the gated jobs' (one per job type
/// and channel reaches the listeners, at commit).
///
/// A single request goes to [`enqueue_one`]; a batch goes to `runledger.enqueue_jobs_of_type`
/// once per type, in the transaction [`enqueue_jobs`] opens when there are several. Both are
/// functions planned generically from their first call on a connection: sent as a prepared
/// statement, the enqueue was planned for its parameters at each of its first five executions
/// on every connection, and an application's pool hands its connections out in turn, so single
/// enqueues paid that planning again and again. A batch's rows take their type's defaults from
/// variables instead of a join. Both functions, with their reasons:
/// `runledger-engine/sql/05_enqueue.sql`.
async fn enqueue_unkeyed(
    conn: &mut sqlx::PgConnection,
    requests: &[JobEnqueue<'_>],
    trace_context: Option<&TraceContext>,
) -> Result<Vec<EnqueuedJob>> {
    if let [request] = requests {
        return Ok(vec![enqueue_one(conn, request, trace_context).await?]);
    }
    // The ids follow the requests' order whatever their types, as the claim order does.
    let ids = fresh_uuids(requests.len());
    for indices in indices_by_type(requests) {
        enqueue_of_type(conn, requests, &indices, &ids, trace_context).await?;
    }
    Ok(ids
        .into_iter()
        .map(|id| EnqueuedJob {
            id: JobId(id),
            status: JobStatus::Pending,
            created: true,
            outcome: EnqueueOutcome::Inserted,
        })
        .collect())
}

/// The positions of the requests of each job type, the types in the order they first appear.
fn indices_by_type(requests: &[JobEnqueue<'_>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: HashMap<&str, usize> = HashMap::new();
    for (index, request) in requests.iter().enumerate() {
        let group = *group_of
            .entry(request.job_type.as_str())
            .or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
        groups[group].push(index);
    }
    groups
}

/// Inserts the requests at `indices`, all of one job type, with the ids at the same positions
/// of `ids`: `runledger.enqueue_jobs_of_type`.
async fn enqueue_of_type(
    conn: &mut sqlx::PgConnection,
    requests: &[JobEnqueue<'_>],
    indices: &[usize],
    ids: &[Uuid],
    trace_context: Option<&TraceContext>,
) -> Result<()> {
    let Some(&first) = indices.first() else {
        return Ok(());
    };
    let job_type = requests[first].job_type.as_str();
    let columns = Columns::from_requests(
        requests,
        indices,
        indices.iter().map(|&index| ids[index]).collect(),
    );
    let queue = sqlx::query_scalar!(
        r#"
        SELECT runledger.enqueue_jobs_of_type($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
            AS "queue"
        "#,
        job_type,
        &columns.ids,
        columns.organization_ids.as_deref() as Option<&[Option<Uuid>]>,
        &columns.payloads as &[Json<&Value>],
        columns.priorities.as_deref() as Option<&[Option<i32>]>,
        columns.max_attempts.as_deref() as Option<&[Option<i32>]>,
        columns.timeouts.as_deref() as Option<&[Option<i32>]>,
        columns.run_ats.as_deref() as Option<&[Option<DateTime<Utc>>]>,
        columns.created_by.as_deref() as Option<&[Option<Uuid>]>,
        columns.resource_keys.as_deref() as Option<&[Option<&str>]>,
        trace_context as Option<&TraceContext>,
    )
    .fetch_one(&mut *conn)
    .await?
    .ok_or_else(|| Error::DefinitionNotFoundOrDisabled {
        job_type: job_type.to_owned(),
    })?;
    crate::core::metrics::count_enqueued(job_type, &queue, indices.len() as u64);
    Ok(())
}

/// Inserts one request without an idempotency key: `runledger.enqueue_job`
/// (`runledger-engine/sql/05_enqueue.sql`), the row a batch would hold, from scalar arguments:
/// unnesting arrays and joining the definitions would make up most of a single enqueue's server
/// time.
async fn enqueue_one(
    conn: &mut sqlx::PgConnection,
    request: &JobEnqueue<'_>,
    trace_context: Option<&TraceContext>,
) -> Result<EnqueuedJob> {
    let id = fresh_uuid();
    let job_type = request.job_type.as_str();
    let queue = sqlx::query_scalar!(
        r#"SELECT runledger.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS "queue""#,
        id,
        job_type,
        request.organization_id,
        Json(request.payload) as Json<&Value>,
        request.priority,
        request.max_attempts,
        request.timeout_seconds,
        request.effective_run_at(),
        request.created_by_user_id,
        request.resource_key,
        trace_context as Option<&TraceContext>,
    )
    .fetch_one(&mut *conn)
    .await?
    .ok_or_else(|| Error::DefinitionNotFoundOrDisabled {
        job_type: job_type.to_owned(),
    })?;
    crate::core::metrics::count_enqueued(job_type, &queue, 1);
    Ok(EnqueuedJob {
        id: JobId(id),
        status: JobStatus::Pending,
        created: true,
        outcome: EnqueueOutcome::Inserted,
    })
}

/// Inserts requests of which some carry an idempotency key: a keyed request whose key is taken
/// resolves to the existing job (or fails with `job.idempotency_conflict`).
async fn enqueue_keyed(
    conn: &mut sqlx::PgConnection,
    requests: &[JobEnqueue<'_>],
    trace_context: Option<&TraceContext>,
) -> Result<Vec<EnqueuedJob>> {
    let mut results: Vec<Option<EnqueuedJob>> = vec![None; requests.len()];
    let mut pending: Vec<usize> = (0..requests.len()).collect();
    // The queue of every job inserted (a label of the enqueue count).
    let mut queues: HashMap<Uuid, String> = HashMap::new();

    // A keyed request that lost to a concurrent insert whose transaction then rolled back finds
    // neither a row nor a conflict; trying again (only those requests) inserts it.
    for _ in 0..3 {
        let columns = Columns::from_requests(requests, &pending, fresh_uuids(pending.len()));
        let inserted = sqlx::query!(
            r#"
            WITH refused AS (
                SELECT current_setting('transaction_isolation') AS level
                WHERE current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted')
            ),
            definitions AS (
                SELECT job_type, priority, max_attempts, timeout_seconds, queue,
                       runledger.job_gated(global_concurrency IS NOT NULL, queue) AS gated
                FROM runledger.job_definitions
                WHERE job_type = ANY($12::text[]) AND is_enabled
            ),
            missing AS (
                SELECT t.job_type
                FROM unnest($12::text[]) AS t(job_type)
                WHERE t.job_type NOT IN (SELECT job_type FROM definitions)
                LIMIT 1
            ),
            inserted AS (
                INSERT INTO runledger.job_queue (
                    id, job_type, organization_id, payload, priority, max_attempts,
                    timeout_seconds, next_run_at, idempotency_key, enqueue_request,
                    created_by_user_id, queue, resource_key, gated, trace_context
                )
                SELECT i.id, i.job_type, i.organization_id, i.payload,
                       coalesce(i.priority, d.priority),
                       coalesce(i.max_attempts, d.max_attempts),
                       coalesce(i.timeout_seconds, d.timeout_seconds),
                       coalesce(i.run_at, now()),
                       i.idempotency_key, i.enqueue_request, i.created_by_user_id, d.queue,
                       i.resource_key, d.gated OR i.resource_key IS NOT NULL, $14
                FROM unnest(
                    $1::uuid[], $2::text[], $3::uuid[], $4::jsonb[], $5::int4[], $6::int4[],
                    $7::int4[], $8::timestamptz[], $9::text[], $10::jsonb[], $11::uuid[],
                    $13::text[]
                ) AS i(id, job_type, organization_id, payload, priority, max_attempts,
                       timeout_seconds, run_at, idempotency_key, enqueue_request, created_by_user_id,
                       resource_key)
                JOIN definitions d ON d.job_type = i.job_type
                WHERE NOT EXISTS (SELECT 1 FROM missing) AND NOT EXISTS (SELECT 1 FROM refused)
                ON CONFLICT (
                    coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
                    job_type,
                    idempotency_key
                ) WHERE idempotency_key IS NOT NULL DO NOTHING
                RETURNING id, queue,
                          CASE WHEN next_run_at <= now()
                               THEN pg_notify(runledger.job_wake_channel(gated), job_type) IS NULL END AS woke
            )
            SELECT
                (SELECT level FROM refused) AS refused_level,
                (SELECT job_type FROM missing) AS missing_type,
                coalesce((SELECT array_agg(id ORDER BY id) FROM inserted), '{}')
                    AS "inserted_ids!: Vec<Uuid>",
                coalesce((SELECT array_agg(queue ORDER BY id) FROM inserted), '{}')
                    AS "inserted_queues!: Vec<String>"
            "#,
            &columns.ids,
            &columns.job_types as &[&str],
            columns.organization_ids.as_deref() as Option<&[Option<Uuid>]>,
            &columns.payloads as &[Json<&Value>],
            columns.priorities.as_deref() as Option<&[Option<i32>]>,
            columns.max_attempts.as_deref() as Option<&[Option<i32>]>,
            columns.timeouts.as_deref() as Option<&[Option<i32>]>,
            columns.run_ats.as_deref() as Option<&[Option<DateTime<Utc>>]>,
            &columns.keys as &[Option<&str>],
            &columns.snapshots as &[Option<Value>],
            columns.created_by.as_deref() as Option<&[Option<Uuid>]>,
            &columns.distinct_types as &[&str],
            columns.resource_keys.as_deref() as Option<&[Option<&str>]>,
            trace_context as Option<&TraceContext>,
        )
        .fetch_one(&mut *conn)
        .await?;

        if let Some(level) = inserted.refused_level {
            return Err(Error::IsolationLevelUnsupported { level });
        }
        if let Some(job_type) = inserted.missing_type {
            return Err(Error::DefinitionNotFoundOrDisabled { job_type });
        }
        queues.extend(
            inserted
                .inserted_ids
                .into_iter()
                .zip(inserted.inserted_queues),
        );
        for (&index, id) in pending.iter().zip(&columns.ids) {
            if queues.contains_key(id) {
                results[index] = Some(EnqueuedJob {
                    id: JobId(*id),
                    status: JobStatus::Pending,
                    created: true,
                    outcome: EnqueueOutcome::Inserted,
                });
            }
        }

        // Requests whose key was already taken: resolve them against the stored snapshots.
        pending.retain(|&index| results[index].is_none());
        if pending.is_empty() {
            break;
        }
        let keys: Vec<&str> = pending
            .iter()
            .map(|&index| requests[index].idempotency_key.unwrap_or_default())
            .collect();
        let snapshots: Vec<Value> = pending
            .iter()
            .map(|&index| requests[index].snapshot())
            .collect();
        let organizations: Vec<Option<Uuid>> = pending
            .iter()
            .map(|&index| requests[index].organization_id)
            .collect();
        let job_types: Vec<&str> = pending
            .iter()
            .map(|&index| requests[index].job_type.as_str())
            .collect();
        // A function planned at each call: see runledger-engine/sql/05_enqueue.sql.
        let existing = sqlx::query!(
            r#"
            SELECT ord AS "ord!", id AS "id!: JobId", status AS "status!: JobStatus",
                   same_request AS "same_request!"
            FROM runledger.keyed_jobs($1, $2, $3, $4)
            "#,
            &keys as &[&str],
            &snapshots,
            &organizations as &[Option<Uuid>],
            &job_types as &[&str],
        )
        .fetch_all(&mut *conn)
        .await?;

        for row in existing {
            let Some(&index) = usize::try_from(row.ord - 1)
                .ok()
                .and_then(|position| pending.get(position))
            else {
                return Err(Error::corrupt(
                    "idempotency lookup returned an unknown position",
                ));
            };
            if !row.same_request {
                return Err(Error::IdempotencyConflict {
                    idempotency_key: requests[index]
                        .idempotency_key
                        .unwrap_or_default()
                        .to_owned(),
                    existing_job_id: row.id,
                });
            }
            results[index] = Some(EnqueuedJob {
                id: row.id,
                status: row.status,
                created: false,
                outcome: EnqueueOutcome::Existing,
            });
        }
        pending.retain(|&index| results[index].is_none());
        if pending.is_empty() {
            break;
        }
    }
    if !pending.is_empty() {
        return Err(Error::invalid_input(
            "job.idempotency_unresolved",
            "the idempotency key is contended; retry the request",
        ));
    }
    let jobs: Vec<EnqueuedJob> = results.into_iter().flatten().collect();
    count_created(requests.iter().zip(&jobs).filter_map(|(request, job)| {
        let queue = queues.get(&job.id.0).filter(|_| job.created)?;
        Some((request.job_type.as_str(), queue.as_str()))
    }));
    Ok(jobs)
}

/// Counts the jobs a statement inserted, given as (job type, queue) pairs, once per pair (a
/// batch has few).
fn count_created<'a>(created: impl IntoIterator<Item = (&'a str, &'a str)>) {
    let mut counts: Vec<(&str, &str, u64)> = Vec::new();
    for (job_type, queue) in created {
        match counts
            .iter_mut()
            .find(|(seen_type, seen_queue, _)| *seen_type == job_type && *seen_queue == queue)
        {
            Some((_, _, count)) => *count += 1,
            None => counts.push((job_type, queue, 1)),
        }
    }
    for (job_type, queue, count) in counts {
        crate::core::metrics::count_enqueued(job_type, queue, count);
    }
}

/// The request list as column arrays, for one `unnest` insert. A column every request leaves
/// unset is sent as one NULL array instead of an array of NULLs (`unnest` pads it).
struct Columns<'a> {
    ids: Vec<Uuid>,
    job_types: Vec<&'a str>,
    organization_ids: Option<Vec<Option<Uuid>>>,
    payloads: Vec<Json<&'a Value>>,
    priorities: Option<Vec<Option<i32>>>,
    max_attempts: Option<Vec<Option<i32>>>,
    timeouts: Option<Vec<Option<i32>>>,
    run_ats: Option<Vec<Option<DateTime<Utc>>>>,
    keys: Vec<Option<&'a str>>,
    snapshots: Vec<Option<Value>>,
    created_by: Option<Vec<Option<Uuid>>>,
    resource_keys: Option<Vec<Option<&'a str>>>,
    /// Each job type once, for the definition check.
    distinct_types: Vec<&'a str>,
}

/// The values, or `None` when every one is `None`.
pub(super) fn unless_all_unset<T>(values: Vec<Option<T>>) -> Option<Vec<Option<T>>> {
    values.iter().any(Option::is_some).then_some(values)
}

impl<'a> Columns<'a> {
    /// Columns of the requests at `indices`, with `ids` (one per index).
    fn from_requests(requests: &'a [JobEnqueue<'a>], indices: &[usize], ids: Vec<Uuid>) -> Self {
        let picked = || indices.iter().map(|&index| &requests[index]);
        let column = |value: fn(&JobEnqueue<'a>) -> Option<i32>| {
            unless_all_unset(picked().map(value).collect())
        };
        Self {
            ids,
            job_types: picked().map(|r| r.job_type.as_str()).collect(),
            organization_ids: unless_all_unset(picked().map(|r| r.organization_id).collect()),
            payloads: picked().map(|r| Json(r.payload)).collect(),
            priorities: column(|r| r.priority),
            max_attempts: column(|r| r.max_attempts),
            timeouts: column(|r| r.timeout_seconds),
            run_ats: unless_all_unset(picked().map(JobEnqueue::effective_run_at).collect()),
            keys: picked().map(|r| r.idempotency_key).collect(),
            snapshots: picked()
                .map(|r| r.idempotency_key.map(|_| r.snapshot()))
                .collect(),
            created_by: unless_all_unset(picked().map(|r| r.created_by_user_id).collect()),
            resource_keys: unless_all_unset(picked().map(|r| r.resource_key).collect()),
            distinct_types: picked()
                .map(|r| r.job_type.as_str())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
        }
    }
}
