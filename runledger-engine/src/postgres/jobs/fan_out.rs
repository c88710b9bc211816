//! Filling a fan-out step with its children. The fan-out then finishes inside the release, once
//! its children have (`runledger.workflow_close_fan_outs`, `sql/09_workflow_release.sql`).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::types::Json;
use sqlx::{Acquire, Postgres};

use crate::core::jobs::{FanOutChild, FanOutPage, JobType, StepKey, WorkflowRunId, fresh_uuids};
use crate::postgres::error::{Error, Result};
use crate::postgres::input::{check_key, check_payload};

use super::WorkflowAppendOutcome;
use super::workflows::{RunMutation, hex};

/// Children written per statement: a fill of any size sends bounded statements.
const FILL_BATCH: usize = 5_000;

/// A request to fill the fan-out step `fan_out` of a run with children of `job_type`, keyed
/// `{fan_out}/0`, `{fan_out}/1`, ... in the order [`fill_fan_out`] is given their payloads.
/// Each child starts once the step `filled_by` succeeds (`filled_by` must be one of the
/// fan-out's prerequisites); the fan-out finishes once every child has, with their outputs in
/// order.
///
/// ```
/// use runledger_engine::core::jobs::{JobType, StepKey, WorkflowRunId};
/// use runledger_engine::postgres::jobs::FanOutFill;
///
/// let fill = FanOutFill {
///     workflow_run_id: WorkflowRunId(uuid::Uuid::now_v7()),
///     organization_id: None,
///     filled_by: StepKey::new("list"),
///     fan_out: StepKey::new("pages"),
///     job_type: JobType::new("crawl.fetch"),
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
}

/// Fills a fan-out step with `children`, in one transaction, taking them from the iterator
/// 5,000 at a time: no more than one statement's worth is held at once, whatever their number.
/// Idempotent under the mutation key `fan_out:{fan_out}`: the same children again (a retried
/// attempt) return [`WorkflowAppendOutcome::AlreadyApplied`]; other children, or a second fill,
/// fail with `workflow.append_conflicting_retry` (a digest of the children is what is compared,
/// so the record stays small however many there are). Returns how many children it was given.
///
/// Also fails with `workflow.fan_out_not_found` (no fan-out step of that key in the run),
/// `workflow.fan_out_filler_not_prerequisite` (`filled_by` is not one of its prerequisites),
/// `workflow.fan_out_closed` (the fan-out or its filler has already finished), a child's
/// payload code (`job.invalid_payload`, `job.payload_too_deep`, `payload.serialize_failed`),
/// `job.definition_not_found_or_disabled`, and the codes of
/// [`append_workflow_steps`](super::append_workflow_steps) for the run itself. Nothing is
/// written unless every child is.
pub async fn fill_fan_out<'c, A>(
    acquire: A,
    fill: &FanOutFill<'_>,
    children: &mut (dyn Iterator<Item = FanOutChild> + Send),
) -> Result<(WorkflowAppendOutcome, usize)>
where
    A: Acquire<'c, Database = Postgres>,
{
    let key = format!("fan_out:{}", fill.fan_out);
    check_key(&key, "workflow.invalid_mutation_key", "the mutation key")?;
    fill.filled_by.validate()?;
    fill.fan_out.validate()?;
    fill.job_type.validate()?;
    let mut conn = acquire.acquire().await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let mutation = RunMutation {
        run_id: fill.workflow_run_id,
        organization_id: fill.organization_id,
        key: &key,
        kind: "FILL_FAN_OUT",
    };
    let mut children = Children::new(fill.job_type.as_str(), children);
    if mutation.lock(&mut tx).await? {
        while children.next_batch()?.is_some() {}
        let request = children.request(fill);
        let outcome = mutation.replay(&mut tx, &request).await?;
        return Ok((outcome, children.count));
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

    let mut first = 0_usize;
    while let Some(payloads) = children.next_batch()? {
        let last = first + payloads.len() - 1;
        StepKey::from(format!("{}/{last}", fill.fan_out)).validate()?;
        let ids = fresh_uuids(payloads.len());
        let payloads: Vec<Json<&Value>> = payloads.iter().map(Json).collect();
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
            i64::try_from(first).unwrap_or(i64::MAX),
            &payloads as &[Json<&Value>],
            fill.job_type.as_str(),
            filler,
            gate,
        )
        .execute(&mut *tx)
        .await?;
        first = last + 1;
    }
    let count = i32::try_from(children.count).map_err(|_| {
        Error::invalid_input(
            "workflow.fan_out_too_large",
            "a fan-out has at most 2,147,483,647 children",
        )
    })?;
    mutation.record(&mut tx, &children.request(fill)).await?;
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
    Ok((WorkflowAppendOutcome::Applied, children.count))
}

/// The children of a fill, taken [`FILL_BATCH`] at a time: each checked, counted and added to
/// the digest that identifies the whole fill.
struct Children<'i> {
    source: &'i mut (dyn Iterator<Item = FanOutChild> + Send),
    digest: Sha256,
    count: usize,
}

impl<'i> Children<'i> {
    fn new(job_type: &str, source: &'i mut (dyn Iterator<Item = FanOutChild> + Send)) -> Self {
        let mut digest = Sha256::new();
        digest.update(job_type.as_bytes());
        Self {
            source,
            digest,
            count: 0,
        }
    }

    /// The next payloads, at most [`FILL_BATCH`]; `None` once there are no more.
    fn next_batch(&mut self) -> Result<Option<Vec<Value>>> {
        let mut batch = Vec::new();
        for child in (&mut *self.source).take(FILL_BATCH) {
            let payload = child
                .map_err(|message| Error::invalid_input("payload.serialize_failed", message))?;
            check_payload(&payload, &format!("the payload of child {}", self.count))?;
            self.digest.update([0]);
            self.digest.update(payload.to_string().as_bytes());
            self.count += 1;
            batch.push(payload);
        }
        Ok((!batch.is_empty()).then_some(batch))
    }

    /// What the mutation record keeps of the fill once every child was taken.
    fn request(&self, fill: &FanOutFill<'_>) -> Value {
        json!({
            "fan_out": fill.fan_out.as_str(),
            "job_type": fill.job_type.as_str(),
            "children": self.count,
            "sha256": hex(&self.digest.clone().finalize()),
        })
    }
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
