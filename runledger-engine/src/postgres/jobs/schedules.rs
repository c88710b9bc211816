//! Cron schedules: lower-level upsert and activation, catalog sync, and the scheduler's
//! materialization of due fires.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::core::jobs::{JobScheduleId, JobType};
use crate::core::schedules::{CronSchedule, TimeZone};
use crate::postgres::error::{Error, Result};
use crate::postgres::input::{check_json_field, check_text_field, check_timestamp};
use crate::postgres::jobs::enqueue::{JobEnqueue, enqueue_on};

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobSchedule {
    /// The schedule's id.
    pub id: JobScheduleId,
    /// Unique name.
    pub name: String,
    /// The job type each fire enqueues.
    pub job_type: String,
    /// The cron expression as given.
    pub cron_expr: String,
    /// Payload template; each job also gets `schedule` and `scheduled_for`.
    pub payload_template: Value,
    /// Whether the schedule fires.
    pub is_active: bool,
    /// Organization of the enqueued jobs.
    pub organization_id: Option<Uuid>,
    /// Upper bound of the deterministic per-fire delay.
    pub max_jitter_seconds: i32,
    /// The IANA time zone the cron expression is evaluated in (`UTC` unless set).
    pub time_zone: String,
    /// The next nominal fire (the cursor).
    pub next_fire_at: DateTime<Utc>,
    /// The last nominal fire materialized.
    pub last_fired_at: Option<DateTime<Utc>>,
    /// Why the last attempt to fire failed, if it did.
    pub last_error_code: Option<String>,
    /// When the scheduler tries the fire at `next_fire_at` again after it failed; `None`
    /// while that fire has not failed.
    pub retry_at: Option<DateTime<Utc>>,
}

/// Insert-or-update request for a schedule.
///
/// ```
/// use runledger_engine::postgres::jobs::job_schedule;
///
/// let payload = serde_json::json!({"full": false});
/// let upsert = job_schedule("reports.refresh.hourly", "reports.refresh", "0 0 * * * *")
///     .payload_template(&payload)
///     .max_jitter_seconds(30);
/// assert!(upsert.is_active);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobScheduleUpsert<'a> {
    /// Unique name.
    pub name: &'a str,
    /// The job type each fire enqueues.
    pub job_type: JobType<'a>,
    /// Cron expression (seconds field, 5-field, or `@hourly`-style alias), evaluated in
    /// `time_zone`.
    pub cron_expr: &'a str,
    /// Payload template.
    pub payload_template: Option<&'a Value>,
    /// Active state on first insert (an existing row keeps its own).
    pub is_active: bool,
    /// Organization of the enqueued jobs.
    pub organization_id: Option<Uuid>,
    /// Upper bound of the deterministic per-fire delay.
    pub max_jitter_seconds: i32,
    /// The IANA time zone the cron expression is evaluated in (default `UTC`); fires are
    /// wall-clock times there, computed across daylight-saving changes.
    pub time_zone: &'a str,
    /// First fire when the schedule is created or its cron or time zone changes. Default: the
    /// next cron fire after now for a new schedule or a changed time zone, and now for a
    /// changed cron (the schedule fires promptly, then follows its new cron).
    pub next_fire_at: Option<DateTime<Utc>>,
}

/// Starts a [`JobScheduleUpsert`]: active on insert, empty payload, no jitter, UTC.
pub fn job_schedule<'a>(
    name: &'a str,
    job_type: &'a str,
    cron_expr: &'a str,
) -> JobScheduleUpsert<'a> {
    JobScheduleUpsert {
        name,
        job_type: JobType::new(job_type),
        cron_expr,
        payload_template: None,
        is_active: true,
        organization_id: None,
        max_jitter_seconds: 0,
        time_zone: "UTC",
        next_fire_at: None,
    }
}

impl<'a> JobScheduleUpsert<'a> {
    /// Sets the payload template.
    pub fn payload_template(mut self, payload: &'a Value) -> Self {
        self.payload_template = Some(payload);
        self
    }

