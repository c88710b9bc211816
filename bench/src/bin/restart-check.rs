//! PostgreSQL restart check: a Supervisor works through a queue while the database server is
//! restarted under it. Passes when every job ends `SUCCEEDED`, none is dead-lettered, the
//! Supervisor's loops are still running afterwards, and jobs enqueued after the restart are
//! picked up too (with a 60 s poll interval, so through the re-established `LISTEN`).
//!
//! ```sh
//! cargo run --release -p runledger-bench --bin restart-check -- --jobs 2000
//! ```
//!
//! It restarts the server with `--restart-cmd` (default: `pg_ctlcluster` on the newest cluster
//! under `/etc/postgresql`), so run it only where restarting that server is fine. It creates (and
//! drops at the start of each run) the database `runledger_restart_check` on the server of
//! `DATABASE_URL`. Handlers may run more than once around the restart (delivery is
//! at-least-once: a completion lost with the connection is retried after the lease expires);
//! the count is printed.

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use runledger_bench::{BoxError, database_url, fresh_database};
use runledger_engine::core::jobs::{JobCompletion, JobContext, JobFailure, JobHandler, JobType};
use runledger_engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, enqueue_jobs, upsert_job_definition,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::registry::JobRegistry;
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const DB: &str = "runledger_restart_check";
const JOB_TYPE: &str = "restart.work";

/// Sleeps a little per job and counts how often each job's handler ran.
struct Work {
    runs: Arc<Mutex<HashMap<String, u32>>>,
}

#[async_trait::async_trait]
impl JobHandler for Work {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(JOB_TYPE)
    }

    async fn execute(&self, context: JobContext, _: Value) -> Result<JobCompletion, JobFailure> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        *self
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(context.job_id.to_string())
            .or_insert(0) += 1;
        Ok(JobCompletion::success())
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

fn default_restart_command() -> Result<String, BoxError> {
    let mut versions: Vec<String> = std::fs::read_dir("/etc/postgresql")?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    versions.sort_by_key(|v| v.parse::<u32>().unwrap_or(0));
    let version = versions.last().ok_or("no cluster under /etc/postgresql")?;
    Ok(format!(
        "pg_ctlcluster --skip-systemctl-redirect {version} main restart"
    ))
}

async fn count(pool: &PgPool, status: &str) -> Option<i64> {
    sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue WHERE status = $1")
        .bind(status)
        .fetch_one(pool)
        .await
        .ok()
}

/// Enqueues `jobs` jobs in batches of 500.
async fn fill(pool: &PgPool, from: usize, jobs: usize) -> Result<(), BoxError> {
    let payloads: Vec<Value> = (from..from + jobs).map(|n| json!({ "n": n })).collect();
    for chunk in payloads.chunks(500) {
        let requests: Vec<_> = chunk.iter().map(|p| JobEnqueue::new(JOB_TYPE, p)).collect();
        enqueue_jobs(pool, &requests).await?;
    }
    Ok(())
}

/// Waits until `target` jobs succeeded, probing on a pool that survives the restart (sqlx
/// replaces broken connections), for at most `limit`.
async fn wait_succeeded(pool: &PgPool, target: i64, limit: Duration) -> bool {
    let begun = Instant::now();
    while begun.elapsed() < limit {
        if count(pool, "SUCCEEDED").await == Some(target) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let jobs: usize = arg("--jobs").map_or(Ok(2_000), |v| v.parse())?;
    let restart = match arg("--restart-cmd") {
        Some(command) => command,
        None => default_restart_command()?,
    };
    let db_url = fresh_database(&database_url(), DB).await?;
    let pool = PgPoolOptions::new()
        .max_connections(12)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&db_url)
        .await?;
    let probe = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&db_url)
        .await?;
    runledger_engine::postgres::migrate(&pool).await?;
    upsert_job_definition(&pool, &JobDefinitionUpsert::new(JOB_TYPE)).await?;
    fill(&pool, 0, jobs).await?;

    let runs = Arc::new(Mutex::new(HashMap::new()));
    let mut registry = JobRegistry::new();
    registry.register(Work { runs: runs.clone() })?;
    let config = JobsConfig {
        worker_id: "restart-check".to_owned(),
        max_global_concurrency: 8,
        lease_ttl: Duration::from_secs(10),
        // Long enough that work enqueued after the restart is found only through LISTEN.
        poll_interval: Duration::from_secs(60),
        ..JobsConfig::default()
    };
    let supervisor = Supervisor::builder(&pool, config)?
        .with_registry(registry)
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(supervisor.run_until_shutdown(
        async {
            let _ = stopped.await;
        },
        Duration::from_secs(30),
    ));

    let quarter = i64::try_from(jobs / 4)?;
    while count(&probe, "SUCCEEDED").await.unwrap_or(0) < quarter {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = count(&probe, "SUCCEEDED").await.unwrap_or(0);
    println!(
        "restart-check: {jobs} jobs, {before} succeeded; restarting PostgreSQL with `{restart}`"
    );
    let restart_begun = Instant::now();
    let status = Command::new("sh").arg("-c").arg(&restart).status()?;
    if !status.success() {
        return Err(format!("`{restart}` failed: {status}").into());
    }
    println!(
        "server back after {:.1} s",
        restart_begun.elapsed().as_secs_f64()
    );

    let total = i64::try_from(jobs)?;
    let drained = wait_succeeded(&probe, total, Duration::from_secs(120)).await;
    println!(
        "all {jobs} jobs succeeded: {drained} ({:.1} s after the restart)",
        restart_begun.elapsed().as_secs_f64()
    );

    // New work after the restart proves the claim loop (and its LISTEN) came back.
    let after: u32 = 200;
    let enqueued = Instant::now();
    fill(&pool, jobs, after as usize).await?;
    let picked_up = wait_succeeded(&probe, total + i64::from(after), Duration::from_secs(20)).await;
    println!(
        "{after} jobs enqueued after the restart succeeded: {picked_up} ({:.2} s)",
        enqueued.elapsed().as_secs_f64()
    );

    let dead = count(&probe, "DEAD_LETTERED").await.unwrap_or(-1);
    let (ran, repeated) = {
        let runs = runs.lock().unwrap_or_else(PoisonError::into_inner);
        (runs.len(), runs.values().filter(|n| **n > 1).count())
    };
    let alive = !running.is_finished();
    println!(
        "dead-lettered: {dead}; handlers run for {ran} jobs, {repeated} of them more than once"
    );
    println!("supervisor still running: {alive}");
    let _ = stop.send(());
    let shutdown = running.await?;
    println!("shutdown: {shutdown:?}");

    if drained && picked_up && dead == 0 && alive && shutdown.is_ok() {
        println!("restart-check: PASS");
        Ok(())
    } else {
        Err("restart-check: FAIL".into())
    }
}
