//! Workflow runs: enqueue, cancellation, external gates and reads. Release of dependents runs
//! inside PostgreSQL (the `workflow_*` functions of `runledger-engine/sql/09_workflow_release.sql`,
//! with their contracts), called by the writes that end step jobs (the batch of successes, and
//! a row trigger for dead letters and cancellations), so it commits atomically with every job
//! completion path. Cancellation and the release lock: `10_workflow_cancellation.sql`; external
//! steps: `11_external_steps.sql`.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::types::Json;
use sqlx::{Acquire, PgExecutor, Postgres};
use uuid::Uuid;

use crate::core::jobs::{
    JobId, StepKey, WorkflowRunEnqueue, WorkflowRunId, WorkflowRunStatus, WorkflowStepEnqueue,
    WorkflowStepId, WorkflowStepKind, WorkflowStepStatus, fresh_uuid, fresh_uuids,
};
use crate::postgres::error::{Error, Result};
use crate::postgres::input::{check_json_field, check_key, check_text_field};
use crate::postgres::jobs::enqueue::unless_all_unset;
use crate::postgres::jobs::scope::TenantScope;

/// The PostgreSQL channel notified (payload: the run id) when a run becomes terminal.
pub const WORKFLOW_RUN_CHANNEL: &str = "runledger_workflow_runs";

/// Which runs a caller may see: the [`TenantScope`] of workflow handles, under its original
/// name. A scope never sees another organization's run.
pub type WorkflowRunHandleScope = TenantScope;

/// The run an enqueue call resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnqueuedWorkflowRun {
    /// The run's id.
    pub id: WorkflowRunId,
    /// Its status when the call returned.
    pub status: WorkflowRunStatus,
    /// `false` when an idempotency key matched an existing run with the same request.
    pub created: bool,
}

/// Enqueues a workflow run: the run, its steps and its edges are inserted set-based in one
/// transaction (a savepoint inside the caller's), root steps are released, and the run's status
/// is computed. Works on a pool or inside the caller's transaction (`&mut *tx`).
///
/// Fails with the request's validation code, `job.definition_not_found_or_disabled` when a job
/// step's type has no enabled definition, `workflow.idempotency_conflict`, or
/// `validation.isolation_level_unsupported` inside a REPEATABLE READ or SERIALIZABLE
/// transaction (releasing steps needs READ COMMITTED).
///
/// Inside a traced span, with a [trace propagator](crate::core::trace) installed, the run
/// stores the span's context and every step job released for it carries that context.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use runledger_engine::core::jobs::WorkflowDagBuilder;
///
/// let metadata = serde_json::json!({});
/// let payload = serde_json::json!({"profile_id": "p_1"});
/// let run = WorkflowDagBuilder::new("profiles.research", &metadata)
///     .job("crawl", "profiles.crawl", &payload)?
///     .job("score", "profiles.score", &payload)?
///     .after_success("score", ["crawl"])?
///     .build()?;
/// let workflow_run = runledger_engine::postgres::jobs::enqueue_workflow_run(&pool, &run).await?;
/// # Ok(()) }
/// ```
pub async fn enqueue_workflow_run<'c, A>(
    acquire: A,
    run: &WorkflowRunEnqueue<'_>,
) -> Result<EnqueuedWorkflowRun>
where
    A: Acquire<'c, Database = Postgres>,
{
    run.validate()?;
    // Its step jobs inherit it as they are released (see `crate::core::trace`).
    let trace_context = crate::core::trace::current_trace_context();
    let mut conn = acquire.acquire().await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let snapshot = run
        .idempotency_key
        .as_ref()
        .map(|_| run.canonical_snapshot());

    // Every job step's type must be enqueueable now.
    let check = check_job_types(&mut tx, &run.steps).await?;
    Error::require_read_committed(&check.level)?;
    if let Some(job_type) = check.missing {
        return Err(Error::DefinitionNotFoundOrDisabled { job_type });
    }

    let run_id = fresh_uuid();
    let inserted = sqlx::query_scalar!(
        r#"
        INSERT INTO runledger.workflow_runs (
            id, workflow_type, organization_id, metadata, idempotency_key, enqueue_request,
            result_step_key, created_by_user_id, trace_context, run_first
        )
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
        ON CONFLICT (
            coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid),
            workflow_type,
            idempotency_key
        ) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id
        "#,
        run_id,
        run.workflow_type.as_str(),
        run.organization_id,
        run.metadata.as_ref(),
        run.idempotency_key.as_deref(),
        snapshot,
        run.result_step.as_ref().map(StepKey::as_str),
        run.created_by_user_id,
        trace_context as Option<crate::core::trace::TraceContext>,
        run.run_first,
    )
    .fetch_optional(&mut *tx)
    .await?;
    if inserted.is_none() {
        let key = run.idempotency_key.as_deref().unwrap_or_default();
        let existing = sqlx::query!(
            r#"
            SELECT id AS "id: WorkflowRunId", status AS "status: WorkflowRunStatus",
                   (enqueue_request = $2) AS "same_request!"
            FROM runledger.workflow_runs
            WHERE idempotency_key = $1
              AND coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
                  = coalesce($3, '00000000-0000-0000-0000-000000000000'::uuid)
              AND workflow_type = $4
            "#,
            key,
            snapshot,
            run.organization_id,
            run.workflow_type.as_str(),
        )
        .fetch_optional(&mut *tx)
        .await?;
        return match existing {
            Some(row) if row.same_request => Ok(EnqueuedWorkflowRun {
                id: row.id,
                status: row.status,
                created: false,
            }),
            Some(row) => Err(Error::WorkflowIdempotencyConflict {
                idempotency_key: key.to_owned(),
                existing_run_id: row.id,
            }),
            None => Err(Error::invalid_input(
                "workflow.idempotency_unresolved",
                "the idempotency key is contended; retry the request",
            )),
        };
    }

    let step_ids = insert_steps(&mut tx, run_id, &run.steps, &HashMap::new()).await?;
    let roots: Vec<Uuid> = run
        .steps
        .iter()
        .zip(&step_ids)
        .filter(|(step, _)| step.dependencies.is_empty())
        .map(|(_, id)| *id)
        .collect();
    let status = sqlx::query_scalar!(
        r#"SELECT runledger.workflow_start_run($1, $2) AS "status!: WorkflowRunStatus""#,
        run_id,
        &roots,
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(EnqueuedWorkflowRun {
        id: WorkflowRunId(run_id),
        status,
        created: true,
    })
}

