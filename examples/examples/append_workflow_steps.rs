//! Adds steps to a running workflow while its approval gate waits; the appended `notify`
//! step runs after the approval. Appends are keyed, so retrying one is harmless.
//!
//! ```sh
//! cargo run -p runledger-examples --example append_workflow_steps
//! ```

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use runledger::JobsConfig;
use runledger::engine::core::jobs::{
    JobCompletion, JobContext, JobFailure, JobType, StepKey, WorkflowRunEnqueueBuilder,
    WorkflowRunStatus, WorkflowStepEnqueueBuilder, WorkflowStepStatus, WorkflowType,
};
use runledger::engine::core::prelude::async_trait;
use runledger::engine::postgres::jobs::{
    CompleteExternalWorkflowStepInput, WorkflowAppend, append_workflow_steps,
    complete_external_workflow_step, enqueue_workflow_run_handle,
};
use runledger::engine::runtime::Supervisor;
use runledger::engine::runtime::catalog::JobCatalog;
use runledger::engine::runtime::registry::JobHandler;
use serde_json::{Value, json};

struct Notify;

#[async_trait]
impl JobHandler for Notify {
    fn job_type(&self) -> JobType<'static> {
        JobType::new("orders.notify")
    }

    async fn execute(&self, _: JobContext, payload: Value) -> Result<JobCompletion, JobFailure> {
        Ok(JobCompletion::with_output(
            json!({ "notified": payload["channel"] }),
        ))
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
    let catalog = JobCatalog::new().handler(Notify);
    catalog.sync_definitions(&pool).await?;
    let supervisor = Supervisor::builder(&pool, JobsConfig::from_env())?
        .with_catalog(&catalog)
        .build()?;

    let metadata = json!({});
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("orders.fulfil"), &metadata)
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("approval")).build())
        .build()?;
    let handle = enqueue_workflow_run_handle(&pool, &run).await?;

    let channel = json!({"channel": "email"});
    let append = WorkflowAppend {
        workflow_run_id: handle.id(),
        organization_id: None,
        mutation_key: "add-notify",
        steps: vec![
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("notify"),
                JobType::new("orders.notify"),
                &channel,
            )
            .depends_on_success(StepKey::new("approval"))
            .build(),
        ],
    };
    println!("append: {:?}", append_workflow_steps(&pool, &append).await?);
    println!("retry:  {:?}", append_workflow_steps(&pool, &append).await?);

    complete_external_workflow_step(
        &pool,
        &CompleteExternalWorkflowStepInput {
            workflow_run_id: handle.id(),
            organization_id: None,
            step_key: StepKey::new("approval"),
            terminal_status: WorkflowStepStatus::Succeeded,
            status_reason: None,
            last_error_code: None,
            last_error_message: None,
            output: None,
        },
    )
    .await?;
    // The run declares no result step, so wait on its status.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while handle.get_status().await? != WorkflowRunStatus::Succeeded
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("run {} is {}", handle.id(), handle.get_status().await?);
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await?;
    pool.close().await;
    Ok(())
}
