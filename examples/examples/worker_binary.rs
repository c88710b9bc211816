//! A worker process: registers a handler in a catalog, syncs its definition, and runs the
//! Supervisor until Ctrl-C with a 30 s drain deadline.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo run -p runledger-examples --example worker_binary
//! ```
//!
//! With `enqueue_job` in another terminal (same `DATABASE_URL`: without one, each process could
//! end up on a throwaway cluster of its own), it runs the job that example enqueues.

use std::process::ExitCode;
use std::time::Duration;

use runledger::JobsConfig;
use runledger::engine::core::jobs::{JobCompletion, JobContext, JobFailure, JobType};
use runledger::engine::core::prelude::async_trait;
use runledger::engine::runtime::Supervisor;
use runledger::engine::runtime::catalog::JobCatalog;
use runledger::engine::runtime::registry::JobHandler;
use serde_json::Value;

struct SendEmail;

#[async_trait]
impl JobHandler for SendEmail {
    fn job_type(&self) -> JobType<'static> {
        JobType::new("jobs.email.send")
    }

    async fn execute(
        &self,
        _context: JobContext,
        payload: Value,
    ) -> Result<JobCompletion, JobFailure> {
        let Some(to) = payload.get("to").and_then(Value::as_str) else {
            return Err(JobFailure::terminal(
                "email.missing_recipient",
                "payload has no `to`",
            ));
        };
        // Deliver the email here.
        Ok(JobCompletion::with_output(
            serde_json::json!({ "delivered_to": to }),
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

    // Apply the bundled schema (or validate one applied by other tooling).
    runledger::engine::postgres::migrate_after_idempotency_cutover(&pool).await?;

    // Register handlers and sync their job definitions.
    let catalog = JobCatalog::new().job("jobs.email.send", SendEmail);
    catalog.sync_definitions(&pool).await?;

    // Run until Ctrl-C, then drain in-flight jobs for up to 30 s.
    let supervisor = Supervisor::builder(&pool, JobsConfig::from_env())?
        .with_catalog(&catalog)
        .build()?;
    let shutdown_result = supervisor
        .run_until_shutdown(
            async {
                if let Err(error) = tokio::signal::ctrl_c().await {
                    eprintln!("failed to listen for shutdown signal: {error}");
                }
            },
            Duration::from_secs(30),
        )
        .await;

    // Close the pool whatever the shutdown result, then report it.
    pool.close().await;
    shutdown_result?;
    Ok(())
}
