//! Job definitions: per-type settings, and whether the type may be enqueued at all.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::core::jobs::{JobDefaults, JobType};
use crate::postgres::error::{Error, Result};

/// Default attempts before a job is dead-lettered.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;
/// Default per-attempt timeout.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 300;
/// Default first retry delay; later retries double it.
pub const DEFAULT_RETRY_BASE_DELAY_MS: i64 = 1_000;
/// Default cap on the retry delay.
pub const DEFAULT_RETRY_MAX_DELAY_MS: i64 = 3_600_000;
/// The queue of a job type that names none.
pub const DEFAULT_QUEUE: &str = "default";
/// Largest retry delay a definition may ask for (365 days).
pub const MAX_RETRY_DELAY_MS: i64 = 365 * 24 * 3_600_000;

/// A stored job definition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct JobDefinition {
    /// The job type.
    pub job_type: String,
    /// Handler version, for operators.
    pub version: i32,
    /// Attempts before dead-lettering.
    pub max_attempts: i32,
    /// Per-attempt timeout.
    pub timeout_seconds: i32,
    /// Default priority of new jobs (higher runs first).
    pub priority: i32,
    /// First retry delay; each later retry doubles it.
    pub retry_base_delay_ms: i64,
    /// Cap on the retry delay.
    pub retry_max_delay_ms: i64,
    /// Whether new jobs of this type may be enqueued.
    pub is_enabled: bool,
    /// How long finished jobs of this type are kept, whatever their end (`None`: the pruner's
    /// retention per status).
    pub retention_seconds: Option<i32>,
    /// The queue new jobs of this type enter.
    pub queue: String,
    /// Most jobs of this type running at once across all workers (`None`: no global limit).
    pub global_concurrency: Option<i32>,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
}

/// Insert-or-update request for a job definition.
///
/// ```
/// use runledger_engine::postgres::jobs::JobDefinitionUpsert;
///
/// let upsert = JobDefinitionUpsert::new("emails.send")
///     .max_attempts(8)
///     .timeout_seconds(30)
///     .retry_delays_ms(500, 60_000);
/// assert_eq!(upsert.max_attempts, 8);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobDefinitionUpsert<'a> {
    /// The job type.
    pub job_type: JobType<'a>,
    /// Handler version (positive).
    pub version: i32,
    /// Attempts before dead-lettering (positive).
    pub max_attempts: i32,
    /// Per-attempt timeout (positive).
    pub timeout_seconds: i32,
    /// Default priority; may be zero or negative.
    pub priority: i32,
    /// First retry delay (positive).
    pub retry_base_delay_ms: i64,
    /// Cap on the retry delay (at least the base, at most [`MAX_RETRY_DELAY_MS`]).
    pub retry_max_delay_ms: i64,
    /// Whether the type may be enqueued.
    pub is_enabled: bool,
    /// How long finished jobs of this type are kept (positive; `None`: the pruner's retention
    /// per status).
    pub retention_seconds: Option<i32>,
    /// The queue new jobs of this type enter (default `default`).
    pub queue: std::borrow::Cow<'a, str>,
    /// Most jobs of this type running at once across all workers (positive; `None`: no
    /// global limit).
    pub global_concurrency: Option<i32>,
}

impl<'a> JobDefinitionUpsert<'a> {
    /// A definition with the default settings.
    pub fn new(job_type: impl Into<JobType<'a>>) -> Self {
        Self {
            job_type: job_type.into(),
            version: 1,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            priority: 0,
            retry_base_delay_ms: DEFAULT_RETRY_BASE_DELAY_MS,
            retry_max_delay_ms: DEFAULT_RETRY_MAX_DELAY_MS,
            is_enabled: true,
            retention_seconds: None,
            queue: std::borrow::Cow::Borrowed(DEFAULT_QUEUE),
            global_concurrency: None,
        }
    }

    /// Sets the version.
    pub fn version(mut self, version: i32) -> Self {
        self.version = version;
        self
    }

