//! Recovering jobs as an operator would: a failed export is requeued with compare-and-requeue
//! (a second operator acting on the same failure changes nothing), and once it succeeded it is
//! replayed under a replay key, which records the lineage and makes the replay idempotent.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo run -p runledger-examples --example replay_job
//! ```

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use runledger::JobHandle;
use runledger::admin::JobRequeueOutcome;
use runledger::engine::core::jobs::JobStatus;
use runledger::engine::postgres::jobs::{TenantScope, list_job_replays};
use runledger::prelude::*;
use runledger_examples::wait_for;

/// Whether the export's upstream is back; the first run fails while it is not.
static UPSTREAM_FIXED: AtomicBool = AtomicBool::new(false);

#[job(name = "reports.export", max_attempts = 1)]
async fn export_report(day: String) -> Result<u32, JobError> {
    if UPSTREAM_FIXED.load(Ordering::SeqCst) {
        Ok(42)
    } else {
        Err(JobError::terminal(format!("no data for {day} upstream")).with_code("export.no_data"))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn wait_until(
    pool: &sqlx::PgPool,
    job: JobHandle<ExportReport>,
    status: JobStatus,
) -> Result<(), Box<dyn std::error::Error>> {
    wait_for("the export", Duration::from_secs(60), || async move {
        Ok::<_, runledger::Error>((job.status(pool).await? == status).then_some(()))
    })
    .await
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let worker = Worker::from_env()?;
    let pool = worker.pool().clone();
    let running = worker.start().await?;
    let day = format!(
        "{}",
        runledger::chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3f")
    );

    let export = ExportReport { day: day.clone() }.enqueue(&pool).await?;
    wait_until(&pool, export, JobStatus::DeadLettered).await?;

    // Two operators look at the same failure (status and run number) and both decide to retry.
    let seen_by_ada = export.observe(&pool).await?;
    let seen_by_bob = seen_by_ada;
    println!("export failed in run {}", seen_by_ada.run_number);
    UPSTREAM_FIXED.store(true, Ordering::SeqCst);
    let ada = export.requeue_if(&pool, seen_by_ada).await?;
    let bob = export.requeue_if(&pool, seen_by_bob).await?;
    println!("ada: {ada:?}; bob: {bob:?}");
    assert!(matches!(ada, JobRequeueOutcome::Requeued { run_number: 2 }));
    assert!(matches!(bob, JobRequeueOutcome::ExpectationMismatch { .. }));
    wait_until(&pool, export, JobStatus::Succeeded).await?;

    // The export succeeded, but with data later found wrong: replay it. The key makes a
    // retried replay request return the same new job.
    let key = format!("export:{day}:fix-1");
    let replay = export
        .replay(&pool, &key, "upstream corrected its data")
        .await?;
    let retried = export
        .replay(&pool, &key, "upstream corrected its data")
        .await?;
    assert_eq!(retried.id(), replay.id());
    wait_until(&pool, replay, JobStatus::Succeeded).await?;
    for lineage in list_job_replays(&pool, export.id(), TenantScope::Global).await? {
        println!(
            "job {} was replayed as {} ({}): {}",
            lineage.source_job_id, lineage.replay_job_id, lineage.replay_key, lineage.reason
        );
    }
    running.shutdown().await?;
    Ok(())
}