/// Steps written per statement (with their edges in one more): a run or an append of any size
/// sends bounded statements.
const STEP_BATCH: usize = 5_000;

/// Inserts steps and their edges into a run, set-based, [`STEP_BATCH`] steps per statement.
/// `existing` maps the keys of steps already in the run to their ids (empty for a new run).
/// Returns the new steps' ids.
async fn insert_steps(
    conn: &mut sqlx::PgConnection,
    run_id: Uuid,
    steps: &[WorkflowStepEnqueue<'_>],
    existing: &HashMap<String, Uuid>,
) -> Result<Vec<Uuid>> {
    let ids: HashMap<&str, Uuid> = steps
        .iter()
        .map(|step| step.step_key.as_str())
        .zip(fresh_uuids(steps.len()))
        .chain(existing.iter().map(|(key, id)| (key.as_str(), *id)))
        .collect();
    for batch in steps.chunks(STEP_BATCH) {
        insert_step_batch(conn, run_id, batch, &ids).await?;
    }
    let id_of = |key: &str| ids.get(key).copied().unwrap_or_default();
    Ok(steps.iter().map(|s| id_of(s.step_key.as_str())).collect())
}

/// Inserts one batch of steps and their edges, with the ids of `ids` (every key of the run's
/// steps, old and new).
async fn insert_step_batch(
    conn: &mut sqlx::PgConnection,
    run_id: Uuid,
    steps: &[WorkflowStepEnqueue<'_>],
    ids: &HashMap<&str, Uuid>,
) -> Result<()> {
    let id_of = |key: &str| ids.get(key).copied().unwrap_or_default();
    let step_ids: Vec<Uuid> = steps.iter().map(|s| id_of(s.step_key.as_str())).collect();
    let keys: Vec<&str> = steps.iter().map(|s| s.step_key.as_str()).collect();
    let kinds: Vec<&str> = steps.iter().map(|s| s.kind.as_str()).collect();
    let job_types: Vec<Option<&str>> = steps
        .iter()
        .map(|s| s.job_type.as_ref().map(|t| t.as_str()))
        .collect();
    let payloads: Vec<Json<&Value>> = steps.iter().map(|s| Json(s.payload.as_ref())).collect();
    let deps: Vec<i32> = steps
        .iter()
        .map(|s| i32::try_from(s.dependencies.len()).unwrap_or(i32::MAX))
        .collect();
    // Columns no step sets go as NULL arrays (the statement's defaults fill them in): a wide
    // run then sends, and the server decodes, only the columns it uses.
    let priorities = unless_all_unset(steps.iter().map(|s| s.priority).collect());
    let attempts = unless_all_unset(steps.iter().map(|s| s.max_attempts).collect());
    let timeouts = unless_all_unset(steps.iter().map(|s| s.timeout_seconds).collect());
    let stages = unless_all_unset(steps.iter().map(|s| s.stage.as_deref()).collect());
    let orgs = unless_all_unset(steps.iter().map(|s| s.organization_id).collect());
    let metadata = unless_all_unset(
        steps
            .iter()
            .map(|s| has_metadata(&s.metadata).then(|| Json(s.metadata.as_ref())))
            .collect(),
    );
    let continuations = unless_all_unset(
        steps
            .iter()
            .map(|s| s.allow_continuation.then_some(true))
            .collect(),
    );
    let resource_keys = unless_all_unset(steps.iter().map(|s| s.resource_key.as_deref()).collect());
    sqlx::query!(
        r#"
        INSERT INTO runledger.workflow_steps (
            id, workflow_run_id, step_key, step_kind, job_type, payload, priority, max_attempts,
            timeout_seconds, stage, organization_id, metadata, deps_total, deps_pending,
            continuation_allowed, resource_key
        )
        SELECT s.id, $1, s.step_key, s.step_kind, s.job_type, s.payload, s.priority,
               s.max_attempts, s.timeout_seconds, s.stage, s.organization_id,
               coalesce(s.metadata, '{}'), s.deps, s.deps, coalesce(s.continuation_allowed, false),
               s.resource_key
        FROM unnest(
            $2::uuid[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::int4[], $8::int4[],
            $9::int4[], $10::text[], $11::uuid[], $12::jsonb[], $13::int4[], $14::bool[],
            $15::text[]
        ) AS s(id, step_key, step_kind, job_type, payload, priority, max_attempts,
               timeout_seconds, stage, organization_id, metadata, deps, continuation_allowed,
               resource_key)
        "#,
        run_id,
        &step_ids,
        &keys as &[&str],
        &kinds as &[&str],
        &job_types as &[Option<&str>],
        &payloads as &[Json<&Value>],
        priorities.as_deref() as Option<&[Option<i32>]>,
        attempts.as_deref() as Option<&[Option<i32>]>,
        timeouts.as_deref() as Option<&[Option<i32>]>,
        stages.as_deref() as Option<&[Option<&str>]>,
        orgs.as_deref() as Option<&[Option<Uuid>]>,
        metadata.as_deref() as Option<&[Option<Json<&Value>>]>,
        &deps,
        continuations.as_deref() as Option<&[Option<bool>]>,
        resource_keys.as_deref() as Option<&[Option<&str>]>,
    )
    .execute(&mut *conn)
    .await?;

    let mut dependents = Vec::new();
    let mut prerequisites = Vec::new();
    let mut conditions = Vec::new();
    for step in steps {
        for dependency in &step.dependencies {
            dependents.push(id_of(step.step_key.as_str()));
            prerequisites.push(id_of(dependency.prerequisite.as_str()));
            conditions.push(dependency.condition.as_str());
        }
    }
    if !dependents.is_empty() {
        sqlx::query!(
            r#"
            INSERT INTO runledger.workflow_step_dependencies (
                workflow_run_id, step_id, depends_on_step_id, condition
            )
            SELECT $1, e.step_id, e.depends_on_step_id, e.condition
            FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS e(step_id, depends_on_step_id, condition)
            "#,
            run_id,
            &dependents,
            &prerequisites,
            &conditions as &[&str],
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Bytes as lowercase hexadecimal (the digests of run mutations).
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether a step's metadata says anything: the empty object is the column's default.
fn has_metadata(metadata: &Value) -> bool {
    !matches!(metadata, Value::Object(fields) if fields.is_empty())
}

/// Releases what the new steps allow and returns the run's refreshed status.
async fn settle_new_steps(
    conn: &mut sqlx::PgConnection,
    run_id: Uuid,
    step_ids: &[Uuid],
) -> Result<WorkflowRunStatus> {
    let status = sqlx::query_scalar!(
        r#"SELECT runledger.workflow_settle_new_steps($1, $2) AS "status!: WorkflowRunStatus""#,
        run_id,
        step_ids,
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(status)
}

/// A request to add steps to a run that has not finished, keyed by a mutation key.
///
/// ```
/// use std::borrow::Cow;
/// use runledger_engine::core::jobs::{JobType, StepKey, WorkflowRunId, WorkflowStepEnqueueBuilder};
/// use runledger_engine::postgres::jobs::WorkflowAppend;
///
/// let payload = serde_json::json!({"channel": "email"});
/// let notify = WorkflowStepEnqueueBuilder::new(StepKey::new("notify"), JobType::new("emails.send"), &payload)
///     .depends_on_success(StepKey::new("approval"))
///     .build();
/// let append = WorkflowAppend {
///     workflow_run_id: WorkflowRunId(uuid::Uuid::now_v7()),
///     organization_id: None,
///     mutation_key: "add-notify",
///     steps: vec![notify],
/// };
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowAppend<'a> {
    /// The run.
    pub workflow_run_id: WorkflowRunId,
    /// The run's organization (`None`: a run without organization).
    pub organization_id: Option<Uuid>,
    /// Idempotency key of this mutation within the run.
    pub mutation_key: &'a str,
    /// The new steps; they may depend on existing steps and on each other.
    pub steps: Vec<WorkflowStepEnqueue<'a>>,
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkflowAppendOutcome {
    /// The steps were added (and released where their prerequisites allow).
    Applied,
    /// The same mutation had already been applied; nothing changed.
    AlreadyApplied,
}

/// Adds steps to a run that is still running or waiting on a gate, in one transaction.
/// The mutation key makes it idempotent: an identical retry returns
/// [`WorkflowAppendOutcome::AlreadyApplied`], a different request under the same key
/// `workflow.append_conflicting_retry`. While a cancellation of the run is in flight (it holds
/// the run's release lock) the append fails at once with `workflow.release_conflict`; retry it
/// once the cancellation is over. A finished run gives `workflow.append_run_finished`; a
/// step of another organization than the run's, `workflow.step_organization_mismatch`; a
/// REPEATABLE READ or SERIALIZABLE transaction, `validation.isolation_level_unsupported`.
pub async fn append_workflow_steps<'c, A>(
    acquire: A,
    append: &WorkflowAppend<'_>,
) -> Result<WorkflowAppendOutcome>
where
    A: Acquire<'c, Database = Postgres>,
{
    let key = append.mutation_key;
    check_key(key, "workflow.invalid_mutation_key", "the mutation key")?;
    for step in &append.steps {
        step.validate()?;
    }
    crate::core::jobs::check_step_organizations(append.organization_id, &append.steps)?;
    let run_id = append.workflow_run_id;
    let mut conn = acquire.acquire().await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    // The record keeps a digest of the canonical request: small whatever the append's size.
    let canonical = crate::core::jobs::canonical_steps(&append.steps).to_string();
    let request = serde_json::json!({ "sha256": hex(&Sha256::digest(canonical)) });
    let mutation = RunMutation {
        run_id,
        organization_id: append.organization_id,
        key,
        kind: "APPEND_STEPS",
    };
    if mutation.lock(&mut tx).await? {
        return mutation.replay(&mut tx, &request).await;
    }
    mutation.record(&mut tx, &request).await?;

    let existing: HashMap<String, Uuid> = sqlx::query!(
        "SELECT step_key, id FROM runledger.workflow_steps WHERE workflow_run_id = $1",
        run_id.0,
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.step_key, row.id))
    .collect();
    let existing_keys: std::collections::BTreeSet<&str> =
        existing.keys().map(String::as_str).collect();
    crate::core::jobs::validate_steps(&existing_keys, &append.steps)?;
    if let Some(job_type) = check_job_types(&mut tx, &append.steps).await?.missing {
        return Err(Error::DefinitionNotFoundOrDisabled { job_type });
    }
    let step_ids = insert_steps(&mut tx, run_id.0, &append.steps, &existing).await?;
    settle_new_steps(&mut tx, run_id.0, &step_ids).await?;
    tx.commit().await?;
    Ok(WorkflowAppendOutcome::Applied)
}

/// A keyed change to a running run (an append, a fan-out's fill): the run's release lock and
/// row, and the record that makes the change idempotent.
pub(super) struct RunMutation<'a> {
    pub(super) run_id: WorkflowRunId,
    pub(super) organization_id: Option<Uuid>,
    pub(super) key: &'a str,
    /// `workflow_run_mutations.mutation_type`.
    pub(super) kind: &'static str,
}

impl RunMutation<'_> {
    /// Takes the run's release lock (shared) and row lock in `tx`, and says whether a change is
    /// already recorded under the key (answer it with [`replay`](Self::replay)). When none is,
    /// the run must still be open: `workflow.append_run_finished` once it has finished. Also
    /// fails with `workflow.release_conflict` while a cancellation holds the run,
    /// `validation.isolation_level_unsupported` outside READ COMMITTED, and
    /// `workflow.run_not_found` for a run not of the caller's organization. Every writer of a
    /// run's mutations holds its row lock, so what this reads stays true until `tx` ends.
    pub(super) async fn lock(&self, tx: &mut sqlx::PgConnection) -> Result<bool> {
        let (run_id, key) = (self.run_id, self.key);
        let guard = sqlx::query!(
            r#"
            SELECT current_setting('transaction_isolation') AS "level!",
                   CASE WHEN current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')
                        THEN runledger.workflow_try_release_lock($1) END AS free
            "#,
            run_id.0,
        )
        .fetch_one(&mut *tx)
        .await?;
        Error::require_read_committed(&guard.level)?;
        if guard.free == Some(false) {
            return Err(Error::WorkflowConflict {
                code: "workflow.release_conflict",
                subject: key.to_owned(),
            });
        }
        let run = sqlx::query!(
            r#"
            SELECT status AS "status: WorkflowRunStatus", organization_id,
                   EXISTS (
                       SELECT 1 FROM runledger.workflow_run_mutations m
                       WHERE m.workflow_run_id = $1 AND m.mutation_key = $2
                   ) AS "recorded!"
            FROM runledger.workflow_runs
            WHERE id = $1
            FOR UPDATE
            "#,
            run_id.0,
            key,
        )
        .fetch_optional(&mut *tx)
        .await?
        .filter(|run| run.organization_id == self.organization_id)
        .ok_or(Error::WorkflowRunNotFound { run_id })?;
        if !run.recorded
            && !matches!(
                run.status,
                WorkflowRunStatus::Running | WorkflowRunStatus::WaitingForExternal
            )
        {
            return Err(Error::WorkflowConflict {
                code: "workflow.append_run_finished",
                subject: key.to_owned(),
            });
        }
        Ok(run.recorded)
    }

    /// Answers a change already recorded under the key: `AlreadyApplied` for the same
    /// `request`, `workflow.append_conflicting_retry` for another.
    pub(super) async fn replay(
        &self,
        tx: &mut sqlx::PgConnection,
        request: &Value,
    ) -> Result<WorkflowAppendOutcome> {
        let same = sqlx::query_scalar!(
            r#"
            SELECT (request = $3) AS "same!"
            FROM runledger.workflow_run_mutations
            WHERE workflow_run_id = $1 AND mutation_key = $2
            "#,
            self.run_id.0,
            self.key,
            request,
        )
        .fetch_one(&mut *tx)
        .await?;
        if same {
            Ok(WorkflowAppendOutcome::AlreadyApplied)
        } else {
            Err(Error::WorkflowConflict {
                code: "workflow.append_conflicting_retry",
                subject: self.key.to_owned(),
            })
        }
    }

    /// Records the change's `request` under the key.
    pub(super) async fn record(&self, tx: &mut sqlx::PgConnection, request: &Value) -> Result<()> {
        sqlx::query!(
            r#"
            INSERT INTO runledger.workflow_run_mutations (workflow_run_id, mutation_key, mutation_type, request)
            VALUES ($1, $2, $3, $4)
            "#,
            self.run_id.0,
            self.key,
            self.kind,
            request,
        )
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

/// The transaction's isolation level and the first job type without an enabled definition, read
/// in one round trip.
struct TypeCheck {
    level: String,
    missing: Option<String>,
}

/// Checks the job types of `steps`, each sent once (a wide fan-out names one type a thousand
/// times).
async fn check_job_types(
    conn: &mut sqlx::PgConnection,
    steps: &[WorkflowStepEnqueue<'_>],
) -> Result<TypeCheck> {
    let mut seen = HashSet::new();
    let job_types: Vec<&str> = steps
        .iter()
        .filter_map(|step| step.job_type.as_ref().map(|t| t.as_str()))
        .filter(|job_type| seen.insert(*job_type))
        .collect();
    let row = sqlx::query!(
        r#"
        SELECT current_setting('transaction_isolation') AS "level!",
               (SELECT t.job_type
                FROM unnest($1::text[]) AS t(job_type)
                WHERE NOT EXISTS (
                    SELECT 1 FROM runledger.job_definitions d
                    WHERE d.job_type = t.job_type AND d.is_enabled
                )
                LIMIT 1) AS missing
        "#,
        &job_types as &[&str],
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(TypeCheck {
        level: row.level,
        missing: row.missing,
    })
}

/// Cancels a run within `scope`: pending and leased step jobs, open gates and blocked steps end
/// `CANCELED`, and nothing is released afterwards (a completion racing in after the cancel is
/// refused by its lease). Canceling a canceled run is a no-op; a finished run gives
/// `workflow.run_not_cancelable`; an unknown or out-of-scope run `workflow.run_not_found`; a
/// REPEATABLE READ or SERIALIZABLE transaction `validation.isolation_level_unsupported`.
pub async fn cancel_workflow_run<'e>(
    executor: impl PgExecutor<'e>,
    run_id: WorkflowRunId,
    scope: WorkflowRunHandleScope,
) -> Result<()> {
    let (scoped, org) = scope.sql();
    let row = sqlx::query!(
        r#"
        SELECT current_setting('transaction_isolation') AS "level!",
               CASE WHEN current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')
                    THEN runledger.workflow_cancel_run(w.id, 'workflow.canceled') END AS previous
        FROM runledger.workflow_runs w
        WHERE w.id = $1 AND (NOT $2 OR w.organization_id IS NOT DISTINCT FROM $3)
        "#,
        run_id.0,
        scoped,
        org,
    )
    .fetch_optional(executor)
    .await?;
    if let Some(row) = &row {
        Error::require_read_committed(&row.level)?;
    }
    match row.and_then(|row| row.previous).as_deref() {
        None => Err(Error::WorkflowRunNotFound { run_id }),
        Some("SUCCEEDED" | "COMPLETED_WITH_ERRORS") => {
            Err(Error::WorkflowRunNotCancelable { run_id })
        }
        Some(_) => Ok(()),
    }
}

/// Input of [`complete_external_workflow_step`].
#[derive(Debug, Clone, PartialEq)]
pub struct CompleteExternalWorkflowStepInput<'a> {
    /// The run.
    pub workflow_run_id: WorkflowRunId,
    /// The run's organization (`None`: a run without organization).
    pub organization_id: Option<Uuid>,
    /// The external step.
    pub step_key: StepKey<'a>,
    /// `Succeeded`, `Failed` or `Canceled`.
    pub terminal_status: WorkflowStepStatus,
    /// Why (stored on the step).
    pub status_reason: Option<&'a str>,
    /// Error code for failed completions.
    pub last_error_code: Option<&'a str>,
    /// Error message for failed completions.
    pub last_error_message: Option<&'a str>,
    /// Output; only with `Succeeded`.
    pub output: Option<&'a Value>,
}

/// What an external completion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExternalStepCompletion {
    /// The step was completed now and its dependents released.
    Completed,
    /// An identical completion had already been applied; nothing changed.
    AlreadyCompleted,
}

/// Completes an external step (an approval gate or a callback) and drives the run forward.
/// An identical retry is idempotent; a retry with other status, reason or error fields gives
/// `workflow.external_step_conflicting_completion_retry`, one with other output
/// `workflow.external_step_conflicting_output_retry`. While a cancellation of the run is in
/// flight it fails at once with `workflow.release_conflict`. Inside a REPEATABLE READ or SERIALIZABLE
/// transaction it fails with `validation.isolation_level_unsupported`.
pub async fn complete_external_workflow_step<'e>(
    executor: impl PgExecutor<'e>,
    input: &CompleteExternalWorkflowStepInput<'_>,
) -> Result<ExternalStepCompletion> {
    input.step_key.validate()?;
    if !matches!(
        input.terminal_status,
        WorkflowStepStatus::Succeeded | WorkflowStepStatus::Failed | WorkflowStepStatus::Canceled
    ) {
        return Err(Error::invalid_input(
            "workflow.external_step_invalid_status",
            "an external step can only be completed as SUCCEEDED, FAILED or CANCELED",
        ));
    }
    if input.output.is_some() && input.terminal_status != WorkflowStepStatus::Succeeded {
        return Err(Error::invalid_input(
            "workflow.external_step_output_requires_success",
            "output is only accepted with a SUCCEEDED completion",
        ));
    }
    if let Some(output) = input.output {
        check_json_field(
            output,
            "workflow.external_step_invalid_output",
            "the output",
        )?;
    }
    for (text, what) in [
        (input.status_reason, "the status reason"),
        (input.last_error_code, "the error code"),
        (input.last_error_message, "the error message"),
    ] {
        if let Some(text) = text {
            check_text_field(text, "workflow.external_step_invalid_text", what)?;
        }
    }
    let row = sqlx::query!(
        r#"
        SELECT current_setting('transaction_isolation') AS "level!",
               CASE WHEN current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')
                    THEN CASE WHEN runledger.workflow_try_release_lock($1)
                              THEN runledger.workflow_complete_external($1, true, $2, $3, $4, $5, $6, $7, $8)
                              ELSE 'release_conflict' END
               END AS outcome
        "#,
        input.workflow_run_id.0,
        input.organization_id,
        input.step_key.as_str(),
        input.terminal_status.as_str(),
        input.status_reason,
        input.last_error_code,
        input.last_error_message,
        input.output,
    )
    .fetch_one(executor)
    .await?;
    Error::require_read_committed(&row.level)?;
    let outcome = row.outcome.unwrap_or_default();
    let run_id = input.workflow_run_id;
    let step_key = || input.step_key.as_str().to_owned();
    match outcome.as_str() {
        "completed" => Ok(ExternalStepCompletion::Completed),
        "already_completed" => Ok(ExternalStepCompletion::AlreadyCompleted),
        "conflicting_completion" => Err(Error::WorkflowConflict {
            code: "workflow.external_step_conflicting_completion_retry",
            subject: step_key(),
        }),
        "conflicting_output" => Err(Error::WorkflowConflict {
            code: "workflow.external_step_conflicting_output_retry",
            subject: step_key(),
        }),
        "run_not_found" => Err(Error::WorkflowRunNotFound { run_id }),
        "release_conflict" => Err(Error::WorkflowConflict {
            code: "workflow.release_conflict",
            subject: step_key(),
        }),
        "run_canceled" => Err(Error::WorkflowConflict {
            code: "workflow.run_canceled",
            subject: step_key(),
        }),
        "step_not_found" => Err(Error::WorkflowConflict {
            code: "workflow.step_not_found",
            subject: step_key(),
        }),
        "step_not_external" => Err(Error::WorkflowConflict {
            code: "workflow.step_not_external",
            subject: step_key(),
        }),
        "step_not_waiting" => Err(Error::WorkflowConflict {
            code: "workflow.external_step_not_waiting",
            subject: step_key(),
        }),
        other => Err(Error::corrupt(format!(
            "unexpected external completion outcome {other}"
        ))),
    }
}

/// One workflow run as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkflowRunRecord {
    /// The run's id.
    pub id: WorkflowRunId,
    /// Its type.
    pub workflow_type: String,
    /// Its organization.
    pub organization_id: Option<Uuid>,
    /// Current status.
    pub status: WorkflowRunStatus,
    /// Run metadata.
    pub metadata: Value,
    /// Idempotency key, if keyed.
    pub idempotency_key: Option<String>,
    /// The declared result step.
    pub result_step_key: Option<String>,
    /// The result, once the run succeeded with a declared result step.
    pub result: Option<Value>,
    /// Why the run ended as it did (cancellations).
    pub status_reason: Option<String>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it became terminal.
    pub finished_at: Option<DateTime<Utc>>,
}

/// Reads one run within `scope`.
pub async fn get_workflow_run<'e>(
    executor: impl PgExecutor<'e>,
    run_id: WorkflowRunId,
    scope: WorkflowRunHandleScope,
) -> Result<Option<WorkflowRunRecord>> {
    let row = sqlx::query_as!(
        WorkflowRunRecord,
        r#"
        SELECT id AS "id: WorkflowRunId", workflow_type, organization_id,
               status AS "status: WorkflowRunStatus",
               runledger.readable_json(metadata, 'workflow.invalid_metadata') AS "metadata!",
               idempotency_key, result_step_key,
               runledger.readable_json(result, 'job.output_invalid') AS result,
               status_reason, created_at, updated_at, finished_at
        FROM runledger.workflow_runs
        WHERE id = $1
        "#,
        run_id.0,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row.filter(|run| scope.admits(run.organization_id)))
}

/// One step of a run, with its prerequisites.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkflowStepRecord {
    /// The step's id.
    pub id: WorkflowStepId,
    /// Its key.
    pub step_key: String,
    /// Job or external.
    pub kind: WorkflowStepKind,
    /// The job type of a job step.
    pub job_type: Option<String>,
    /// Current status.
    pub status: WorkflowStepStatus,
    /// The step's current job, once released.
    pub job_id: Option<JobId>,
    /// The output, once succeeded.
    pub output: Option<Value>,
    /// Why it ended as it did.
    pub status_reason: Option<String>,
    /// Last error code.
    pub last_error_code: Option<String>,
    /// Prerequisite step keys with their condition (`SUCCESS` or `TERMINAL`), in key order:
    /// all of them, or from [`list_workflow_steps_page`] the first
    /// [`PREREQUISITES_NAMED`] (a fan-out has one per child).
    #[serde(serialize_with = "serialize_dependencies")]
    pub dependencies: Vec<(String, String)>,
    /// How many prerequisites the step has in all.
    pub dependency_count: i64,
    /// When it became terminal.
    pub finished_at: Option<DateTime<Utc>>,
}