    /// Sets the attempts before dead-lettering.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets the per-attempt timeout.
    pub fn timeout_seconds(mut self, timeout_seconds: i32) -> Self {
        self.timeout_seconds = timeout_seconds;
        self
    }

    /// Sets the default priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Applies every value `values` sets (version, attempts, timeout, priority, enabled,
    /// retention), keeping this definition's value for the others.
    pub fn values(mut self, values: JobDefaults) -> Self {
        self.version = values.version.unwrap_or(self.version);
        self.max_attempts = values.max_attempts.unwrap_or(self.max_attempts);
        self.timeout_seconds = values.timeout_seconds.unwrap_or(self.timeout_seconds);
        self.priority = values.priority.unwrap_or(self.priority);
        self.is_enabled = values.enabled.unwrap_or(self.is_enabled);
        self.retention_seconds = values.retention_seconds.or(self.retention_seconds);
        if let Some(queue) = values.queue {
            self.queue = std::borrow::Cow::Borrowed(queue);
        }
        self.global_concurrency = values.global_concurrency.or(self.global_concurrency);
        self
    }

    /// Keeps finished jobs of this type for `seconds`, whatever their end, instead of the
    /// pruner's retention per status.
    pub fn retention_seconds(mut self, seconds: i32) -> Self {
        self.retention_seconds = Some(seconds);
        self
    }

    /// Sets the retry backoff: the first delay and the cap.
    pub fn retry_delays_ms(mut self, base: i64, cap: i64) -> Self {
        self.retry_base_delay_ms = base;
        self.retry_max_delay_ms = cap;
        self
    }

    /// Sets whether the type may be enqueued.
    pub fn enabled(mut self, is_enabled: bool) -> Self {
        self.is_enabled = is_enabled;
        self
    }

    fn validate(&self) -> Result<()> {
        self.job_type.validate()?;
        let positive = [
            (
                self.version > 0,
                "job_definition.invalid_version",
                "version must be positive",
            ),
            (
                self.max_attempts > 0,
                "job_definition.invalid_max_attempts",
                "max_attempts must be positive",
            ),
            (
                self.timeout_seconds > 0,
                "job_definition.invalid_timeout",
                "timeout_seconds must be positive",
            ),
            (
                self.retry_base_delay_ms > 0,
                "job_definition.invalid_retry_delay",
                "retry_base_delay_ms must be positive",
            ),
            (
                self.retry_max_delay_ms >= self.retry_base_delay_ms,
                "job_definition.invalid_retry_delay",
                "retry_max_delay_ms must be at least retry_base_delay_ms",
            ),
            (
                self.retry_max_delay_ms <= MAX_RETRY_DELAY_MS,
                "job_definition.invalid_retry_delay",
                "retry_max_delay_ms must be at most 365 days",
            ),
            (
                self.retention_seconds.is_none_or(|seconds| seconds > 0),
                "job_definition.invalid_retention",
                "retention_seconds must be positive",
            ),
            (
                self.global_concurrency.is_none_or(|limit| limit > 0),
                "job_definition.invalid_global_concurrency",
                "global_concurrency must be positive",
            ),
        ];
        match positive.into_iter().find(|(ok, ..)| !ok) {
            Some((_, code, message)) => Err(Error::invalid_input(code, message)),
            None => check_queue_name(&self.queue),
        }
    }
}

