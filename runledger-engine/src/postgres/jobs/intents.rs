//! Durable enqueue intents, an outbox: a caller records the wish to enqueue a job inside its own
//! transaction, without the job type's definition having to exist yet, and the intent promoter
//! of a worker that runs the type turns it into a job later.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Acquire, PgExecutor, PgPool, Postgres};
use uuid::Uuid;

use crate::core::jobs::limits::storable_text;
use crate::core::jobs::{JobId, JobIntentId, JobIntentStatus, fresh_uuid};
use crate::postgres::error::{Error, Result};
use crate::postgres::jobs::enqueue::{JobEnqueue, enqueue_on};
use crate::postgres::jobs::lease::{MAX_ERROR_MESSAGE_CHARS, truncate_chars};
use crate::postgres::jobs::reads::MAX_PAGE_SIZE;
use crate::postgres::jobs::scope::TenantScope;

/// The PostgreSQL channel notified (payload: the job type) when an intent commits, so that
/// promoters of that type wake at once; they keep polling as the correctness fallback.
pub const JOB_INTENT_CHANNEL: &str = "runledger_enqueue_intents";

/// What [`record_job_enqueue_intent`] resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedJobIntent {
    /// The intent's id.
    pub id: JobIntentId,
    /// Its status when the call returned (`Pending` for a new intent).
    pub status: JobIntentStatus,
    /// The job it became, once promoted.
    pub job_id: Option<JobId>,
    /// `false` when the key matched an existing intent with the same request.
    pub created: bool,
}

