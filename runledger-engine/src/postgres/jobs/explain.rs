//! "Why is this job not running?": [`explain_job`] names every rule that holds a waiting job
//! now, read from the same tables the claim reads, and the presence rows of the worker
//! processes ([`record_worker`], kept fresh by each supervisor) to tell when no live worker
//! serves it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Acquire, PgExecutor, Postgres};

use crate::core::jobs::{JobId, JobStatus, WorkflowRunId, WorkflowStepStatus};
use crate::postgres::error::Result;
use crate::postgres::jobs::TenantScope;

/// How long a presence row counts as a live worker after its last write.
pub const PRESENCE_TTL: Duration = Duration::from_secs(30);

/// What one worker process serves, as its presence row records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerPresence {
    /// The worker's id (`JobsConfig::worker_id`).
    pub worker_id: String,
    /// The job types its handlers run.
    pub job_types: Vec<String>,
    /// The queues it claims from; `None`: every queue.
    pub queues: Option<Vec<String>>,
}

impl WorkerPresence {
    /// The presence of worker `worker_id`, running `job_types` from `queues` (`None`: all).
    pub fn new(
        worker_id: impl Into<String>,
        job_types: Vec<String>,
        queues: Option<Vec<String>>,
    ) -> Self {
        Self {
            worker_id: worker_id.into(),
            job_types,
            queues,
        }
    }
}

/// Writes (or refreshes) a worker's presence row. Each supervisor does it when it starts and
/// every few seconds while it runs. The same statement deletes the rows of workers not seen
/// for an hour (processes that died without removing theirs), so the table stays the size of
/// the fleet.
pub async fn record_worker<'e>(
    executor: impl PgExecutor<'e>,
    worker: &WorkerPresence,
) -> Result<()> {
    sqlx::query!(
        r#"
        WITH gone AS (
            DELETE FROM runledger.worker_presence
            WHERE seen_at < now() - interval '1 hour' AND worker_id <> $1
        )
        INSERT INTO runledger.worker_presence (worker_id, job_types, queues)
        VALUES ($1, $2, $3)
        ON CONFLICT (worker_id) DO UPDATE
        SET job_types = EXCLUDED.job_types, queues = EXCLUDED.queues, seen_at = now()
        "#,
        worker.worker_id,
        &worker.job_types,
        worker.queues.as_deref(),
    )
    .execute(executor)
    .await?;
    Ok(())
}

/// Deletes a worker's presence row, as its supervisor does when it stops.
pub async fn forget_worker<'e>(executor: impl PgExecutor<'e>, worker_id: &str) -> Result<()> {
    sqlx::query!(
        "DELETE FROM runledger.worker_presence WHERE worker_id = $1",
        worker_id
    )
    .execute(executor)
    .await?;
    Ok(())
}

/// Where a job stands and, when it waits, every rule that holds it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobExplanation {
    /// The job (or the workflow step whose job it will be).
    pub job_id: JobId,
    /// The job's status; `None` for a workflow step not released yet, which has no job.
    pub status: Option<JobStatus>,
    /// The rules holding it now. Empty for a pending job that the next claim may take, and for
    /// a job that is not waiting (running or finished).
    pub holds: Vec<JobHold>,
}

impl JobExplanation {
    /// Whether a claim may take the job now: pending and held by nothing.
    pub fn is_claimable(&self) -> bool {
        self.status == Some(JobStatus::Pending) && self.holds.is_empty()
    }
}

/// One rule holding a waiting job.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum JobHold {
    /// Not due before `until`: a delay, a retry's backoff, a continuation's pause.
    Scheduled {
        /// When it becomes due.
        until: DateTime<Utc>,
    },
    /// Its queue is paused.
    QueuePaused {
        /// The queue.
        queue: String,
    },
    /// Its queue's global limit is reached: `running` of `limit` leased.
    QueueLimitReached {
        /// The queue.
        queue: String,
        /// Jobs of the queue leased now.
        running: i64,
        /// The queue's limit.
        limit: i32,
    },
    /// Its type's global limit is reached: `running` of `limit` leased.
    TypeLimitReached {
        /// The job type.
        job_type: String,
        /// Jobs of the type leased now.
        running: i64,
        /// The type's limit.
        limit: i32,
    },
    /// Another job holding its resource key is leased.
    ResourceKeyHeld {
        /// The key.
        resource_key: String,
        /// The job that holds it.
        holder: JobId,
    },
    /// A workflow step whose prerequisites have not all finished.
    Prerequisites {
        /// Its run.
        workflow_run_id: WorkflowRunId,
        /// The first unfinished prerequisites, in key order, with their status (a gate waits
        /// as `WAITING_FOR_EXTERNAL`).
        waiting: Vec<WaitingStep>,
        /// How many prerequisites have not finished, in all.
        count: i64,
    },
    /// A workflow gate waiting for its completion from outside.
    WaitingForExternal {
        /// Its run.
        workflow_run_id: WorkflowRunId,
        /// The gate's step key.
        step_key: String,
    },
    /// No live worker process runs its type from its queue (no presence row written within
    /// [`PRESENCE_TTL`], see [`record_worker`]).
    NoLiveWorker {
        /// The job type.
        job_type: String,
        /// The queue.
        queue: String,
    },
}

