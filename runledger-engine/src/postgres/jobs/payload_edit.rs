//! The one payload edit an operator may make: replacing a UUID-array field of a direct job
//! that no worker has picked up yet.

use sqlx::PgExecutor;
use uuid::Uuid;

use crate::core::jobs::{JobId, JobStatus};
use crate::postgres::error::Result;
use crate::postgres::input::check_key;
use crate::postgres::jobs::scope::TenantScope;

/// What [`update_job_payload_uuid_array_field`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobPayloadUuidArrayFieldUpdate {
    /// The field now holds the given UUIDs.
    Updated,
    /// No job has this id in the caller's scope.
    NotFound,
    /// The job exists but its payload may not be changed; the reason says why.
    Rejected(JobPayloadUpdateRejection),
}

/// Why a payload edit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobPayloadUpdateRejection {
    /// The job is a workflow step; its payload belongs to the run's definition.
    WorkflowManaged,
    /// The job was enqueued with an idempotency key: its stored request snapshot holds the
    /// original payload, and a retry of that request must keep matching it.
    IdempotentRequestSnapshot,
    /// A worker holds the job, or an attempt of its current run already started: the payload
    /// may already have been read.
    AlreadyClaimed,
    /// The job finished.
    Terminal,
    /// The payload is not a JSON object, so it has no named fields.
    PayloadNotAnObject,
}

impl JobPayloadUpdateRejection {
    /// A stable snake_case name of the reason.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::WorkflowManaged => "workflow_managed",
            Self::IdempotentRequestSnapshot => "idempotent_request_snapshot",
            Self::AlreadyClaimed => "already_claimed",
            Self::Terminal => "terminal",
            Self::PayloadNotAnObject => "payload_not_an_object",
        }
    }
}

impl std::fmt::Display for JobPayloadUpdateRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sets the top-level payload field `field` of a pending direct job within `scope` to the
/// array `values` (created when absent, replaced otherwise), in one statement.
///
/// Deliberately narrow: only a job that is `PENDING` and unclaimed in its current run, not a
/// workflow step, and not keyed (its idempotency snapshot would stop matching) may change;
/// anything else is [`JobPayloadUuidArrayFieldUpdate::Rejected`] with the reason, and a job
/// outside the scope is `NotFound`. A blank field name, one longer than 255 characters or
/// containing NUL fails with `job.invalid_payload_field`.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger_engine::core::jobs::JobId)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{
///     JobPayloadUuidArrayFieldUpdate, TenantScope, update_job_payload_uuid_array_field,
/// };
///
/// let recipients = [uuid::Uuid::now_v7()];
/// match update_job_payload_uuid_array_field(&pool, job_id, TenantScope::Admin, "recipient_ids", &recipients).await? {
///     JobPayloadUuidArrayFieldUpdate::Updated => {}
///     JobPayloadUuidArrayFieldUpdate::Rejected(reason) => println!("refused: {reason}"),
///     _ => println!("no such job"),
/// }
/// # Ok(()) }
/// ```
pub async fn update_job_payload_uuid_array_field<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
    field: &str,
    values: &[Uuid],
) -> Result<JobPayloadUuidArrayFieldUpdate> {
    check_key(field, "job.invalid_payload_field", "the payload field name")?;
    let (scoped, organization) = scope.sql();
    let row = sqlx::query!(
        r#"
        WITH current AS (
            SELECT id, status, (attempt = attempt_floor) AS unclaimed,
                   (workflow_run_id IS NOT NULL) AS in_workflow,
                   (idempotency_key IS NOT NULL) AS keyed,
                   (jsonb_typeof(payload) = 'object') AS is_object
            FROM runledger.job_queue
            WHERE id = $1 AND (NOT $2 OR organization_id IS NOT DISTINCT FROM $3)
            FOR UPDATE
        ),
        updated AS (
            UPDATE runledger.job_queue q
            SET payload = jsonb_set(q.payload, ARRAY[$4::text], to_jsonb($5::uuid[]), true),
                updated_at = now()
            FROM current c
            WHERE q.id = c.id AND c.status = 'PENDING' AND c.unclaimed AND NOT c.in_workflow
              AND NOT c.keyed AND c.is_object
            RETURNING q.id
        )
        SELECT c.status AS "status: JobStatus", c.unclaimed AS "unclaimed!",
               c.in_workflow AS "in_workflow!", c.keyed AS "keyed!", c.is_object AS "is_object!",
               EXISTS (SELECT 1 FROM updated) AS "updated!"
        FROM current c
        "#,
        job_id.0,
        scoped,
        organization,
        field,
        values,
    )
    .fetch_optional(executor)
    .await?;
    let Some(row) = row else {
        return Ok(JobPayloadUuidArrayFieldUpdate::NotFound);
    };
    if row.updated {
        return Ok(JobPayloadUuidArrayFieldUpdate::Updated);
    }
    let reason = if row.in_workflow {
        JobPayloadUpdateRejection::WorkflowManaged
    } else if row.status.is_terminal() {
        JobPayloadUpdateRejection::Terminal
    } else if row.status != JobStatus::Pending || !row.unclaimed {
        JobPayloadUpdateRejection::AlreadyClaimed
    } else if row.keyed {
        JobPayloadUpdateRejection::IdempotentRequestSnapshot
    } else {
        JobPayloadUpdateRejection::PayloadNotAnObject
    };
    Ok(JobPayloadUuidArrayFieldUpdate::Rejected(reason))
}