/// Records a durable enqueue intent: the job `request` describes is enqueued later, by the
/// intent promoter of any worker that runs its type, once that type is defined and enabled.
///
/// Run it inside the caller's transaction (`&mut *tx`): the intent commits or rolls back with
/// the business rows that caused it, and unlike [`enqueue_job`](super::enqueue_job) it does not
/// need the job definition to exist yet (a producer may deploy before the workers that run
/// the type). The request must carry an idempotency key (`job.intent_idempotency_key_required`
/// otherwise): recording the same request again returns the existing intent, another request
/// under the same key (same organization and job type) fails with
/// `job.intent_idempotency_conflict`. The job the intent becomes carries the same key, so a
/// keyed [`enqueue_job`](super::enqueue_job) of the same request and the intent make one job.
/// Inside a REPEATABLE READ or SERIALIZABLE transaction it fails with
/// `validation.isolation_level_unsupported`.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use runledger_engine::postgres::jobs::{JobEnqueue, record_job_enqueue_intent};
///
/// let payload = serde_json::json!({"order_id": 42});
/// let mut tx = pool.begin().await?;
/// // ... insert the order row with &mut *tx ...
/// let request = JobEnqueue::new("orders.confirm", &payload).idempotency_key("order:42:confirm");
/// let intent = record_job_enqueue_intent(&mut *tx, &request).await?;
/// tx.commit().await?;
/// println!("intent {} waits for a worker that runs orders.confirm", intent.id);
/// # Ok(()) }
/// ```
pub async fn record_job_enqueue_intent<'c, A>(
    acquire: A,
    request: &JobEnqueue<'_>,
) -> Result<RecordedJobIntent>
where
    A: Acquire<'c, Database = Postgres>,
{
    request.validate()?;
    let Some(key) = request.idempotency_key else {
        return Err(Error::invalid_input(
            "job.intent_idempotency_key_required",
            "an enqueue intent needs an idempotency key",
        ));
    };
    let snapshot = request.snapshot();
    let delay_ms = request
        .delay
        .filter(|_| request.run_at.is_none())
        .map(|delay| i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
    let mut conn = acquire.acquire().await?;
    // An insert that lost to a concurrent one whose transaction then rolled back finds neither
    // a row nor a conflict; trying again records it.
    for _ in 0..3 {
        let inserted = sqlx::query!(
            r#"
            WITH refused AS (
                SELECT current_setting('transaction_isolation') AS level
                WHERE current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted')
            ),
            inserted AS (
                INSERT INTO runledger.job_enqueue_intents (
                    id, job_type, organization_id, idempotency_key, payload, priority,
                    max_attempts, timeout_seconds, run_at, delay_ms, created_by_user_id,
                    enqueue_request, resource_key
                )
                SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13
                WHERE NOT EXISTS (SELECT 1 FROM refused)
                ON CONFLICT (
                    coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
                    job_type,
                    idempotency_key
                ) DO NOTHING
                RETURNING job_type
            )
            SELECT (SELECT level FROM refused) AS refused_level,
                   EXISTS (SELECT 1 FROM inserted) AS "inserted!",
                   (SELECT pg_notify('runledger_enqueue_intents', job_type) IS NULL FROM inserted) AS notified
            "#,
            fresh_uuid(),
            request.job_type.as_str(),
            request.organization_id,
            key,
            request.payload,
            request.priority,
            request.max_attempts,
            request.timeout_seconds,
            request.run_at,
            delay_ms,
            request.created_by_user_id,
            &snapshot,
            request.resource_key,
        )
        .fetch_one(&mut *conn)
        .await?;
        if let Some(level) = inserted.refused_level {
            return Err(Error::IsolationLevelUnsupported { level });
        }
        let existing = sqlx::query!(
            r#"
            SELECT id AS "id: JobIntentId", status AS "status: JobIntentStatus",
                   job_id AS "job_id: JobId", (enqueue_request = $4) AS "same_request!"
            FROM runledger.job_enqueue_intents
            WHERE coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
                      = coalesce($1, '00000000-0000-0000-0000-000000000000'::uuid)
              AND job_type = $2 AND idempotency_key = $3
            "#,
            request.organization_id,
            request.job_type.as_str(),
            key,
            &snapshot,
        )
        .fetch_optional(&mut *conn)
        .await?;
        match existing {
            Some(row) if inserted.inserted || row.same_request => {
                return Ok(RecordedJobIntent {
                    id: row.id,
                    status: row.status,
                    job_id: row.job_id,
                    created: inserted.inserted,
                });
            }
            Some(row) => {
                return Err(Error::IntentIdempotencyConflict {
                    idempotency_key: key.to_owned(),
                    existing_intent_id: row.id,
                });
            }
            None => {}
        }
    }
    Err(Error::invalid_input(
        "job.idempotency_unresolved",
        "the intent's idempotency key is contended; retry the request",
    ))
}

/// One enqueue intent as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobIntentRecord {
    /// The intent's id.
    pub id: JobIntentId,
    /// The job type it enqueues.
    pub job_type: String,
    /// Its organization.
    pub organization_id: Option<Uuid>,
    /// Its idempotency key (also the key of the job it becomes).
    pub idempotency_key: String,
    /// The job's payload.
    pub payload: Value,
    /// Where it is.
    pub status: JobIntentStatus,
    /// The job it became, once promoted.
    pub job_id: Option<JobId>,
    /// Promotion tries that failed and were deferred.
    pub attempts: i32,
    /// When a promoter may try it (again).
    pub next_attempt_at: DateTime<Utc>,
    /// Why the last try failed, or why it conflicted.
    pub last_error_code: Option<String>,
    /// The message that goes with `last_error_code`.
    pub last_error_message: Option<String>,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it was promoted or conflicted.
    pub finished_at: Option<DateTime<Utc>>,
}

/// Reads one intent within `scope`; `None` when it does not exist or belongs to another
/// organization than the scope's.
pub async fn get_job_enqueue_intent<'e>(
    executor: impl PgExecutor<'e>,
    intent_id: JobIntentId,
    scope: TenantScope,
) -> Result<Option<JobIntentRecord>> {
    let (scoped, organization) = scope.sql();
    let row = sqlx::query_as!(
        JobIntentRecord,
        r#"
        SELECT id AS "id: JobIntentId", job_type, organization_id, idempotency_key,
               runledger.readable_json(payload, 'job.payload_too_deep') AS "payload!",
               status AS "status: JobIntentStatus", job_id AS "job_id: JobId", attempts,
               next_attempt_at, last_error_code, last_error_message, created_at, updated_at,
               finished_at
        FROM runledger.job_enqueue_intents
        WHERE id = $1 AND (NOT $2 OR organization_id IS NOT DISTINCT FROM $3)
        "#,
        intent_id.0,
        scoped,
        organization,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row)
}

