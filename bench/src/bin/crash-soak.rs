//! Crash soak: several worker processes drain a queue while a driver SIGKILLs one of them every
//! few seconds and starts it again. Passes when every job ends terminal and succeeded (none
//! lost, none dead-lettered) and a job ran more than once only where a worker holding it was
//! killed (delivery is at-least-once: an attempt interrupted by a kill runs again).
//!
//! ```sh
//! cargo run -p runledger-bench --bin crash-soak -- --jobs 20000 --workers 3 --kill-every-ms 2000
//! ```
//!
//! It creates (and drops at the start of each run) the database `runledger_crash_soak` on the
//! server of `DATABASE_URL`, and never touches the server itself. Each handler run is recorded
//! in the table `soak_runs` (job, worker incarnation) before the handler returns, so the
//! driver can tell a rerun caused by a kill from any other.

#![allow(clippy::print_stdout)]

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
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

const DB: &str = "runledger_crash_soak";
const JOB_TYPE: &str = "soak.work";

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

fn number(name: &str, default: u64) -> Result<u64, BoxError> {
    Ok(arg(name).map_or(Ok(default), |v| v.parse())?)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    match arg("--worker") {
        Some(identity) => worker(identity).await,
        None => drive().await,
    }
}

/// Records the run, takes a few milliseconds, succeeds.
struct Work {
    pool: PgPool,
    identity: String,
}

#[async_trait::async_trait]
impl JobHandler for Work {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(JOB_TYPE)
    }

    async fn execute(
        &self,
        context: JobContext,
        payload: Value,
    ) -> Result<JobCompletion, JobFailure> {
        let pause = payload["pause_ms"].as_u64().unwrap_or(5);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        sqlx::query("INSERT INTO soak_runs (job_id, incarnation) VALUES ($1, $2)")
            .bind(context.job_id.0)
            .bind(&self.identity)
            .execute(&self.pool)
            .await
            .map_err(|err| JobFailure::retryable("soak.record_failed", err.to_string()))?;
        Ok(JobCompletion::with_output(json!({ "by": self.identity })))
    }
}

/// One worker process: a Supervisor until SIGTERM (or a SIGKILL from the driver).
async fn worker(identity: String) -> Result<(), BoxError> {
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(&database_url())
        .await?;
    let mut registry = JobRegistry::new();
    registry.register(Work {
        pool: pool.clone(),
        identity: identity.clone(),
    })?;
    let config = JobsConfig {
        worker_id: identity,
        max_global_concurrency: 32,
        lease_ttl: Duration::from_secs(10),
        reaper_interval: Duration::from_secs(1),
        reaper_retry_delay: Duration::ZERO,
        poll_interval: Duration::from_millis(500),
        ..JobsConfig::default()
    };
    let supervisor = Supervisor::builder(&pool, config)?
        .with_registry(registry)
        .build()?;
    let terminate = async {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            term.recv().await;
        }
    };
    supervisor
        .run_until_shutdown(terminate, Duration::from_secs(10))
        .await?;
    Ok(())
}

/// The worker processes, killed when dropped so that no run leaves one behind.
struct Workers {
    database: String,
    slots: Vec<(Child, String)>,
    started: usize,
    killed: BTreeSet<String>,
}

impl Workers {
    fn spawn(&mut self, slot: usize) -> Result<(Child, String), BoxError> {
        self.started += 1;
        let identity = format!("soak-{slot}-{}", self.started);
        let child = Command::new(std::env::current_exe()?)
            .args(["--worker", &identity])
            .env("DATABASE_URL", &self.database)
            .env("RUST_LOG", "off")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok((child, identity))
    }