/// Writes prerequisites as `{"step_key", "condition"}` objects, which read better than pairs.
fn serialize_dependencies<S: serde::Serializer>(
    dependencies: &[(String, String)],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    #[derive(serde::Serialize)]
    struct Dependency<'a> {
        step_key: &'a str,
        condition: &'a str,
    }
    serializer.collect_seq(dependencies.iter().map(|(step_key, condition)| Dependency {
        step_key,
        condition,
    }))
}

/// The most prerequisites [`list_workflow_steps_page`] names per step.
pub const PREREQUISITES_NAMED: i64 = 100;

/// Lists a run's steps (in creation order) with their prerequisites; empty when the run is
/// outside `scope`. For a run of many steps, [`list_workflow_steps_page`] reads them a page at
/// a time.
pub async fn list_workflow_steps<'c>(
    acquire: impl Acquire<'c, Database = Postgres>,
    run_id: WorkflowRunId,
    scope: TenantScope,
) -> Result<Vec<WorkflowStepRecord>> {
    select_steps(acquire, run_id, scope, None, None).await
}

/// At most `limit` steps of a run, in creation order, after the step `after` (the last step of
/// the previous page, `None` for the first page), with their first [`PREREQUISITES_NAMED`]
/// prerequisites and their count; empty when the run is outside `scope`. A page costs its own
/// steps and the run's edges, not the run's steps and their outputs, so a run of 100,000
/// steps is read a screen at a time.
///
/// ```no_run
/// # async fn pages(pool: &sqlx::PgPool, run: runledger_engine::core::jobs::WorkflowRunId)
/// #     -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::{TenantScope, list_workflow_steps_page};
///
/// let mut after = None;
/// loop {
///     let page = list_workflow_steps_page(pool, run, TenantScope::Admin, after, 500).await?;
///     for step in &page {
///         println!("{} {:?}", step.step_key, step.status);
///     }
///     match page.last() {
///         Some(last) if page.len() == 500 => after = Some(last.id),
///         _ => break,
///     }
/// }
/// # Ok(()) }
/// ```
pub async fn list_workflow_steps_page<'c>(
    acquire: impl Acquire<'c, Database = Postgres>,
    run_id: WorkflowRunId,
    scope: TenantScope,
    after: Option<WorkflowStepId>,
    limit: i64,
) -> Result<Vec<WorkflowStepRecord>> {
    select_steps(
        acquire,
        run_id,
        scope,
        after,
        Some((limit.max(0), PREREQUISITES_NAMED)),
    )
    .await
}