    /// Sets the active state used when the schedule is first inserted.
    pub fn active(mut self, is_active: bool) -> Self {
        self.is_active = is_active;
        self
    }

    /// Sets the organization.
    pub fn organization_id(mut self, organization_id: Uuid) -> Self {
        self.organization_id = Some(organization_id);
        self
    }

    /// Sets the jitter bound.
    pub fn max_jitter_seconds(mut self, seconds: i32) -> Self {
        self.max_jitter_seconds = seconds;
        self
    }

    /// Evaluates the cron expression in the IANA time zone `time_zone` (`Europe/Berlin`);
    /// an unknown name fails the upsert with `job_schedule.invalid_time_zone`.
    ///
    /// ```
    /// use runledger_engine::postgres::jobs::job_schedule;
    ///
    /// let nightly = job_schedule("reports.nightly", "reports.refresh", "0 3 * * *")
    ///     .time_zone("Europe/Berlin");
    /// assert_eq!(nightly.time_zone, "Europe/Berlin");
    /// ```
    pub fn time_zone(mut self, time_zone: &'a str) -> Self {
        self.time_zone = time_zone;
        self
    }

    /// Sets the first fire.
    pub fn next_fire_at(mut self, at: DateTime<Utc>) -> Self {
        self.next_fire_at = Some(at);
        self
    }

    /// Validates and returns the first fire to store if the cron is new or changed.
    fn prepare(&self) -> Result<DateTime<Utc>> {
        if let Err(problem) = runledger_names::check(self.name) {
            return Err(Error::invalid_input(
                "job_schedule.invalid_name",
                format!("schedule name `{}` {problem}", self.name),
            ));
        }
        check_text_field(self.name, "job_schedule.invalid_name", "the schedule name")?;
        self.job_type.validate()?;
        if let Some(payload) = self.payload_template {
            check_json_field(
                payload,
                "job_schedule.invalid_payload",
                "the payload template",
            )?;
        }
        if let Some(at) = self.next_fire_at {
            check_timestamp(at, "job_schedule.invalid_next_fire_at", "next_fire_at")?;
        }
        if self.max_jitter_seconds < 0 {
            return Err(Error::invalid_input(
                "job_schedule.invalid_jitter",
                "max_jitter_seconds must not be negative",
            ));
        }
        let time_zone = TimeZone::parse(self.time_zone).map_err(|err| {
            let hint = err
                .suggestion()
                .map(|name| format!("; did you mean `{name}`?"))
                .unwrap_or_default();
            Error::invalid_input(err.code(), format!("{err}{hint}"))
        })?;
        let cron = CronSchedule::parse_in(self.cron_expr, time_zone).map_err(|err| {
            Error::InvalidCron {
                expression: self.cron_expr.to_owned(),
                reason: err.internal_message(),
            }
        })?;
        let now = Utc::now();
        Ok(self
            .next_fire_at
            .or_else(|| cron.next_after(now))
            .unwrap_or(now))
    }
}

/// Creates or updates a schedule. A new schedule takes `is_active` from the request; an
/// existing one keeps its stored active state (admin pauses survive). The cursor is kept while
/// the cron expression and time zone are unchanged; a changed cron stores `next_fire_at`, or
/// now when it is `None`, so the schedule fires promptly and then follows its new cron. A new
/// schedule without `next_fire_at` first fires at the cron's next time. An invalid cron gives
/// `job_schedule.invalid_cron`, an unknown time zone `job_schedule.invalid_time_zone`; an
/// active schedule needs an enabled definition (`job_schedule.definition_not_found_or_disabled`).
pub async fn upsert_job_schedule(
    pool: &PgPool,
    upsert: &JobScheduleUpsert<'_>,
) -> Result<JobSchedule> {
    let first_fire = upsert.prepare()?;
    let mut tx = pool.begin().await?;
    let row = write_schedule(&mut tx, upsert, first_fire, false).await?;
    if row.is_active {
        require_enabled_definition(&mut tx, &row.job_type).await?;
    }
    tx.commit().await?;
    Ok(row)
}

