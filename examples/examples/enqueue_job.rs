//! Enqueue one job from an API process, inside the transaction that writes the business row,
//! with an idempotency key so a retried request does not enqueue twice.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo run -p runledger-examples --example enqueue_job
//! ```
//!
//! Without `DATABASE_URL` it runs on the first PostgreSQL it finds; give it the one
//! `worker_binary` runs on for that worker to run the job.

#![allow(clippy::print_stdout)]

use runledger::engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, enqueue_job, upsert_job_definition,
};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let db = runledger_examples::database().await?;
    let pool = db.pool().clone();
    runledger::engine::postgres::migrate(&pool).await?;
    // Normally the worker's catalog sync creates the definition; done here so the example
    // runs on its own.
    upsert_job_definition(&pool, &JobDefinitionUpsert::new("jobs.email.send")).await?;

    let payload = serde_json::json!({ "to": "ada@example.com" });
    let request =
        JobEnqueue::new("jobs.email.send", &payload).idempotency_key("signup:ada:welcome");

    let mut tx = pool.begin().await?;
    // sqlx::query("INSERT INTO users ...").execute(&mut *tx).await?;
    let job = enqueue_job(&mut *tx, &request).await?;
    tx.commit().await?;

    // Retrying the same request returns the same job instead of a second one.
    let again = enqueue_job(&pool, &request).await?;
    assert_eq!(again.id, job.id);
    println!(
        "enqueued job {} (created: {}), retry deduplicated: {}",
        job.id, job.created, !again.created
    );
    pool.close().await;
    Ok(())
}