/// The steps of a run after `after`, in creation order, with the prerequisites of those steps
/// only: with `limits` (steps, prerequisites named per step) a page, else all of them.
async fn select_steps<'c>(
    acquire: impl Acquire<'c, Database = Postgres>,
    run_id: WorkflowRunId,
    scope: TenantScope,
    after: Option<WorkflowStepId>,
    limits: Option<(i64, i64)>,
) -> Result<Vec<WorkflowStepRecord>> {
    let mut conn = acquire.acquire().await?;
    let (scoped, organization) = scope.sql();
    let (limit, named) = limits.unzip();
    let rows = sqlx::query!(
        r#"
        WITH page AS MATERIALIZED (
            SELECT s.id, s.step_key, s.step_kind, s.job_type, s.status, s.job_id, s.output,
                   s.status_reason, s.last_error_code, s.finished_at, s.deps_total
            FROM runledger.workflow_steps s
            WHERE s.workflow_run_id = $1
              AND ($4::uuid IS NULL OR s.id > $4)
              AND EXISTS (
                  SELECT 1 FROM runledger.workflow_runs w
                  WHERE w.id = $1 AND (NOT $2 OR w.organization_id IS NOT DISTINCT FROM $3)
              )
            ORDER BY s.id
            LIMIT $5
        ),
        -- The edges into the page's steps that are named in full, found from their
        -- prerequisites among the run's steps (the edges' key leads with them).
        prerequisites AS (
            SELECT d.step_id,
                   array_agg(p.step_key ORDER BY p.step_key) AS keys,
                   array_agg(d.condition ORDER BY p.step_key) AS conditions
            FROM runledger.workflow_steps p
            JOIN runledger.workflow_step_dependencies d ON d.depends_on_step_id = p.id
            WHERE p.workflow_run_id = $1
              AND d.step_id IN (SELECT id FROM page WHERE $6::bigint IS NULL OR deps_total <= $6)
            GROUP BY d.step_id
        )
        SELECT s.id AS "id!: WorkflowStepId", s.step_key AS "step_key!",
               s.step_kind AS "step_kind!", s.job_type,
               runledger.workflow_step_status(s.status, s.job_id)
                   AS "status!: WorkflowStepStatus",
               s.job_id AS "job_id: JobId",
               runledger.readable_json(s.output, 'job.output_invalid') AS output,
               s.status_reason, s.last_error_code, s.finished_at,
               coalesce(e.keys, '{}') AS "prerequisites!: Vec<String>",
               coalesce(e.conditions, '{}') AS "conditions!: Vec<String>",
               s.deps_total AS "total!"
        FROM page s
        LEFT JOIN prerequisites e ON e.step_id = s.id
        ORDER BY s.id
        "#,
        run_id.0,
        scoped,
        organization,
        after.map(|step| step.0),
        limit,
        named,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut steps: Vec<WorkflowStepRecord> = rows
        .into_iter()
        .map(|row| WorkflowStepRecord {
            id: row.id,
            step_key: row.step_key,
            kind: WorkflowStepKind::from_stored(&row.step_kind).unwrap_or(WorkflowStepKind::Job),
            job_type: row.job_type,
            status: row.status,
            job_id: row.job_id,
            output: row.output,
            status_reason: row.status_reason,
            last_error_code: row.last_error_code,
            dependencies: row.prerequisites.into_iter().zip(row.conditions).collect(),
            dependency_count: i64::from(row.total),
            finished_at: row.finished_at,
        })
        .collect();
    // A step with more prerequisites than a page names (a fan-out, the join of one): the first
    // of them in key order, walking the run's keys until enough are found.
    if let Some(named) = named {
        for step in steps.iter_mut().filter(|s| s.dependency_count > named) {
            step.dependencies = sqlx::query!(
                r#"
                SELECT p.step_key, d.condition
                FROM runledger.workflow_steps p
                JOIN runledger.workflow_step_dependencies d
                  ON d.depends_on_step_id = p.id AND d.step_id = $2
                WHERE p.workflow_run_id = $1
                ORDER BY p.step_key
                LIMIT $3
                "#,
                run_id.0,
                step.id.0,
                named,
            )
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|edge| (edge.step_key, edge.condition))
            .collect();
        }
    }
    Ok(steps)
}