/// Inserts a definition or overwrites every field of an existing one.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{upsert_job_definition, JobDefinitionUpsert};
///
/// let definition = upsert_job_definition(&pool, &JobDefinitionUpsert::new("emails.send")).await?;
/// assert!(definition.is_enabled);
/// # Ok(()) }
/// ```
pub async fn upsert_job_definition<'e>(
    executor: impl PgExecutor<'e>,
    upsert: &JobDefinitionUpsert<'_>,
) -> Result<JobDefinition> {
    upsert.validate()?;
    let row = sqlx::query_as!(
        JobDefinition,
        r#"
        WITH previous AS (
            SELECT global_concurrency FROM runledger.job_definitions WHERE job_type = $1
        ),
        upserted AS (
            INSERT INTO runledger.job_definitions AS d (
                job_type, version, max_attempts, timeout_seconds, priority,
                retry_base_delay_ms, retry_max_delay_ms, is_enabled, retention_seconds, queue,
                global_concurrency
            )
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
            ON CONFLICT (job_type) DO UPDATE SET
                version = EXCLUDED.version,
                max_attempts = EXCLUDED.max_attempts,
                timeout_seconds = EXCLUDED.timeout_seconds,
                priority = EXCLUDED.priority,
                retry_base_delay_ms = EXCLUDED.retry_base_delay_ms,
                retry_max_delay_ms = EXCLUDED.retry_max_delay_ms,
                is_enabled = EXCLUDED.is_enabled,
                retention_seconds = EXCLUDED.retention_seconds,
                queue = EXCLUDED.queue,
                global_concurrency = EXCLUDED.global_concurrency,
                updated_at = now()
            RETURNING job_type, version, max_attempts, timeout_seconds, priority,
                      retry_base_delay_ms, retry_max_delay_ms, is_enabled, retention_seconds,
                      queue, global_concurrency, created_at, updated_at
        ),
        -- A changed limit flags the type's pending jobs again (this statement cannot see the
        -- new definition, so the flag is computed from the new value).
        regated AS (
            UPDATE runledger.job_queue q
            SET gated = q.resource_key IS NOT NULL OR runledger.job_gated($11 IS NOT NULL, q.queue)
            WHERE q.status = 'PENDING' AND q.job_type = $1
              AND EXISTS (SELECT 1 FROM previous p WHERE p.global_concurrency IS DISTINCT FROM $11)
              AND q.gated IS DISTINCT FROM (
                  q.resource_key IS NOT NULL OR runledger.job_gated($11 IS NOT NULL, q.queue)
              )
        )
        SELECT job_type AS "job_type!", version AS "version!", max_attempts AS "max_attempts!",
               timeout_seconds AS "timeout_seconds!", priority AS "priority!",
               retry_base_delay_ms AS "retry_base_delay_ms!",
               retry_max_delay_ms AS "retry_max_delay_ms!", is_enabled AS "is_enabled!",
               retention_seconds, queue AS "queue!", global_concurrency,
               created_at AS "created_at!", updated_at AS "updated_at!"
        FROM upserted
        "#,
        upsert.job_type.as_str(),
        upsert.version,
        upsert.max_attempts,
        upsert.timeout_seconds,
        upsert.priority,
        upsert.retry_base_delay_ms,
        upsert.retry_max_delay_ms,
        upsert.is_enabled,
        upsert.retention_seconds,
        &*upsert.queue,
        upsert.global_concurrency,
    )
    .fetch_one(executor)
    .await?;
    Ok(row)
}

/// Flags again the pending jobs of `queue` and of `job_types` after a global limit of theirs
/// was set or removed: jobs under a limit are claimed by
/// [`claim_limited_jobs`](crate::postgres::jobs::claim_limited_jobs) only.
pub(crate) async fn refresh_job_gates<'e>(
    executor: impl PgExecutor<'e>,
    queue: Option<&str>,
    job_types: &[String],
) -> Result<()> {
    sqlx::query!(
        "SELECT runledger.refresh_job_gates($1, $2)",
        queue,
        job_types
    )
    .execute(executor)
    .await?;
    Ok(())
}

/// A queue name: refused with `job.invalid_queue` when blank, longer than 255 characters or
/// containing NUL.
pub(crate) fn check_queue_name(queue: &str) -> Result<()> {
    crate::postgres::input::check_key(queue, "job.invalid_queue", "a queue name")
}

/// Reads one definition.
pub async fn get_job_definition<'e>(
    executor: impl PgExecutor<'e>,
    job_type: &str,
) -> Result<Option<JobDefinition>> {
    let row = sqlx::query_as!(
        JobDefinition,
        r#"
        SELECT job_type, version, max_attempts, timeout_seconds, priority,
               retry_base_delay_ms, retry_max_delay_ms, is_enabled, retention_seconds,
                  queue, global_concurrency, created_at, updated_at
        FROM runledger.job_definitions
        WHERE job_type = $1
        "#,
        job_type,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row)
}

