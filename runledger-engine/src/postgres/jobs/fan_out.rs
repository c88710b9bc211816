//! Filling a fan-out step with its children. The fan-out then finishes inside the release, once
//! its children have (`runledger.workflow_close_fan_outs`, `sql/09_workflow_release.sql`).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::types::Json;
use sqlx::{Acquire, Postgres};

use crate::core::jobs::{FanOutPage, JobType, StepKey, WorkflowRunId, fresh_uuids};
use crate::postgres::error::{Error, Result};
use crate::postgres::input::{check_key, check_payload};

use super::WorkflowAppendOutcome;
use super::workflows::RunMutation;

/// Children written per statement: a fill of any size sends bounded statements.
const FILL_BATCH: usize = 5_000;

/// A request to fill the fan-out step `fan_out` of a run with children: jobs of `job_type`, one
/// per payload, keyed `{fan_out}/0`, `{fan_out}/1`, ... in the order given. Each child starts
/// once the step `filled_by` succeeds (`filled_by` must be one of the fan-out's prerequisites);
/// the fan-out finishes once every child has, with their outputs in order.
///
/// ```
/// use runledger_engine::core::jobs::{JobType, StepKey, WorkflowRunId};
/// use runledger_engine::postgres::jobs::FanOutFill;
///
/// let children = vec![serde_json::json!({"url": "/a"}), serde_json::json!({"url": "/b"})];
/// let fill = FanOutFill {
///     workflow_run_id: WorkflowRunId(uuid::Uuid::now_v7()),
///     organization_id: None,
///     filled_by: StepKey::new("list"),
///     fan_out: StepKey::new("pages"),
///     job_type: JobType::new("crawl.fetch"),
///     children: &children,
/// };
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FanOutFill<'a> {
    /// The run.
    pub workflow_run_id: WorkflowRunId,
    /// The run's organization (`None`: a run without organization).
    pub organization_id: Option<uuid::Uuid>,
    /// The step that fills the fan-out: one of its prerequisites, not finished yet.
    pub filled_by: StepKey<'a>,
    /// The fan-out step.
    pub fan_out: StepKey<'a>,
    /// The children's job type.
    pub job_type: JobType<'a>,
    /// The children's payloads, in order.
    pub children: &'a [Value],
}