/// The stored outputs of `prerequisites`, in their order, read on behalf of the step `step_id`
/// in one statement: `None` for one without output, `workflow.not_a_prerequisite` (naming the
/// first) when one is not among the step's prerequisites.
pub async fn get_prerequisite_outputs<'e>(
    executor: impl PgExecutor<'e>,
    step_id: WorkflowStepId,
    prerequisites: &[String],
) -> Result<Vec<Option<Value>>> {
    let rows = sqlx::query!(
        r#"
        SELECT wanted.step_key AS "step_key!",
               d.step_id IS NOT NULL AS "is_prerequisite!",
               runledger.readable_json(p.output, 'job.output_invalid') AS output
        FROM unnest($2::text[]) WITH ORDINALITY AS wanted(step_key, position)
        LEFT JOIN runledger.workflow_steps s ON s.id = $1
        LEFT JOIN runledger.workflow_steps p
          ON p.workflow_run_id = s.workflow_run_id AND p.step_key = wanted.step_key
        LEFT JOIN runledger.workflow_step_dependencies d
          ON d.depends_on_step_id = p.id AND d.step_id = s.id
        ORDER BY wanted.position
        "#,
        step_id.0,
        prerequisites,
    )
    .fetch_all(executor)
    .await?;
    rows.into_iter()
        .map(|row| match row.is_prerequisite {
            true => Ok(row.output),
            false => Err(Error::NotAPrerequisite {
                step_key: row.step_key,
            }),
        })
        .collect()
}