impl std::fmt::Display for JobHold {
    /// One line an operator reads: `queue \`emails\` is paused`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Scheduled { until } => write!(f, "not due before {}", until.to_rfc3339()),
            Self::QueuePaused { queue } => write!(f, "queue `{queue}` is paused"),
            Self::QueueLimitReached {
                queue,
                running,
                limit,
            } => write!(
                f,
                "queue `{queue}` is at its limit: {running} of {limit} running"
            ),
            Self::TypeLimitReached {
                job_type,
                running,
                limit,
            } => write!(
                f,
                "job type `{job_type}` is at its limit: {running} of {limit} running"
            ),
            Self::ResourceKeyHeld {
                resource_key,
                holder,
            } => write!(f, "resource key `{resource_key}` is held by job {holder}"),
            Self::Prerequisites { waiting, count, .. } => {
                write!(f, "waiting for {count} prerequisite(s)")?;
                for (i, step) in waiting.iter().enumerate() {
                    let separator = if i == 0 { ": " } else { ", " };
                    write!(f, "{separator}{} ({})", step.step_key, step.status)?;
                }
                let named = waiting.len() as i64;
                if *count > named {
                    write!(f, ", +{} more", count - named)?;
                }
                Ok(())
            }
            Self::WaitingForExternal { step_key, .. } => {
                write!(f, "gate `{step_key}` waits for its completion from outside")
            }
            Self::NoLiveWorker { job_type, queue } => {
                write!(f, "no live worker runs `{job_type}` from queue `{queue}`")
            }
        }
    }
}

/// A prerequisite that has not finished.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WaitingStep {
    /// Its key.
    pub step_key: String,
    /// Its status.
    pub status: WorkflowStepStatus,
}

/// Unfinished prerequisites named by a `Prerequisites` hold.
const WAITING_NAMED: i64 = 10;

