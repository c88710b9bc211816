//! Replay: a succeeded direct job run again as a new job, with a lineage row tying the two.

use chrono::{DateTime, Utc};
use sqlx::{Acquire, PgExecutor, Postgres};
use uuid::Uuid;

use crate::core::jobs::{JobId, JobStatus};
use crate::postgres::error::{Error, Result};
use crate::postgres::input::check_key;
use crate::postgres::jobs::enqueue::{JobEnqueue, enqueue_jobs};
use crate::postgres::jobs::scope::TenantScope;

/// A request to replay a succeeded job.
///
/// ```
/// use runledger_engine::core::jobs::JobId;
/// use runledger_engine::postgres::jobs::{JobReplay, TenantScope};
///
/// let source = JobId::new_v7();
/// let replay = JobReplay::new(source, "backfill:2026-05-01", "the exporter had a bug")
///     .scope(TenantScope::Admin);
/// assert_eq!(replay.replay_key, "backfill:2026-05-01");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobReplay<'a> {
    /// The succeeded direct job to run again.
    pub source_job_id: JobId,
    /// Which jobs the caller may replay (default: jobs without organization).
    pub scope: TenantScope,
    /// Deduplication key, scoped to the source job's organization: a retry with the same
    /// source and reason returns the first replay.
    pub replay_key: &'a str,
    /// Why the job is replayed; stored on the lineage row and part of the request.
    pub reason: &'a str,
    /// Who asked, if known (an opaque id; also the new job's `created_by_user_id`).
    pub requested_by_user_id: Option<Uuid>,
}

impl<'a> JobReplay<'a> {
    /// Replays `source_job_id` under `replay_key` for `reason`, in the global scope.
    pub fn new(source_job_id: JobId, replay_key: &'a str, reason: &'a str) -> Self {
        Self {
            source_job_id,
            scope: TenantScope::Global,
            replay_key,
            reason,
            requested_by_user_id: None,
        }
    }

    /// Sets the scope the source job must be in.
    pub fn scope(mut self, scope: TenantScope) -> Self {
        self.scope = scope;
        self
    }

    /// Records who asked for the replay.
    pub fn requested_by_user_id(mut self, user_id: Uuid) -> Self {
        self.requested_by_user_id = Some(user_id);
        self
    }

    fn validate(&self) -> Result<()> {
        check_key(self.replay_key, "job.invalid_replay_key", "the replay key")?;
        check_key(
            self.reason,
            "job.invalid_replay_reason",
            "the replay reason",
        )
    }
}

/// The job a replay resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayedJob {
    /// The new job.
    pub job_id: JobId,
    /// The job it replays.
    pub source_job_id: JobId,
    /// `false` when the replay key matched an earlier, identical replay.
    pub created: bool,
}

