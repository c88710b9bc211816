//! A workflow that waits for a human approval: the external step `approval` gates `publish`.
//! The approval is given with `complete_external_workflow_step`, as an admin API would.
//!
//! ```sh
//! cargo run -p runledger-examples --example external_gate
//! ```

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use runledger::JobsConfig;
use runledger::engine::core::jobs::{
    JobCompletion, JobContext, JobFailure, JobType, StepKey, WorkflowRunEnqueueBuilder,
    WorkflowStepEnqueueBuilder, WorkflowStepStatus, WorkflowType,
};
use runledger::engine::core::prelude::async_trait;
use runledger::engine::postgres::jobs::{
    CompleteExternalWorkflowStepInput, WorkflowRunWaitOptions, complete_external_workflow_step,
    enqueue_workflow_run_handle,
};
use runledger::engine::runtime::Supervisor;
use runledger::engine::runtime::catalog::JobCatalog;
use runledger::engine::runtime::registry::JobHandler;
use serde_json::{Value, json};

struct Publish;

#[async_trait]
impl JobHandler for Publish {
    fn job_type(&self) -> JobType<'static> {
        JobType::new("articles.publish")
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<JobCompletion, JobFailure> {
        let approval = ctx
            .prerequisite_output("approval")
            .await
            .map_err(|err| JobFailure::retryable(err.code, err.message))?;
        Ok(JobCompletion::with_output(json!({
            "article": payload["article"],
            "approved_by": approval.map(|a| a["approved_by"].clone()),
        })))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let db = runledger_examples::database().await?;
    let pool = db.pool().clone();
    runledger::engine::postgres::migrate(&pool).await?;
    let catalog = JobCatalog::new().handler(Publish);
    catalog.sync_definitions(&pool).await?;
    let supervisor = Supervisor::builder(&pool, JobsConfig::from_env())?
        .with_catalog(&catalog)
        .build()?;

    let metadata = json!({});
    let article = json!({"article": 42});
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("articles.review"), &metadata)
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("approval")).build())
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("publish"),
                JobType::new("articles.publish"),
                &article,
            )
            .depends_on_success(StepKey::new("approval"))
            .build(),
        )
        .result_step(StepKey::new("publish"))
        .build()?;
    let handle = enqueue_workflow_run_handle(&pool, &run).await?;
    println!("run {} is {}", handle.id(), handle.get_status().await?);

    // Later, from the admin surface:
    let approval_output = json!({ "approved_by": "ops" });
    complete_external_workflow_step(
        &pool,
        &CompleteExternalWorkflowStepInput {
            workflow_run_id: handle.id(),
            organization_id: None,
            step_key: StepKey::new("approval"),
            terminal_status: WorkflowStepStatus::Succeeded,
            status_reason: Some("approved"),
            last_error_code: None,
            last_error_message: None,
            output: Some(&approval_output),
        },
    )
    .await?;

    let result = handle
        .get_result(WorkflowRunWaitOptions {
            timeout: Some(Duration::from_secs(30)),
            ..WorkflowRunWaitOptions::default()
        })
        .await?;
    println!("published: {result}");
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await?;
    pool.close().await;
    Ok(())
}