/// Lists every definition, ordered by job type.
pub async fn list_job_definitions<'e>(executor: impl PgExecutor<'e>) -> Result<Vec<JobDefinition>> {
    let rows = sqlx::query_as!(
        JobDefinition,
        r#"
        SELECT job_type, version, max_attempts, timeout_seconds, priority,
               retry_base_delay_ms, retry_max_delay_ms, is_enabled, retention_seconds,
                  queue, global_concurrency, created_at, updated_at
        FROM runledger.job_definitions
        ORDER BY job_type
        "#,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// Enables or disables a definition. A disabled type cannot be enqueued; jobs already in the
/// queue still run.
///
/// Fails with `job_definition.not_found` when no definition has this type, and with
/// `job_definition.active_schedule_exists` when disabling a type that active schedules use.
pub async fn set_job_definition_enabled<'c, A>(
    acquire: A,
    job_type: &str,
    is_enabled: bool,
) -> Result<JobDefinition>
where
    A: sqlx::Acquire<'c, Database = sqlx::Postgres>,
{
    let mut conn = acquire.acquire().await?;
    let updated = sqlx::query_as!(
        JobDefinition,
        r#"
        UPDATE runledger.job_definitions
        SET is_enabled = $2, updated_at = now()
        WHERE job_type = $1
          AND ($2 OR NOT EXISTS (
              SELECT 1 FROM runledger.job_schedules s WHERE s.job_type = $1 AND s.is_active
          ))
        RETURNING job_type, version, max_attempts, timeout_seconds, priority,
                  retry_base_delay_ms, retry_max_delay_ms, is_enabled, retention_seconds,
                  queue, global_concurrency, created_at, updated_at
        "#,
        job_type,
        is_enabled,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(definition) = updated {
        return Ok(definition);
    }
    // Nothing changed: tell a missing definition from one that active schedules still use.
    let exists = get_job_definition(&mut *conn, job_type).await?.is_some();
    if exists {
        Err(Error::ActiveScheduleExists {
            job_type: job_type.to_owned(),
        })
    } else {
        Err(Error::DefinitionNotFound {
            job_type: job_type.to_owned(),
        })
    }
}

/// Writes catalog definitions in one transaction, as `JobCatalog::sync_definitions` and
/// `sync_definitions_exact` describe.
///
/// Inserts missing definitions; on existing ones it restores version, attempts, timeout,
/// priority and retention (retry delays stay as stored). Without `exact_scope`, enabled state is only ever
/// lowered (an operator-disabled row stays disabled). With `exact_scope`, enabled state is
/// restored from the definitions, and enabled rows inside the scope that are not in
/// `definitions` are disabled; their types are returned. Disabling a type that active
/// schedules still use fails with `job_definition.active_schedule_exists` and changes nothing.
pub async fn sync_job_definitions(
    pool: &sqlx::PgPool,
    definitions: &[JobDefinitionUpsert<'_>],
    exact_scope: Option<&[String]>,
) -> Result<Vec<String>> {
    for definition in definitions {
        definition.validate()?;
    }
    let job_types: Vec<&str> = definitions.iter().map(|d| d.job_type.as_str()).collect();
    let versions: Vec<i32> = definitions.iter().map(|d| d.version).collect();
    let max_attempts: Vec<i32> = definitions.iter().map(|d| d.max_attempts).collect();
    let timeouts: Vec<i32> = definitions.iter().map(|d| d.timeout_seconds).collect();
    let priorities: Vec<i32> = definitions.iter().map(|d| d.priority).collect();
    let bases: Vec<i64> = definitions.iter().map(|d| d.retry_base_delay_ms).collect();
    let caps: Vec<i64> = definitions.iter().map(|d| d.retry_max_delay_ms).collect();
    let enabled: Vec<bool> = definitions.iter().map(|d| d.is_enabled).collect();
    let retentions: Vec<Option<i32>> = definitions.iter().map(|d| d.retention_seconds).collect();
    let queues: Vec<&str> = definitions.iter().map(|d| &*d.queue).collect();
    let limits: Vec<Option<i32>> = definitions.iter().map(|d| d.global_concurrency).collect();

    let mut tx = pool.begin().await?;
    if exact_scope.is_some() {
        // Overlapping exact syncs (rolling deploys) must not interleave their active sets.
        sqlx::query!(
            "SELECT pg_advisory_xact_lock(hashtext('runledger.job_definitions.exact_sync'))"
        )
        .execute(&mut *tx)
        .await?;
    }
    // Types whose global limit changes: their pending jobs are flagged again below.
    let relimited = sqlx::query_scalar!(
        r#"
        SELECT d.job_type AS "job_type!"
        FROM unnest($1::text[], $2::int4[]) AS u(job_type, global_concurrency)
        JOIN runledger.job_definitions d ON d.job_type = u.job_type
        WHERE d.global_concurrency IS DISTINCT FROM u.global_concurrency
        "#,
        &job_types as &[&str],
        &limits as &[Option<i32>],
    )
    .fetch_all(&mut *tx)
    .await?;
    sqlx::query!(
        r#"
        INSERT INTO runledger.job_definitions AS d (
            job_type, version, max_attempts, timeout_seconds, priority,
            retry_base_delay_ms, retry_max_delay_ms, is_enabled, retention_seconds, queue,
            global_concurrency
        )
        SELECT * FROM unnest(
            $1::text[], $2::int4[], $3::int4[], $4::int4[], $5::int4[],
            $6::int8[], $7::int8[], $8::bool[], $10::int4[], $11::text[], $12::int4[]
        )
        ON CONFLICT (job_type) DO UPDATE SET
            version = EXCLUDED.version,
            max_attempts = EXCLUDED.max_attempts,
            timeout_seconds = EXCLUDED.timeout_seconds,
            priority = EXCLUDED.priority,
            retention_seconds = EXCLUDED.retention_seconds,
            queue = EXCLUDED.queue,
            global_concurrency = EXCLUDED.global_concurrency,
            is_enabled = CASE WHEN $9 THEN EXCLUDED.is_enabled
                              ELSE d.is_enabled AND EXCLUDED.is_enabled END,
            updated_at = now()
        "#,
        &job_types as &[&str],
        &versions,
        &max_attempts,
        &timeouts,
        &priorities,
        &bases,
        &caps,
        &enabled,
        exact_scope.is_some(),
        &retentions as &[Option<i32>],
        &queues as &[&str],
        &limits as &[Option<i32>],
    )
    .execute(&mut *tx)
    .await?;
    if !relimited.is_empty() {
        refresh_job_gates(&mut *tx, None, &relimited).await?;
    }

    let mut disabled = match exact_scope {
        Some(scope) => {
            sqlx::query_scalar!(
                r#"
                UPDATE runledger.job_definitions
                SET is_enabled = false, updated_at = now()
                WHERE job_type = ANY($1) AND NOT (job_type = ANY($2)) AND is_enabled
                RETURNING job_type
                "#,
                scope,
                &job_types as &[&str],
            )
            .fetch_all(&mut *tx)
            .await?
        }
        None => Vec::new(),
    };
    disabled.sort();

    // Types this sync disables must not be feeding active schedules.
    let mut disabling: Vec<&str> = definitions
        .iter()
        .filter(|d| !d.is_enabled)
        .map(|d| d.job_type.as_str())
        .collect();
    disabling.extend(disabled.iter().map(String::as_str));
    if !disabling.is_empty() {
        let blocked = sqlx::query_scalar!(
            r#"
            SELECT job_type
            FROM runledger.job_schedules
            WHERE is_active AND job_type = ANY($1)
            ORDER BY job_type
            LIMIT 1
            "#,
            &disabling as &[&str],
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(job_type) = blocked {
            // Dropping the transaction rolls the whole sync back.
            return Err(Error::ActiveScheduleExists { job_type });
        }
    }
    tx.commit().await?;
    Ok(disabled)
}