/// Filters and page position for [`list_workflow_runs`]; runs come newest first.
///
/// ```
/// use runledger_engine::core::jobs::WorkflowRunStatus;
/// use runledger_engine::postgres::jobs::WorkflowRunListFilter;
///
/// let filter = WorkflowRunListFilter {
///     status: Some(WorkflowRunStatus::WaitingForExternal),
///     workflow_type_contains: Some("approval".to_owned()),
///     ..WorkflowRunListFilter::default()
/// };
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkflowRunListFilter {
    /// Only runs in this status.
    pub status: Option<WorkflowRunStatus>,
    /// Only runs whose type contains this text (case-insensitive).
    pub workflow_type_contains: Option<String>,
    /// Only runs of this organization; `None` lists every organization's runs.
    pub organization_id: Option<Uuid>,
    /// Only runs older than this one (keyset pagination).
    pub after: Option<WorkflowRunId>,
    /// Page size, 1 to 1,000; 0 means 100.
    pub limit: i64,
}

/// Filters for [`count_workflow_runs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkflowRunCountFilter {
    /// Only runs in this status.
    pub status: Option<WorkflowRunStatus>,
    /// Only runs whose type contains this text (case-insensitive).
    pub workflow_type_contains: Option<String>,
    /// Only runs of this organization; `None` counts every organization's runs.
    pub organization_id: Option<Uuid>,
}