/// Pauses or resumes a schedule by name. Activating needs an enabled definition.
pub async fn set_job_schedule_active(
    pool: &PgPool,
    name: &str,
    is_active: bool,
) -> Result<JobSchedule> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query_as!(
        JobSchedule,
        r#"
        UPDATE runledger.job_schedules
        SET is_active = $2, updated_at = now()
        WHERE name = $1
        RETURNING id AS "id: JobScheduleId", name, job_type, cron_expr, payload_template,
                  is_active, organization_id, max_jitter_seconds, time_zone, next_fire_at,
                  last_fired_at, last_error_code, retry_at
        "#,
        name,
        is_active,
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| Error::ScheduleNotFound {
        name: name.to_owned(),
    })?;
    if is_active {
        require_enabled_definition(&mut tx, &row.job_type).await?;
    }
    tx.commit().await?;
    Ok(row)
}

/// Reads one schedule by name.
pub async fn get_job_schedule<'e>(
    executor: impl PgExecutor<'e>,
    name: &str,
) -> Result<Option<JobSchedule>> {
    let row = sqlx::query_as!(
        JobSchedule,
        r#"
        SELECT id AS "id: JobScheduleId", name, job_type, cron_expr, payload_template,
               is_active, organization_id, max_jitter_seconds, time_zone, next_fire_at,
               last_fired_at, last_error_code, retry_at
        FROM runledger.job_schedules
        WHERE name = $1
        "#,
        name,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row)
}