    /// SIGKILLs the worker in `slot` and starts a new incarnation there.
    fn kill_and_restart(&mut self, slot: usize) -> Result<(), BoxError> {
        let (mut child, identity) = self.slots.remove(slot);
        child.kill()?;
        child.wait()?;
        self.killed.insert(identity);
        let replacement = self.spawn(slot)?;
        self.slots.insert(slot, replacement);
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (child, _) in &mut self.slots {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn count(pool: &PgPool, sql: &'static str) -> Result<i64, BoxError> {
    Ok(sqlx::query_scalar(sql).fetch_one(pool).await?)
}

async fn drive() -> Result<(), BoxError> {
    let jobs = number("--jobs", 20_000)?;
    let workers = number("--workers", 3)? as usize;
    let kill_every = Duration::from_millis(number("--kill-every-ms", 2_000)?);
    let limit = Duration::from_secs(number("--max-seconds", 170)?);
    let db_url = fresh_database(&database_url(), DB).await?;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&db_url)
        .await?;
    runledger_engine::postgres::migrate(&pool).await?;
    // Many attempts: a job whose worker is killed again and again must not run out of them.
    upsert_job_definition(&pool, &JobDefinitionUpsert::new(JOB_TYPE).max_attempts(100)).await?;
    sqlx::query(
        "CREATE TABLE soak_runs (job_id uuid NOT NULL, incarnation text NOT NULL,
                                 at timestamptz NOT NULL DEFAULT clock_timestamp())",
    )
    .execute(&pool)
    .await?;
    let payloads: Vec<Value> = (0..jobs)
        .map(|n| json!({ "pause_ms": 2 + n % 9 }))
        .collect();
    for chunk in payloads.chunks(1_000) {
        let requests: Vec<_> = chunk.iter().map(|p| JobEnqueue::new(JOB_TYPE, p)).collect();
        enqueue_jobs(&pool, &requests).await?;
    }
    println!(
        "crash-soak: {jobs} jobs, {workers} worker processes, one SIGKILLed every {} ms",
        kill_every.as_millis()
    );

    let mut fleet = Workers {
        database: db_url,
        slots: Vec::new(),
        started: 0,
        killed: BTreeSet::new(),
    };
    for slot in 0..workers {
        let worker = fleet.spawn(slot)?;
        fleet.slots.push(worker);
    }
    let begun = Instant::now();
    let mut next_kill = begun + kill_every;
    let mut slot = 0;
    let total = i64::try_from(jobs)?;
    let mut terminal = 0;
    while begun.elapsed() < limit {
        terminal = count(
            &pool,
            "SELECT count(*) FROM runledger.job_queue WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')",
        )
        .await?;
        if terminal == total {
            break;
        }
        // Keep killing while a quarter of the work is left, so the tail drains undisturbed.
        if Instant::now() >= next_kill && terminal < total * 3 / 4 {
            fleet.kill_and_restart(slot % workers)?;
            slot += 1;
            next_kill = Instant::now() + kill_every;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained_in = begun.elapsed();
    let kills = fleet.killed.len();
    for (mut child, _) in fleet.slots.drain(..) {
        let _ = child.kill();
        let _ = child.wait();
    }

    let succeeded = count(
        &pool,
        "SELECT count(*) FROM runledger.job_queue WHERE status = 'SUCCEEDED'",
    )
    .await?;
    let dead = count(
        &pool,
        "SELECT count(*) FROM runledger.job_queue WHERE status = 'DEAD_LETTERED'",
    )
    .await?;
    let lost = total - terminal;
    let runs = count(&pool, "SELECT count(*) FROM soak_runs").await?;
    let never_ran = count(
        &pool,
        "SELECT count(*) FROM runledger.job_queue q WHERE q.status = 'SUCCEEDED'
           AND NOT EXISTS (SELECT 1 FROM soak_runs r WHERE r.job_id = q.id)",
    )
    .await?;
    let killed: Vec<String> = fleet.killed.iter().cloned().collect();
    // Per job: runs by incarnations that were killed, and by incarnations that never were.
    let (repeated_after_kill, repeated_without_kill): (i64, i64) = sqlx::query_as(
        "WITH per_job AS (
             SELECT job_id,
                    count(*) FILTER (WHERE incarnation = ANY($1)) AS by_killed,
                    count(*) FILTER (WHERE NOT incarnation = ANY($1)) AS by_survivors
             FROM soak_runs GROUP BY job_id
         )
         SELECT count(*) FILTER (WHERE by_killed + by_survivors > 1 AND by_survivors <= 1),
                count(*) FILTER (WHERE by_survivors > 1)
         FROM per_job",
    )
    .bind(&killed)
    .fetch_one(&pool)
    .await?;
    // How long an interrupted job waited for its rerun: lease expiry plus the reaper's pass.
    let longest_rerun_wait: f64 = sqlx::query_scalar(
        "SELECT coalesce(max(extract(epoch FROM last_at - first_at)), 0)::float8
         FROM (SELECT min(at) AS first_at, max(at) AS last_at FROM soak_runs
               GROUP BY job_id HAVING count(*) > 1) AS repeated",
    )
    .fetch_one(&pool)
    .await?;
    println!(
        "longest wait between a killed run and its rerun: {longest_rerun_wait:.1} s (lease 10 s, reaper every 1 s)"
    );
    println!(
        "drained in {:.1} s; {kills} SIGKILLs; {succeeded} succeeded, {dead} dead-lettered, {lost} lost",
        drained_in.as_secs_f64()
    );
    println!(
        "handler runs: {runs} for {jobs} jobs; jobs run more than once: {repeated_after_kill} where a worker was killed, {repeated_without_kill} without a kill; succeeded without a recorded run: {never_ran}"
    );
    if lost == 0
        && dead == 0
        && succeeded == total
        && repeated_without_kill == 0
        && never_ran == 0
        && kills > 0
    {
        println!("crash-soak: PASS");
        Ok(())
    } else {
        Err("crash-soak: FAIL".into())
    }
}