/// Replays a `SUCCEEDED` direct job as a new `PENDING` job with the same type, payload,
/// organization, priority, attempt budget and timeout, and records the lineage. Idempotent on
/// `replay_key`: the same source and reason again return the first replay (`created: false`),
/// while a reused key with another source job or another reason fails with
/// `job.replay_idempotency_conflict`. Runs on a pool or inside the caller's transaction (in a
/// savepoint).
///
/// Fails with `job.not_found` (also outside the request's scope), `job.replay_invalid_state`
/// (the job has not succeeded), `job.workflow_replay_not_supported` (a workflow step),
/// `job.definition_not_found_or_disabled`, `job.invalid_replay_key` /
/// `job.invalid_replay_reason`, or `validation.isolation_level_unsupported` inside a REPEATABLE
/// READ or SERIALIZABLE transaction.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, job_id: runledger_engine::core::jobs::JobId)
/// # -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{JobReplay, replay_job};
///
/// let replay = replay_job(&pool, &JobReplay::new(job_id, "fix-1234", "exporter bug fixed")).await?;
/// println!("replayed {} as {}", replay.source_job_id, replay.job_id);
/// # Ok(()) }
/// ```
pub async fn replay_job<'c, A>(acquire: A, replay: &JobReplay<'_>) -> Result<ReplayedJob>
where
    A: Acquire<'c, Database = Postgres>,
{
    replay.validate()?;
    let mut conn = acquire.acquire().await?;
    // A replay that loses the key to a concurrent one rolls back and resolves against it.
    for _ in 0..3 {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let (scoped, organization) = replay.scope.sql();
        let source = sqlx::query!(
            r#"
            SELECT current_setting('transaction_isolation') AS "level!",
                   q.job_type, q.organization_id, q.payload, q.priority, q.max_attempts,
                   q.timeout_seconds, q.status AS "status: JobStatus",
                   (q.workflow_run_id IS NOT NULL) AS "in_workflow!",
                   r.source_job_id AS "existing_source?: JobId",
                   r.replay_job_id AS "existing_replay?: JobId",
                   r.reason AS "existing_reason?"
            FROM runledger.job_queue q
            LEFT JOIN runledger.job_replays r
              ON coalesce(r.organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
                     = coalesce(q.organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
             AND r.replay_key = $4
            WHERE q.id = $1 AND (NOT $2 OR q.organization_id IS NOT DISTINCT FROM $3)
            "#,
            replay.source_job_id.0,
            scoped,
            organization,
            replay.replay_key,
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::JobNotFound {
            job_id: replay.source_job_id,
        })?;
        Error::require_read_committed(&source.level)?;
        if let (Some(existing_source), Some(existing_replay)) =
            (source.existing_source, source.existing_replay)
        {
            return if existing_source == replay.source_job_id
                && source.existing_reason.as_deref() == Some(replay.reason)
            {
                Ok(ReplayedJob {
                    job_id: existing_replay,
                    source_job_id: replay.source_job_id,
                    created: false,
                })
            } else {
                Err(Error::ReplayIdempotencyConflict {
                    replay_key: replay.replay_key.to_owned(),
                    existing_replay_job_id: existing_replay,
                })
            };
        }
        if source.in_workflow {
            return Err(Error::WorkflowReplayNotSupported {
                job_id: replay.source_job_id,
            });
        }
        if source.status != JobStatus::Succeeded {
            return Err(Error::InvalidJobState {
                job_id: replay.source_job_id,
                status: source.status,
                operation: "replayed",
            });
        }

        let mut request = JobEnqueue::new(source.job_type.as_str(), &source.payload)
            .priority(source.priority)
            .max_attempts(source.max_attempts)
            .timeout_seconds(source.timeout_seconds);
        request.organization_id = source.organization_id;
        request.created_by_user_id = replay.requested_by_user_id;
        let job = enqueue_jobs(&mut *tx, std::slice::from_ref(&request))
            .await?
            .pop()
            .ok_or_else(|| Error::corrupt("enqueue returned no job"))?;
        let recorded = sqlx::query_scalar!(
            r#"
            INSERT INTO runledger.job_replays (
                source_job_id, replay_job_id, organization_id, replay_key, reason,
                requested_by_user_id
            )
            VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (
                coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
                replay_key
            ) DO NOTHING
            RETURNING id
            "#,
            replay.source_job_id.0,
            job.id.0,
            source.organization_id,
            replay.replay_key,
            replay.reason,
            replay.requested_by_user_id,
        )
        .fetch_optional(&mut *tx)
        .await?;
        if recorded.is_some() {
            tx.commit().await?;
            return Ok(ReplayedJob {
                job_id: job.id,
                source_job_id: replay.source_job_id,
                created: true,
            });
        }
        tx.rollback().await?;
    }
    Err(Error::invalid_input(
        "job.idempotency_unresolved",
        "the replay key is contended; retry the request",
    ))
}

/// One replay as recorded: which job was run again as which, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct JobReplayRecord {
    /// The job that was replayed.
    pub source_job_id: JobId,
    /// The job the replay created.
    pub replay_job_id: JobId,
    /// The replay key.
    pub replay_key: String,
    /// Why.
    pub reason: String,
    /// Who asked, if known.
    pub requested_by_user_id: Option<Uuid>,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// The lineage of a job within `scope`: the replays made of it, and the replay that made it
/// (if it is one), oldest first. Empty for a job outside the scope.
pub async fn list_job_replays<'e>(
    executor: impl PgExecutor<'e>,
    job_id: JobId,
    scope: TenantScope,
) -> Result<Vec<JobReplayRecord>> {
    let (scoped, organization) = scope.sql();
    let rows = sqlx::query_as!(
        JobReplayRecord,
        r#"
        SELECT r.source_job_id AS "source_job_id: JobId", r.replay_job_id AS "replay_job_id: JobId",
               r.replay_key, r.reason, r.requested_by_user_id, r.created_at
        FROM runledger.job_replays r
        WHERE (r.source_job_id = $1 OR r.replay_job_id = $1)
          AND (NOT $2 OR r.organization_id IS NOT DISTINCT FROM $3)
        ORDER BY r.created_at, r.id
        "#,
        job_id.0,
        scoped,
        organization,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