/// Fills a fan-out step with its children, in one transaction of statements of 5,000
/// children each. Idempotent under the mutation key `fan_out:{fan_out}`: the same children
/// again (a retried attempt) return [`WorkflowAppendOutcome::AlreadyApplied`]; other children,
/// or a second fill, fail with `workflow.append_conflicting_retry` (a digest of the children is
/// what is compared, so the record stays small however many there are).
///
/// Also fails with `workflow.fan_out_not_found` (no fan-out step of that key in the run),
/// `workflow.fan_out_filler_not_prerequisite` (`filled_by` is not one of its prerequisites),
/// `workflow.fan_out_closed` (the fan-out or its filler has already finished), a child's
/// payload code (`job.invalid_payload`, `job.payload_too_deep`),
/// `job.definition_not_found_or_disabled`, and the codes of
/// [`append_workflow_steps`](super::append_workflow_steps) for the run itself.
pub async fn fill_fan_out<'c, A>(acquire: A, fill: &FanOutFill<'_>) -> Result<WorkflowAppendOutcome>
where
    A: Acquire<'c, Database = Postgres>,
{
    let key = format!("fan_out:{}", fill.fan_out);
    check_key(&key, "workflow.invalid_mutation_key", "the mutation key")?;
    fill.filled_by.validate()?;
    fill.fan_out.validate()?;
    fill.job_type.validate()?;
    let count = fill.children.len();
    if count > 0 {
        StepKey::from(format!("{}/{}", fill.fan_out, count - 1)).validate()?;
    }
    let count = i32::try_from(count).map_err(|_| {
        Error::invalid_input(
            "workflow.fan_out_too_large",
            "a fan-out has at most 2,147,483,647 children",
        )
    })?;
    let mut digest = Sha256::new();
    digest.update(fill.job_type.as_str().as_bytes());
    for (index, payload) in fill.children.iter().enumerate() {
        check_payload(payload, &format!("the payload of child {index}"))?;
        digest.update([0]);
        digest.update(payload.to_string().as_bytes());
    }
    let request = json!({
        "fan_out": fill.fan_out.as_str(),
        "job_type": fill.job_type.as_str(),
        "children": count,
        "sha256": digest
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>(),
    });

    let mut conn = acquire.acquire().await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let mutation = RunMutation {
        run_id: fill.workflow_run_id,
        organization_id: fill.organization_id,
        key: &key,
        kind: "FILL_FAN_OUT",
    };
    if let Some(outcome) = mutation.begin(&mut tx, &request).await? {
        return Ok(outcome);
    }
    let run_id = fill.workflow_run_id.0;
    let state = sqlx::query!(
        r#"
        SELECT g.id AS "gate?",
               g.step_kind = 'FAN_OUT' AS "is_fan_out?",
               g.status = 'BLOCKED' AND f.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')
                   AS "open?",
               EXISTS (
                   SELECT 1 FROM runledger.workflow_step_dependencies d
                   WHERE d.depends_on_step_id = f.id AND d.step_id = g.id
               ) AS "filled_by_prerequisite!",
               f.id AS "filler?",
               EXISTS (
                   SELECT 1 FROM runledger.job_definitions d
                   WHERE d.job_type = $4 AND d.is_enabled
               ) AS "type_enabled!"
        FROM (SELECT 1) AS one
        LEFT JOIN runledger.workflow_steps g ON g.workflow_run_id = $1 AND g.step_key = $2
        LEFT JOIN runledger.workflow_steps f ON f.workflow_run_id = $1 AND f.step_key = $3
        "#,
        run_id,
        fill.fan_out.as_str(),
        fill.filled_by.as_str(),
        fill.job_type.as_str(),
    )
    .fetch_one(&mut *tx)
    .await?;
    let refuse = |code| {
        Err(Error::WorkflowConflict {
            code,
            subject: fill.fan_out.to_string(),
        })
    };
    let (Some(gate), Some(true)) = (state.gate, state.is_fan_out) else {
        return refuse("workflow.fan_out_not_found");
    };
    let Some(filler) = state.filler.filter(|_| state.filled_by_prerequisite) else {
        return refuse("workflow.fan_out_filler_not_prerequisite");
    };
    if state.open != Some(true) {
        return refuse("workflow.fan_out_closed");
    }
    if !state.type_enabled {
        return Err(Error::DefinitionNotFoundOrDisabled {
            job_type: fill.job_type.to_string(),
        });
    }

    for (batch, payloads) in fill.children.chunks(FILL_BATCH).enumerate() {
        let ids = fresh_uuids(payloads.len());
        let payloads: Vec<Json<&Value>> = payloads.iter().map(Json).collect();
        let first = i32::try_from(batch * FILL_BATCH).unwrap_or(i32::MAX);
        sqlx::query!(
            r#"
            WITH children AS (
                SELECT c.id, $3 || '/' || ($4 + c.position - 1) AS step_key, c.payload
                FROM unnest($2::uuid[], $5::jsonb[]) WITH ORDINALITY AS c(id, payload, position)
            ),
            steps AS (
                INSERT INTO runledger.workflow_steps (
                    id, workflow_run_id, step_key, job_type, payload, deps_total, deps_pending
                )
                SELECT c.id, $1, c.step_key, $6, c.payload, 1, 1
                FROM children c
            )
            INSERT INTO runledger.workflow_step_dependencies (
                workflow_run_id, step_id, depends_on_step_id, condition
            )
            SELECT $1, c.id, $7, 'SUCCESS' FROM children c
            UNION ALL
            SELECT $1, $8, c.id, 'TERMINAL' FROM children c
            "#,
            run_id,
            &ids,
            fill.fan_out.as_str(),
            i64::from(first),
            &payloads as &[Json<&Value>],
            fill.job_type.as_str(),
            filler,
            gate,
        )
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query!(
        r#"
        UPDATE runledger.workflow_steps
        SET deps_total = deps_total + $2,
            deps_pending = deps_pending + $2,
            payload = jsonb_build_object('children', $2::int),
            updated_at = now()
        WHERE id = $1
        "#,
        gate,
        count,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(WorkflowAppendOutcome::Applied)
}

/// The stored outputs of up to `limit` children of fan-out `fan_out`, from child `from` on,
/// read on behalf of the step `step_id`, of which the fan-out must be a prerequisite
/// (otherwise `workflow.not_a_prerequisite`; a step of that key that is not a fan-out gives
/// `workflow.fan_out_not_found`). One statement per page, whatever the number of children.
pub async fn get_fan_out_outputs<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    step_id: crate::core::jobs::WorkflowStepId,
    fan_out: &str,
    from: u64,
    limit: u64,
) -> Result<FanOutPage> {
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = sqlx::query!(
        r#"
        SELECT g.step_kind AS "kind?",
               coalesce((g.payload ->> 'children')::bigint, 0) AS "children!",
               d.step_id IS NOT NULL AS "is_prerequisite!",
               i.n AS "n?",
               runledger.readable_json(c.output, 'job.output_invalid') AS output
        FROM (SELECT 1) AS one
        LEFT JOIN runledger.workflow_steps s ON s.id = $1
        LEFT JOIN runledger.workflow_steps g
          ON g.workflow_run_id = s.workflow_run_id AND g.step_key = $2
        LEFT JOIN runledger.workflow_step_dependencies d
          ON d.depends_on_step_id = g.id AND d.step_id = s.id
        LEFT JOIN LATERAL generate_series(
            $3::bigint,
            least($3::bigint + $4::bigint, coalesce((g.payload ->> 'children')::bigint, 0)) - 1
        ) AS i(n) ON d.step_id IS NOT NULL
        LEFT JOIN runledger.workflow_steps c
          ON c.workflow_run_id = g.workflow_run_id AND c.step_key = g.step_key || '/' || i.n
        ORDER BY i.n
        "#,
        step_id.0,
        fan_out,
        from,
        limit,
    )
    .fetch_all(executor)
    .await?;
    let Some(first) = rows.first() else {
        return Err(Error::NotAPrerequisite {
            step_key: fan_out.to_owned(),
        });
    };
    if !first.is_prerequisite {
        return Err(Error::NotAPrerequisite {
            step_key: fan_out.to_owned(),
        });
    }
    if first.kind.as_deref() != Some("FAN_OUT") {
        return Err(Error::WorkflowConflict {
            code: "workflow.fan_out_not_found",
            subject: fan_out.to_owned(),
        });
    }
    let children = u64::try_from(first.children).unwrap_or(0);
    let outputs = rows
        .into_iter()
        .filter(|row| row.n.is_some())
        .map(|row| row.output)
        .collect();
    Ok(FanOutPage::new(children, outputs))
}