/// Lists every schedule by name.
pub async fn list_job_schedules<'e>(executor: impl PgExecutor<'e>) -> Result<Vec<JobSchedule>> {
    let rows = sqlx::query_as!(
        JobSchedule,
        r#"
        SELECT id AS "id: JobScheduleId", name, job_type, cron_expr, payload_template,
               is_active, organization_id, max_jitter_seconds, time_zone, next_fire_at,
               last_fired_at, last_error_code, retry_at
        FROM runledger.job_schedules
        ORDER BY name
        "#,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// Catalog sync of schedules, in one transaction: each spec is upserted with its `is_active`
/// applied every time and its cursor kept while the cron is unchanged. With `exact_scope`,
/// active schedules inside the scope (by name) that are not in `specs` are deactivated, under
/// a table lock taken with a 5 s bound so overlapping startups do not interleave; their names
/// are returned.
pub async fn sync_job_schedules(
    pool: &PgPool,
    specs: &[JobScheduleUpsert<'_>],
    exact_scope: Option<&[String]>,
) -> Result<Vec<String>> {
    let mut first_fires = Vec::with_capacity(specs.len());
    for spec in specs {
        first_fires.push(spec.prepare()?);
    }
    let mut tx = pool.begin().await?;
    if exact_scope.is_some() {
        sqlx::query!("SET LOCAL lock_timeout = '5s'")
            .execute(&mut *tx)
            .await?;
        sqlx::query!("LOCK TABLE runledger.job_schedules IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await?;
    }
    for (spec, first_fire) in specs.iter().zip(first_fires) {
        write_schedule(&mut tx, spec, first_fire, true).await?;
        if spec.is_active {
            require_enabled_definition(&mut tx, spec.job_type.as_str()).await?;
        }
    }
    let deactivated = match exact_scope {
        Some(scope) => {
            let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
            let mut names = sqlx::query_scalar!(
                r#"
                UPDATE runledger.job_schedules
                SET is_active = false, updated_at = now()
                WHERE name = ANY($1) AND NOT (name = ANY($2)) AND is_active
                RETURNING name
                "#,
                scope,
                &names as &[&str],
            )
            .fetch_all(&mut *tx)
            .await?;
            names.sort();
            names
        }
        None => Vec::new(),
    };
    tx.commit().await?;
    Ok(deactivated)
}

/// Inserts or updates one schedule. The cursor is kept while the cron is unchanged; the stored
/// active state is kept unless `apply_active` (catalog sync applies it every time).
async fn write_schedule(
    conn: &mut sqlx::PgConnection,
    spec: &JobScheduleUpsert<'_>,
    first_fire: DateTime<Utc>,
    apply_active: bool,
) -> Result<JobSchedule> {
    let empty = json!({});
    let row = sqlx::query_as!(
        JobSchedule,
        r#"
        INSERT INTO runledger.job_schedules AS s (
            name, job_type, cron_expr, payload_template, is_active, organization_id,
            max_jitter_seconds, next_fire_at, time_zone
        )
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10)
        ON CONFLICT (name) DO UPDATE SET
            job_type = EXCLUDED.job_type,
            payload_template = EXCLUDED.payload_template,
            organization_id = EXCLUDED.organization_id,
            max_jitter_seconds = EXCLUDED.max_jitter_seconds,
            is_active = CASE WHEN $9 THEN EXCLUDED.is_active ELSE s.is_active END,
            next_fire_at = CASE WHEN s.cron_expr = EXCLUDED.cron_expr
                                     AND s.time_zone = EXCLUDED.time_zone THEN s.next_fire_at
                                WHEN s.cron_expr = EXCLUDED.cron_expr THEN EXCLUDED.next_fire_at
                                ELSE coalesce($11, now()) END,
            retry_at = CASE WHEN s.cron_expr = EXCLUDED.cron_expr
                                 AND s.time_zone = EXCLUDED.time_zone THEN s.retry_at END,
            cron_expr = EXCLUDED.cron_expr,
            time_zone = EXCLUDED.time_zone,
            updated_at = now()
        RETURNING id AS "id: JobScheduleId", name, job_type, cron_expr, payload_template,
                  is_active, organization_id, max_jitter_seconds, time_zone, next_fire_at,
                  last_fired_at, last_error_code, retry_at
        "#,
        spec.name,
        spec.job_type.as_str(),
        spec.cron_expr,
        spec.payload_template.unwrap_or(&empty),
        spec.is_active,
        spec.organization_id,
        spec.max_jitter_seconds,
        first_fire,
        apply_active,
        spec.time_zone,
        spec.next_fire_at,
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(map_schedule_fk)?;
    Ok(row)
}

async fn require_enabled_definition(conn: &mut sqlx::PgConnection, job_type: &str) -> Result<()> {
    let enabled = sqlx::query_scalar!(
        "SELECT is_enabled FROM runledger.job_definitions WHERE job_type = $1",
        job_type,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if enabled == Some(true) {
        Ok(())
    } else {
        Err(Error::ScheduleDefinitionUnavailable {
            job_type: job_type.to_owned(),
        })
    }
}

/// A schedule whose job type has no definition at all fails the foreign key; report it like a
/// disabled one.
fn map_schedule_fk(err: sqlx::Error) -> Error {
    let fk = err
        .as_database_error()
        .and_then(|db| db.constraint())
        .is_some_and(|name| name == "job_schedules_definition_fkey");
    if fk {
        Error::ScheduleDefinitionUnavailable {
            job_type: String::new(),
        }
    } else {
        Error::from(err)
    }
}

/// Counts from one [`materialize_due_schedules`] call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulePass {
    /// Due schedules looked at.
    pub due: usize,
    /// Jobs enqueued (one per fire).
    pub fired: usize,
    /// Schedules deferred after an error (invalid cron, disabled definition, …).
    pub deferred: usize,
}

/// How long a schedule that failed to fire waits before it is tried again.
pub const SCHEDULE_ERROR_RETRY_SECONDS: f64 = 60.0;

/// Materializes up to `limit` due fires in one transaction: claims due rows with
/// `FOR UPDATE SKIP LOCKED` (so concurrent schedulers never fire the same row twice), enqueues
/// one job per fire (payload: the template plus `schedule` and `scheduled_for`), and advances
/// each cursor to the next future fire, so after downtime at most one stale fire is
/// materialized. A schedule that cannot fire is deferred with its error recorded, without
/// blocking the others: its cursor stays on the fire that failed, so the retry (after
/// [`SCHEDULE_ERROR_RETRY_SECONDS`]) carries that fire's `scheduled_for` and idempotency key.
pub async fn materialize_due_schedules(pool: &PgPool, limit: i64) -> Result<SchedulePass> {
    let mut tx = pool.begin().await?;
    let due = sqlx::query!(
        r#"
        SELECT id, name, job_type, cron_expr, time_zone, payload_template, organization_id,
               next_fire_at
        FROM runledger.job_schedules
        WHERE is_active
          AND next_fire_at <= now()
          AND coalesce(
                retry_at,
                next_fire_at + runledger.schedule_jitter(name, next_fire_at, max_jitter_seconds)
              ) <= now()
        ORDER BY next_fire_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
        "#,
        limit,
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut pass = SchedulePass {
        due: due.len(),
        ..SchedulePass::default()
    };
    let now = Utc::now();
    for schedule in due {
        let fire = schedule.next_fire_at;
        let next = TimeZone::parse(&schedule.time_zone)
            .map_err(|err| (err.code(), err.to_string()))
            .and_then(|time_zone| {
                CronSchedule::parse_in(&schedule.cron_expr, time_zone)
                    .map_err(|err| (err.code(), err.internal_message()))
            })
            .and_then(|cron| {
                cron.next_fire_for_cursor(fire, now).ok_or((
                    "job_schedule.no_future_fire",
                    "the cron expression never fires again".to_owned(),
                ))
            });
        let outcome = match next {
            Ok(next) => {
                let mut payload = schedule.payload_template.clone();
                if let Value::Object(map) = &mut payload {
                    map.insert("schedule".to_owned(), json!(schedule.name));
                    map.insert("scheduled_for".to_owned(), json!(fire));
                } else {
                    payload = json!({ "template": payload, "schedule": schedule.name, "scheduled_for": fire });
                }
                let key = format!(
                    "runledger:schedule:{}:{}",
                    schedule.id,
                    fire.timestamp_micros()
                );
                let mut request =
                    JobEnqueue::new(schedule.job_type.as_str(), &payload).idempotency_key(&key);
                request.organization_id = schedule.organization_id;
                let mut savepoint = sqlx::Connection::begin(&mut *tx).await?;
                match enqueue_on(&mut savepoint, std::slice::from_ref(&request), None).await {
                    Ok(_) => {
                        savepoint.commit().await?;
                        Ok(next)
                    }
                    Err(err) => {
                        savepoint.rollback().await?;
                        Err((err.code(), err.internal_message()))
                    }
                }
            }
            Err(err) => Err(err),
        };
        match outcome {
            Ok(next) => {
                pass.fired += 1;
                sqlx::query!(
                    r#"
                    UPDATE runledger.job_schedules
                    SET next_fire_at = $2, last_fired_at = $3, retry_at = NULL,
                        last_error_code = NULL, last_error_message = NULL, updated_at = now()
                    WHERE id = $1
                    "#,
                    schedule.id,
                    next,
                    fire,
                )
                .execute(&mut *tx)
                .await?;
            }
            Err((code, message)) => {
                pass.deferred += 1;
                tracing::warn!(schedule = %schedule.name, code, %message, "schedule could not fire; deferred");
                sqlx::query!(
                    r#"
                    UPDATE runledger.job_schedules
                    SET retry_at = now() + make_interval(secs => $4), last_error_code = $2,
                        last_error_message = $3, updated_at = now()
                    WHERE id = $1
                    "#,
                    schedule.id,
                    code,
                    message,
                    SCHEDULE_ERROR_RETRY_SECONDS,
                )
                .execute(&mut *tx)
                .await?;
            }
        }
    }
    tx.commit().await?;
    Ok(pass)
}
