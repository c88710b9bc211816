//! A fan-out / fan-in workflow: `crawl` feeds `classify` and `score`, which both feed
//! `persist`; `persist` reads its prerequisites' outputs and becomes the run's result.
//!
//! ```sh
//! cargo run -p runledger-examples --example workflow_dag
//! ```

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use runledger::JobsConfig;
use runledger::engine::core::jobs::{
    JobCompletion, JobContext, JobFailure, JobType, WorkflowDagBuilder,
};
use runledger::engine::core::prelude::async_trait;
use runledger::engine::postgres::jobs::{WorkflowRunWaitOptions, enqueue_workflow_run_handle};
use runledger::engine::runtime::Supervisor;
use runledger::engine::runtime::catalog::JobCatalog;
use runledger::engine::runtime::registry::JobHandler;
use serde_json::{Value, json};

/// One handler for every step: it echoes a score, and `persist` sums its prerequisites'.
struct Step(&'static str);

#[async_trait]
impl JobHandler for Step {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(self.0)
    }

    async fn execute(&self, ctx: JobContext, payload: Value) -> Result<JobCompletion, JobFailure> {
        if self.0 != "profiles.persist" {
            return Ok(JobCompletion::with_output(
                json!({ "score": payload["score"] }),
            ));
        }
        let mut total = 0;
        for prerequisite in ["classify", "score"] {
            let output = ctx
                .prerequisite_output(prerequisite)
                .await
                .map_err(|err| JobFailure::retryable(err.code, err.message))?;
            total += output.and_then(|o| o["score"].as_i64()).unwrap_or_default();
        }
        Ok(JobCompletion::with_output(
            json!({ "profile_id": payload["profile_id"], "total": total }),
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
    let catalog = [
        "profiles.crawl",
        "profiles.classify",
        "profiles.score",
        "profiles.persist",
    ]
    .into_iter()
    .fold(JobCatalog::new(), |catalog, job_type| {
        catalog.job(job_type, Step(job_type))
    });
    catalog.sync_definitions(&pool).await?;
    let supervisor = Supervisor::builder(&pool, JobsConfig::from_env())?
        .with_catalog(&catalog)
        .build()?;

    let metadata = json!({"source": "example"});
    let crawl = json!({"profile_id": "p_123", "score": 0});
    let classify = json!({"profile_id": "p_123", "score": 2});
    let score = json!({"profile_id": "p_123", "score": 5});
    let persist = json!({"profile_id": "p_123"});
    let run = WorkflowDagBuilder::new("profiles.research", &metadata)
        .job("crawl", "profiles.crawl", &crawl)?
        .job("classify", "profiles.classify", &classify)?
        .after_success("classify", ["crawl"])?
        .job("score", "profiles.score", &score)?
        .after_success("score", ["crawl"])?
        .job("persist", "profiles.persist", &persist)?
        .after_success("persist", ["classify", "score"])?
        .result_step("persist")?
        .build()?;
    let handle = enqueue_workflow_run_handle(&pool, &run).await?;
    let result = handle
        .get_result(WorkflowRunWaitOptions {
            timeout: Some(Duration::from_secs(30)),
            ..WorkflowRunWaitOptions::default()
        })
        .await?;
    println!("run {} finished with {result}", handle.id());

    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await?;
    pool.close().await;
    Ok(())
}