/// Filters and page position for [`list_job_enqueue_intents`]. Intents come newest first.
///
/// ```
/// use runledger_engine::core::jobs::JobIntentStatus;
/// use runledger_engine::postgres::jobs::JobIntentListFilter;
///
/// let conflicted = JobIntentListFilter::new().status(JobIntentStatus::Conflicted).limit(20);
/// assert_eq!(conflicted.limit, 20);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct JobIntentListFilter {
    /// Only intents in this status.
    pub status: Option<JobIntentStatus>,
    /// Only intents of this job type.
    pub job_type: Option<String>,
    /// Only intents of this organization.
    pub organization_id: Option<Uuid>,
    /// Only intents older than this one (the last id of the previous page).
    pub after: Option<JobIntentId>,
    /// Page size, 1 to [`MAX_PAGE_SIZE`]; 0 means 100.
    pub limit: i64,
}

impl JobIntentListFilter {
    /// No filter, first page of 100.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only intents in this status.
    pub fn status(mut self, status: JobIntentStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only intents of this job type.
    pub fn job_type(mut self, job_type: impl Into<String>) -> Self {
        self.job_type = Some(job_type.into());
        self
    }

    /// Only intents of this organization.
    pub fn organization_id(mut self, organization_id: Uuid) -> Self {
        self.organization_id = Some(organization_id);
        self
    }

    /// The page size.
    pub fn limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }
}

/// Lists intents, newest first: for operator surfaces looking into a backlog of pending or
/// conflicted intents.
pub async fn list_job_enqueue_intents<'e>(
    executor: impl PgExecutor<'e>,
    filter: &JobIntentListFilter,
) -> Result<Vec<JobIntentRecord>> {
    let limit = match filter.limit {
        0 => 100,
        limit => limit.clamp(1, MAX_PAGE_SIZE),
    };
    let rows = sqlx::query_as!(
        JobIntentRecord,
        r#"
        SELECT id AS "id: JobIntentId", job_type, organization_id, idempotency_key,
               runledger.readable_json(payload, 'job.payload_too_deep') AS "payload!",
               status AS "status: JobIntentStatus", job_id AS "job_id: JobId", attempts,
               next_attempt_at, last_error_code, last_error_message, created_at, updated_at,
               finished_at
        FROM runledger.job_enqueue_intents
        WHERE ($1::text IS NULL OR status = $1)
          AND ($2::text IS NULL OR job_type = $2)
          AND ($3::uuid IS NULL OR organization_id = $3)
          AND ($4::uuid IS NULL OR id < $4)
        ORDER BY id DESC
        LIMIT $5
        "#,
        filter.status.map(JobIntentStatus::as_str),
        filter.job_type.as_deref(),
        filter.organization_id,
        filter.after.map(|id| id.0),
        limit,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// One promotion batch: which job types to promote, how many intents at most, and how long an
/// intent whose promotion failed waits before the next try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntentPromotion<'a> {
    /// The job types this promoter's worker runs; intents of other types are left alone.
    pub job_types: &'a [String],
    /// Most intents per batch.
    pub limit: i64,
    /// Wait after the first failed try; doubles with each further failure (with jitter).
    pub retry_base_delay: Duration,
    /// Longest wait between tries.
    pub retry_max_delay: Duration,
}

impl<'a> IntentPromotion<'a> {
    /// A batch of up to `limit` intents of `job_types`, retried after 1 s doubling up to 5 min.
    pub fn new(job_types: &'a [String], limit: i64) -> Self {
        Self {
            job_types,
            limit,
            retry_base_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(300),
        }
    }

    /// Sets the retry delays of deferred intents.
    pub fn retry_delays(mut self, base: Duration, max: Duration) -> Self {
        self.retry_base_delay = base;
        self.retry_max_delay = max.max(base);
        self
    }
}

/// Counts from one [`promote_job_enqueue_intents`] batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntentPromotionPass {
    /// Intents taken for promotion.
    pub claimed: usize,
    /// Intents turned into jobs (or found to match an existing keyed job).
    pub promoted: usize,
    /// Intents refused because a job with their key and another request exists.
    pub conflicted: usize,
    /// Intents whose promotion failed and that wait for another try.
    pub deferred: usize,
}

