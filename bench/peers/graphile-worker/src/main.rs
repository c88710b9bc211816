//! graphile_worker draining a backlog of no-op jobs, measured as `runledger-bench --only
//! burn-down` measures Runledger: the jobs are enqueued first (here with `add_jobs`, 1,000 per
//! statement), then the worker starts and the clock runs until none is left.
//!
//! Its settings follow the crate's advice for bursts of short jobs: concurrency 64, a local
//! queue of 100 jobs, completions and failures written in batches every 5 ms, LISTEN/NOTIFY
//! wake-ups with a 500 ms poll. graphile_worker deletes a job when it succeeds, so the backlog
//! is drained when its jobs table is empty. As Runledger's bench counts successes in-process
//! rather than probing the server it measures, this counts the handler's runs and asks the
//! server only once they have all run, until the table is empty (the batched deletes landed).
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres peer-graphile-worker 50000
//! ```
//!
//! It recreates the database `peer_graphile_worker` on the server of `DATABASE_URL` and
//! measures there. Prints one line, `graphile_worker burn-down: <jobs/s> jobs/s`, and exits 1 with a message
//! on any failure.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, TaskHandler, WorkerContext, WorkerOptions,
};
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const BATCH: usize = 1_000;
const CONCURRENCY: usize = 64;
const GIVE_UP_AFTER: Duration = Duration::from_secs(300);
const DATABASE: &str = "peer_graphile_worker";

/// Runs of [`Noop`] so far.
static RAN: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Noop {
    seq: usize,
}

impl TaskHandler for Noop {
    const IDENTIFIER: &'static str = "bench.noop";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        RAN.fetch_add(1, Ordering::Relaxed);
        Ok::<(), String>(())
    }
}

async fn left(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM graphile_worker._private_jobs")
        .fetch_one(pool)
        .await
}

/// Drops and recreates [`DATABASE`] on the server of `url`, and returns its options.
async fn fresh_database(url: &str) -> Result<PgConnectOptions, BoxError> {
    let server: PgConnectOptions = url.parse()?;
    let mut admin = PgConnection::connect_with(&server).await?;
    sqlx::raw_sql("DROP DATABASE IF EXISTS peer_graphile_worker WITH (FORCE)")
        .execute(&mut admin)
        .await?;
    sqlx::raw_sql("CREATE DATABASE peer_graphile_worker")
        .execute(&mut admin)
        .await?;
    admin.close().await?;
    Ok(server.database(DATABASE))
}

async fn burn_down(url: &str, jobs: usize) -> Result<f64, BoxError> {
    let options = fresh_database(url).await?;
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .connect_with(options)
        .await?;
    let worker = WorkerOptions::default()
        .pg_pool(pool.clone())
        .schema("graphile_worker")
        .concurrency(CONCURRENCY)
        .poll_interval(Duration::from_millis(500))
        .complete_job_batch_delay(Duration::from_millis(5))
        .fail_job_batch_delay(Duration::from_millis(5))
        .local_queue(
            LocalQueueConfig::default()
                .with_size(100)
                .with_ttl(Duration::from_secs(60)),
        )
        .define_job::<Noop>()
        .init()
        .await?;
    let worker = Arc::new(worker);
    let utils = worker.create_utils();
    let spec = JobSpec::default();
    for first in (0..jobs).step_by(BATCH) {
        let batch: Vec<(Noop, &JobSpec)> = (first..jobs.min(first + BATCH))
            .map(|seq| (Noop { seq }, &spec))
            .collect();
        utils.add_jobs(&batch).await?;
    }

    let begun = Instant::now();
    let running = Arc::clone(&worker);
    let run = tokio::spawn(async move { running.run().await.map_err(|e| format!("{e:?}")) });
    let mut drained = false;
    while !drained {
        if begun.elapsed() > GIVE_UP_AFTER {
            return Err(format!("jobs were left after {GIVE_UP_AFTER:?}").into());
        }
        if run.is_finished() {
            return Err("the worker stopped before the backlog was drained".into());
        }
        if RAN.load(Ordering::Relaxed) < jobs {
            tokio::time::sleep(Duration::from_millis(5)).await;
        } else {
            drained = left(&pool).await? == 0;
            if !drained {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let elapsed = begun.elapsed();
    run.abort();
    Ok(jobs as f64 / elapsed.as_secs_f64())
}

#[tokio::main]
async fn main() -> ExitCode {
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => {
            eprintln!("error: DATABASE_URL must name a PostgreSQL server");
            return ExitCode::FAILURE;
        }
    };
    let jobs = match std::env::args().nth(1).map(|arg| arg.parse::<usize>()) {
        Some(Ok(jobs)) if jobs > 0 => jobs,
        _ => {
            eprintln!("usage: peer-graphile-worker <jobs>");
            return ExitCode::FAILURE;
        }
    };
    match burn_down(&url, jobs).await {
        Ok(rate) => {
            println!("graphile_worker burn-down: {rate:.0} jobs/s");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