/// Lists runs, newest first, for operator views.
pub async fn list_workflow_runs<'e>(
    executor: impl PgExecutor<'e>,
    filter: &WorkflowRunListFilter,
) -> Result<Vec<WorkflowRunRecord>> {
    let rows = sqlx::query_as!(
        WorkflowRunRecord,
        r#"
        SELECT id AS "id: WorkflowRunId", workflow_type, organization_id,
               status AS "status: WorkflowRunStatus",
               runledger.readable_json(metadata, 'workflow.invalid_metadata') AS "metadata!",
               idempotency_key, result_step_key,
               runledger.readable_json(result, 'job.output_invalid') AS result,
               status_reason, created_at, updated_at, finished_at
        FROM runledger.workflow_runs
        WHERE ($1::text IS NULL OR status = $1)
          AND ($2::text IS NULL OR strpos(lower(workflow_type), lower($2)) > 0)
          AND ($3::uuid IS NULL OR organization_id = $3)
          AND ($4::uuid IS NULL OR id < $4)
        ORDER BY id DESC
        LIMIT $5
        "#,
        filter.status.map(WorkflowRunStatus::as_str),
        filter.workflow_type_contains.as_deref(),
        filter.organization_id,
        filter.after.map(|id| id.0),
        super::reads::page_size(filter.limit),
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// Counts runs, e.g. failed runs or runs waiting for an external step.
pub async fn count_workflow_runs<'e>(
    executor: impl PgExecutor<'e>,
    filter: &WorkflowRunCountFilter,
) -> Result<i64> {
    let count = sqlx::query_scalar!(
        r#"
        SELECT count(*) AS "count!"
        FROM runledger.workflow_runs
        WHERE ($1::text IS NULL OR status = $1)
          AND ($2::text IS NULL OR strpos(lower(workflow_type), lower($2)) > 0)
          AND ($3::uuid IS NULL OR organization_id = $3)
        "#,
        filter.status.map(WorkflowRunStatus::as_str),
        filter.workflow_type_contains.as_deref(),
        filter.organization_id,
    )
    .fetch_one(executor)
    .await?;
    Ok(count)
}

/// How far one run has come: its steps counted by status group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkflowRunStepCounts {
    /// The run.
    pub run_id: WorkflowRunId,
    /// All steps.
    pub total: i64,
    /// Steps that succeeded.
    pub succeeded: i64,
    /// Steps that failed or were canceled.
    pub failed: i64,
    /// Steps enqueued or running.
    pub active: i64,
    /// Steps blocked on prerequisites or waiting for an external completion.
    pub waiting: i64,
}

/// Counts the steps of each of `run_ids` by status group, in one statement (for the progress
/// column of run lists). Runs without steps or unknown ids are left out.
pub async fn list_workflow_run_step_counts<'e>(
    executor: impl PgExecutor<'e>,
    run_ids: &[WorkflowRunId],
) -> Result<Vec<WorkflowRunStepCounts>> {
    if run_ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = run_ids.iter().map(|id| id.0).collect();
    let rows = sqlx::query_as!(
        WorkflowRunStepCounts,
        r#"
        SELECT s.workflow_run_id AS "run_id!: WorkflowRunId",
               count(*) AS "total!",
               count(*) FILTER (WHERE s.status = 'SUCCEEDED') AS "succeeded!",
               count(*) FILTER (WHERE s.status IN ('FAILED', 'CANCELED')) AS "failed!",
               count(*) FILTER (WHERE s.status IN ('ENQUEUED', 'RUNNING')) AS "active!",
               count(*) FILTER (WHERE s.status IN ('BLOCKED', 'WAITING_FOR_EXTERNAL')) AS "waiting!"
        FROM runledger.workflow_steps s
        WHERE s.workflow_run_id = ANY($1::uuid[])
        GROUP BY s.workflow_run_id
        "#,
        &ids,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