/// Explains where the job `job_id` stands: its status and every rule holding it when it waits
/// (see [`JobHold`]). A workflow step not released yet is explained by its id, which becomes
/// its job's id. `None` when neither exists or the job is outside `scope`.
///
/// ```no_run
/// # async fn why(pool: &sqlx::PgPool, id: runledger_engine::core::jobs::JobId)
/// #     -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{TenantScope, explain_job};
///
/// if let Some(explanation) = explain_job(pool, id, TenantScope::Admin).await? {
///     for hold in &explanation.holds {
///         println!("held: {hold:?}");
///     }
/// }
/// # Ok(()) }
/// ```
pub async fn explain_job<'c>(
    acquire: impl Acquire<'c, Database = Postgres>,
    job_id: JobId,
    scope: TenantScope,
) -> Result<Option<JobExplanation>> {
    let mut conn = acquire.acquire().await?;
    let ttl = PRESENCE_TTL.as_secs_f64();
    let job = sqlx::query!(
        r#"
        SELECT q.status AS "status: JobStatus", q.organization_id, q.job_type, q.queue,
               q.next_run_at, q.resource_key,
               coalesce(c.is_paused, false) AS "paused!",
               c.global_concurrency AS queue_limit,
               CASE WHEN c.global_concurrency IS NOT NULL THEN (
                   SELECT count(*) FROM runledger.job_queue r
                   WHERE r.status = 'LEASED' AND r.queue = q.queue
               ) END AS queue_running,
               d.global_concurrency AS type_limit,
               CASE WHEN d.global_concurrency IS NOT NULL THEN (
                   SELECT count(*) FROM runledger.job_queue r
                   WHERE r.status = 'LEASED' AND r.job_type = q.job_type
               ) END AS type_running,
               (SELECT h.id FROM runledger.job_queue h
                WHERE q.resource_key IS NOT NULL AND h.resource_key = q.resource_key
                  AND h.status = 'LEASED' AND h.id <> q.id
                LIMIT 1) AS holder,
               EXISTS (
                   SELECT 1 FROM runledger.worker_presence w
                   WHERE w.seen_at > now() - make_interval(secs => $2)
                     AND q.job_type = ANY (w.job_types)
                     AND (w.queues IS NULL OR q.queue = ANY (w.queues))
               ) AS "served!",
               now() AS "now!"
        FROM runledger.job_queue q
        LEFT JOIN runledger.job_queues c ON c.name = q.queue
        LEFT JOIN runledger.job_definitions d ON d.job_type = q.job_type
        WHERE q.id = $1
        "#,
        job_id.0,
        ttl,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(job) = job {
        if !scope.admits(job.organization_id) {
            return Ok(None);
        }
        let mut holds = Vec::new();
        if job.status == JobStatus::Pending {
            if job.next_run_at > job.now {
                holds.push(JobHold::Scheduled {
                    until: job.next_run_at,
                });
            }
            if job.paused {
                holds.push(JobHold::QueuePaused {
                    queue: job.queue.clone(),
                });
            }
            if let (Some(limit), Some(running)) = (job.queue_limit, job.queue_running)
                && running >= i64::from(limit)
            {
                holds.push(JobHold::QueueLimitReached {
                    queue: job.queue.clone(),
                    running,
                    limit,
                });
            }
            if let (Some(limit), Some(running)) = (job.type_limit, job.type_running)
                && running >= i64::from(limit)
            {
                holds.push(JobHold::TypeLimitReached {
                    job_type: job.job_type.clone(),
                    running,
                    limit,
                });
            }
            if let (Some(resource_key), Some(holder)) = (job.resource_key, job.holder) {
                holds.push(JobHold::ResourceKeyHeld {
                    resource_key,
                    holder: JobId(holder),
                });
            }
            if !job.served {
                holds.push(JobHold::NoLiveWorker {
                    job_type: job.job_type,
                    queue: job.queue,
                });
            }
        }
        return Ok(Some(JobExplanation {
            job_id,
            status: Some(job.status),
            holds,
        }));
    }
    explain_unreleased_step(&mut conn, job_id, scope).await
}

/// A workflow step without a job yet: blocked on its prerequisites, or a gate waiting.
async fn explain_unreleased_step(
    conn: &mut sqlx::PgConnection,
    job_id: JobId,
    scope: TenantScope,
) -> Result<Option<JobExplanation>> {
    let Some(step) = sqlx::query!(
        r#"
        SELECT s.workflow_run_id, s.step_key, s.status, s.deps_pending, w.organization_id
        FROM runledger.workflow_steps s
        JOIN runledger.workflow_runs w ON w.id = s.workflow_run_id
        WHERE s.id = $1 AND s.job_id IS NULL
        "#,
        job_id.0,
    )
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    if !scope.admits(step.organization_id) {
        return Ok(None);
    }
    let run = WorkflowRunId(step.workflow_run_id);
    let holds = match step.status.as_str() {
        "BLOCKED" => {
            let waiting = sqlx::query!(
                r#"
                SELECT p.step_key,
                       runledger.workflow_step_status(p.status, p.job_id)
                           AS "status!: WorkflowStepStatus"
                FROM runledger.workflow_steps p
                JOIN runledger.workflow_step_dependencies d
                  ON d.depends_on_step_id = p.id AND d.step_id = $2
                WHERE p.workflow_run_id = $1
                  AND p.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')
                ORDER BY p.step_key
                LIMIT $3
                "#,
                run.0,
                job_id.0,
                WAITING_NAMED,
            )
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|p| WaitingStep {
                step_key: p.step_key,
                status: p.status,
            })
            .collect();
            vec![JobHold::Prerequisites {
                workflow_run_id: run,
                waiting,
                count: i64::from(step.deps_pending),
            }]
        }
        "WAITING_FOR_EXTERNAL" => vec![JobHold::WaitingForExternal {
            workflow_run_id: run,
            step_key: step.step_key,
        }],
        _ => Vec::new(),
    };
    Ok(Some(JobExplanation {
        job_id,
        status: None,
        holds,
    }))
}