impl IntentPromotionPass {
    /// Adds another batch's counts to this one.
    pub fn add(&mut self, other: Self) {
        self.claimed += other.claimed;
        self.promoted += other.promoted;
        self.conflicted += other.conflicted;
        self.deferred += other.deferred;
    }
}

/// How one intent's promotion ended.
enum Outcome {
    Promoted(JobId),
    Conflicted(String),
    Deferred(&'static str, String),
}

/// A due intent, as the promoter claims it.
struct DueIntent {
    id: Uuid,
    job_type: String,
    organization_id: Option<Uuid>,
    idempotency_key: String,
    payload: Value,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    timeout_seconds: Option<i32>,
    run_at: Option<DateTime<Utc>>,
    delay_ms: Option<i64>,
    created_by_user_id: Option<Uuid>,
    resource_key: Option<String>,
    created_at: DateTime<Utc>,
}

impl DueIntent {
    /// The enqueue request the intent recorded; a delay counts from the recording.
    fn request(&self) -> JobEnqueue<'_> {
        let mut request = JobEnqueue::new(self.job_type.as_str(), &self.payload)
            .idempotency_key(&self.idempotency_key);
        request.organization_id = self.organization_id;
        request.priority = self.priority;
        request.max_attempts = self.max_attempts;
        request.timeout_seconds = self.timeout_seconds;
        request.created_by_user_id = self.created_by_user_id;
        request.resource_key = self.resource_key.as_deref();
        match (self.run_at, self.delay_ms) {
            (Some(run_at), _) => request = request.run_at(run_at),
            (None, Some(delay_ms)) => {
                let delay = Duration::from_millis(u64::try_from(delay_ms).unwrap_or(0));
                request = request.delay(delay);
                request.delay_from = Some(self.created_at);
            }
            (None, None) => {}
        }
        request
    }
}

