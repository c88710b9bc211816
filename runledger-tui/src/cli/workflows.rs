//! `workflows list|show|cancel` and `gates complete|fail`.

use runledger_engine::core::jobs::{StepKey, WorkflowRunId, WorkflowStepId, WorkflowStepStatus};
use runledger_engine::postgres::Error;
use runledger_engine::postgres::jobs::{
    CompleteExternalWorkflowStepInput, ExternalStepCompletion, WorkflowRunListFilter,
    WorkflowRunRecord, WorkflowRunStepCounts, WorkflowStepRecord, cancel_workflow_run,
    complete_external_workflow_step, get_workflow_run, list_workflow_run_step_counts,
    list_workflow_runs, list_workflow_steps_page,
};
use serde::Serialize;
use uuid::Uuid;

use super::output::{self, RUN_HEADER, STEP_HEADER, table};
use super::{Context, Failure};
use crate::args::{GatesCommand, RunListArgs, Status, WorkflowsCommand, run_id};

/// A run as `workflows list` and `workflows show` print it: its fields, its step counts and,
/// shown alone, its steps.
#[derive(Serialize)]
struct RunView<'a> {
    #[serde(flatten)]
    run: &'a WorkflowRunRecord,
    steps: Option<&'a WorkflowRunStepCounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_list: Option<&'a [WorkflowStepRecord]>,
    /// Shown alone: the last step of a full page, where the next one starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<WorkflowStepId>,
}

/// One page of runs.
#[derive(Serialize)]
struct RunPage<'a> {
    workflow_runs: Vec<RunView<'a>>,
    next_cursor: Option<WorkflowRunId>,
}

/// What `gates complete|fail` did.
#[derive(Serialize)]
struct GateOutcome<'a> {
    workflow_run_id: WorkflowRunId,
    step_key: &'a str,
    status: WorkflowStepStatus,
    already_completed: bool,
}

pub(super) async fn run(context: &Context, command: &WorkflowsCommand) -> Result<(), Failure> {
    match command {
        WorkflowsCommand::List(args) => list(context, args).await,
        WorkflowsCommand::Show { id, limit, after } => {
            show(context, *id, *limit, after.map(WorkflowStepId)).await
        }
        WorkflowsCommand::Cancel { id } => {
            cancel_workflow_run(&context.pool, run_id(*id), context.scope()).await?;
            show(context, *id, SHOWN_AFTER_CANCEL, None).await
        }
    }
}

async fn list(context: &Context, args: &RunListArgs) -> Result<(), Failure> {
    let filter = WorkflowRunListFilter {
        status: args.status.map(Status::into_inner),
        workflow_type_contains: args.workflow_type.clone(),
        organization_id: context.organization,
        after: args.after.map(run_id),
        limit: args.limit,
    };
    let runs = list_workflow_runs(&context.pool, &filter).await?;
    let ids: Vec<_> = runs.iter().map(|run| run.id).collect();
    let counts = list_workflow_run_step_counts(&context.pool, &ids).await?;
    let counts_of = |run: &WorkflowRunRecord| counts.iter().find(|c| c.run_id == run.id);
    let next_cursor = (runs.len() as i64 >= args.limit)
        .then(|| runs.last().map(|run| run.id))
        .flatten();
    let page = RunPage {
        workflow_runs: runs
            .iter()
            .map(|run| RunView {
                run,
                steps: counts_of(run),
                step_list: None,
                next_cursor: None,
            })
            .collect(),
        next_cursor,
    };
    context.out.print(&page, || {
        let rows: Vec<_> = runs
            .iter()
            .map(|run| output::run_row(run, counts_of(run)))
            .collect();
        let mut text = table(RUN_HEADER, &rows);
        if let Some(cursor) = next_cursor {
            text.push_str(&format!("\nmore: --after {cursor}"));
        }
        text
    })
}

/// Steps `workflows cancel` shows of the run it canceled.
const SHOWN_AFTER_CANCEL: i64 = 1_000;

async fn show(
    context: &Context,
    id: Uuid,
    limit: i64,
    after: Option<WorkflowStepId>,
) -> Result<(), Failure> {
    let run = get_workflow_run(&context.pool, run_id(id), context.scope())
        .await?
        .ok_or(Error::WorkflowRunNotFound { run_id: run_id(id) })?;
    let steps =
        list_workflow_steps_page(&context.pool, run_id(id), context.scope(), after, limit).await?;
    let counts = list_workflow_run_step_counts(&context.pool, &[run.id]).await?;
    let next_cursor = (steps.len() as i64 >= limit)
        .then(|| steps.last().map(|step| step.id))
        .flatten();
    let view = RunView {
        run: &run,
        steps: counts.first(),
        step_list: Some(&steps),
        next_cursor,
    };
    context.out.print(&view, || {
        let rows: Vec<_> = steps.iter().map(output::step_row).collect();
        let mut text = format!(
            "{}  {}  {}\n{}",
            run.id,
            run.workflow_type,
            run.status,
            table(STEP_HEADER, &rows)
        );
        if let Some(cursor) = next_cursor {
            text.push_str(&format!("\nmore: --after {cursor}"));
        }
        text
    })
}

pub(super) async fn gates(context: &Context, command: &GatesCommand) -> Result<(), Failure> {
    let (run, step, status, output, code, message) = match command {
        GatesCommand::Complete { run, step, output } => (
            *run,
            step,
            WorkflowStepStatus::Succeeded,
            output.as_ref(),
            None,
            None,
        ),
        GatesCommand::Fail {
            run,
            step,
            code,
            message,
        } => (
            *run,
            step,
            WorkflowStepStatus::Failed,
            None,
            Some(code.as_str()),
            message.as_deref(),
        ),
    };
    // The completion names the run's organization; an operator addresses the run by id alone.
    let record = get_workflow_run(&context.pool, run_id(run), context.scope())
        .await?
        .ok_or(Error::WorkflowRunNotFound {
            run_id: run_id(run),
        })?;
    let input = CompleteExternalWorkflowStepInput {
        workflow_run_id: record.id,
        organization_id: record.organization_id,
        step_key: StepKey::new(step),
        terminal_status: status,
        status_reason: None,
        last_error_code: code,
        last_error_message: message,
        output,
    };
    let completion = complete_external_workflow_step(&context.pool, &input).await?;
    let already = completion == ExternalStepCompletion::AlreadyCompleted;
    let outcome = GateOutcome {
        workflow_run_id: record.id,
        step_key: step,
        status,
        already_completed: already,
    };
    context.out.print(&outcome, || {
        let outcome = if already { "was already" } else { "is now" };
        format!("gate {step} of run {} {outcome} {status}", record.id)
    })
}