/// Promotes up to `promotion.limit` due intents of `promotion.job_types` whose definition is
/// enabled, in one transaction: intents are claimed with `FOR UPDATE SKIP LOCKED` (two
/// promoters never take the same intent), and each is enqueued in its own savepoint, so one
/// failure does not undo the others. An intent becomes `PROMOTED` with its job's id (also when a
/// keyed job with the same request already exists), `CONFLICTED` when a keyed job with another
/// request exists, or stays `PENDING` with a capped, jittered delay before the next try.
///
/// When nothing is due the call is one cheap query. Intents of types missing from
/// `job_types`, undefined or disabled wait without spending tries. Call again while
/// `claimed` equals the limit.
pub async fn promote_job_enqueue_intents(
    pool: &PgPool,
    promotion: &IntentPromotion<'_>,
) -> Result<IntentPromotionPass> {
    let mut pass = IntentPromotionPass::default();
    if promotion.job_types.is_empty() || promotion.limit <= 0 || !any_due(pool, promotion).await? {
        return Ok(pass);
    }
    let mut tx = pool.begin().await?;
    let intents = claim_due(&mut tx, promotion).await?;
    pass.claimed = intents.len();
    let mut outcomes = Vec::with_capacity(intents.len());
    for intent in &intents {
        let outcome = promote(&mut tx, intent).await?;
        match &outcome {
            Outcome::Promoted(_) => pass.promoted += 1,
            Outcome::Conflicted(message) => {
                pass.conflicted += 1;
                tracing::warn!(intent.id = %intent.id, job.r#type = %intent.job_type, %message, "enqueue intent conflicts with an existing job");
            }
            Outcome::Deferred(code, message) => {
                pass.deferred += 1;
                tracing::warn!(intent.id = %intent.id, job.r#type = %intent.job_type, code, %message, "enqueue intent could not be promoted; deferred");
            }
        }
        outcomes.push((intent.id, outcome));
    }
    record_outcomes(&mut tx, &outcomes, promotion).await?;
    tx.commit().await?;
    Ok(pass)
}

/// The idle check: one index probe per job type.
async fn any_due(pool: &PgPool, promotion: &IntentPromotion<'_>) -> Result<bool> {
    let due = sqlx::query_scalar!(
        r#"
        SELECT EXISTS (
            SELECT 1
            FROM runledger.job_enqueue_intents i
            WHERE i.status = 'PENDING' AND i.job_type = ANY($1) AND i.next_attempt_at <= now()
              AND EXISTS (
                  SELECT 1 FROM runledger.job_definitions d
                  WHERE d.job_type = i.job_type AND d.is_enabled
              )
        ) AS "due!"
        "#,
        promotion.job_types,
    )
    .fetch_one(pool)
    .await?;
    Ok(due)
}

async fn claim_due(
    conn: &mut sqlx::PgConnection,
    promotion: &IntentPromotion<'_>,
) -> Result<Vec<DueIntent>> {
    let intents = sqlx::query_as!(
        DueIntent,
        r#"
        SELECT i.id, i.job_type, i.organization_id, i.idempotency_key, i.payload, i.priority,
               i.max_attempts, i.timeout_seconds, i.run_at, i.delay_ms, i.created_by_user_id,
               i.resource_key, i.created_at
        FROM runledger.job_enqueue_intents i
        WHERE i.status = 'PENDING' AND i.job_type = ANY($1) AND i.next_attempt_at <= now()
          AND EXISTS (
              SELECT 1 FROM runledger.job_definitions d
              WHERE d.job_type = i.job_type AND d.is_enabled
          )
        ORDER BY i.next_attempt_at, i.id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
        "#,
        promotion.job_types,
        promotion.limit,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(intents)
}

/// Enqueues one intent's job in a savepoint. A lost connection fails the whole batch (nothing
/// of it commits); any other failure is this intent's outcome.
async fn promote(conn: &mut sqlx::PgConnection, intent: &DueIntent) -> Result<Outcome> {
    let request = intent.request();
    let mut savepoint = sqlx::Connection::begin(&mut *conn).await?;
    let enqueued = enqueue_on(&mut savepoint, std::slice::from_ref(&request), None)
        .await
        .and_then(|jobs| {
            jobs.first()
                .map(|job| job.id)
                .ok_or_else(|| Error::corrupt("enqueue returned no job"))
        });
    match enqueued {
        Ok(job_id) => {
            savepoint.commit().await?;
            Ok(Outcome::Promoted(job_id))
        }
        Err(err) => {
            savepoint.rollback().await?;
            Ok(match err {
                Error::Query(ref query) if query.is_connection_error() => return Err(err),
                Error::IdempotencyConflict {
                    existing_job_id, ..
                } => Outcome::Conflicted(format!(
                    "job {existing_job_id} has this idempotency key and another request"
                )),
                other => Outcome::Deferred(other.code(), other.internal_message()),
            })
        }
    }
}

/// Writes a batch's outcomes in one statement; deferred intents get their next try time.
async fn record_outcomes(
    conn: &mut sqlx::PgConnection,
    outcomes: &[(Uuid, Outcome)],
    promotion: &IntentPromotion<'_>,
) -> Result<()> {
    if outcomes.is_empty() {
        return Ok(());
    }
    let mut ids = Vec::with_capacity(outcomes.len());
    let mut statuses = Vec::with_capacity(outcomes.len());
    let mut job_ids = Vec::with_capacity(outcomes.len());
    let mut codes = Vec::with_capacity(outcomes.len());
    let mut messages = Vec::with_capacity(outcomes.len());
    for (id, outcome) in outcomes {
        let (status, job_id, code, message) = match outcome {
            Outcome::Promoted(job_id) => (JobIntentStatus::Promoted, Some(job_id.0), None, None),
            Outcome::Conflicted(message) => (
                JobIntentStatus::Conflicted,
                None,
                Some("job.idempotency_conflict"),
                Some(message.clone()),
            ),
            Outcome::Deferred(code, message) => (
                JobIntentStatus::Pending,
                None,
                Some(*code),
                Some(storable_text(truncate_chars(message, MAX_ERROR_MESSAGE_CHARS)).into_owned()),
            ),
        };
        ids.push(*id);
        statuses.push(status.as_str());
        job_ids.push(job_id);
        codes.push(code);
        messages.push(message);
    }
    sqlx::query!(
        r#"
        UPDATE runledger.job_enqueue_intents i
        SET status = o.status,
            job_id = o.job_id,
            attempts = i.attempts + CASE WHEN o.status = 'PENDING' THEN 1 ELSE 0 END,
            next_attempt_at = CASE WHEN o.status = 'PENDING'
                                   THEN now() + runledger.retry_backoff(i.attempts + 1, $6, $7)
                                   ELSE i.next_attempt_at END,
            last_error_code = o.error_code,
            last_error_message = o.error_message,
            finished_at = CASE WHEN o.status = 'PENDING' THEN NULL ELSE now() END,
            updated_at = now()
        FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[])
            AS o(id, status, job_id, error_code, error_message)
        WHERE i.id = o.id
        "#,
        &ids,
        &statuses as &[&str],
        &job_ids as &[Option<Uuid>],
        &codes as &[Option<&str>],
        &messages as &[Option<String>],
        millis(promotion.retry_base_delay),
        millis(promotion.retry_max_delay.max(promotion.retry_base_delay)),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(i64::MAX)
        .max(1)
}

/// Intent figures for one job type: the pending backlog and the last 24 hours.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct JobIntentMetrics {
    /// The job type (one row per type with intents, defined or not).
    pub job_type: String,
    /// Intents waiting to be promoted.
    pub pending: i64,
    /// Pending intents a promoter may take now.
    pub pending_due: i64,
    /// Pending intents whose promotion failed at least once.
    pub deferred: i64,
    /// When the oldest pending intent was recorded: how long the backlog has been waiting
    /// (a type no worker runs yet keeps its intents here).
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// Intents promoted in the last 24 hours.
    pub promoted_24h: i64,
    /// Intents that conflicted with an existing job in the last 24 hours.
    pub conflicted_24h: i64,
}

/// Reads [`JobIntentMetrics`] per job type, for one organization's intents when
/// `organization_id` is given. The backlog is read through the promoter's partial index and
/// the last day's outcomes through a finish-time index, so the cost follows the backlog, not
/// the history.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// for row in runledger_engine::postgres::jobs::get_job_intent_metrics(&pool, None).await? {
///     println!("{}: {} pending ({} deferred)", row.job_type, row.pending, row.deferred);
/// }
/// # Ok(()) }
/// ```
pub async fn get_job_intent_metrics<'e>(
    executor: impl PgExecutor<'e>,
    organization_id: Option<Uuid>,
) -> Result<Vec<JobIntentMetrics>> {
    let rows = sqlx::query_as!(
        JobIntentMetrics,
        r#"
        SELECT job_type AS "job_type!", pending AS "pending!", pending_due AS "pending_due!",
               deferred AS "deferred!", oldest_pending_at, promoted_24h AS "promoted_24h!",
               conflicted_24h AS "conflicted_24h!"
        FROM runledger.job_intent_metrics($1)
        ORDER BY job_type
        "#,
        organization_id,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
