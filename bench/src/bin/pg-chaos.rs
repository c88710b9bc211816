//! PostgreSQL chaos: a Supervisor runs 200 workflows while their PostgreSQL server is restarted
//! under it, in fast and in immediate (crash) mode. Passes when every run succeeds with the
//! right result, nothing is dead-lettered, the Supervisor is still running, and jobs enqueued
//! after the last restart are picked up through the re-established `LISTEN` (the poll interval
//! is longer than the wait allowed for them). Prints, per restart, how long after the server
//! was back the first job completed.
//!
//! It restarts the server it works on, so it creates a private cluster of its own,
//! `runledger_chaos` on port 5451 (`--port` to change), with Debian's `pg_createcluster`, and
//! drops it on every exit path; the server of `DATABASE_URL` is never touched. It needs the
//! PostgreSQL server packages and the rights to create a cluster (root, or the postgres user).
//!
//! ```sh
//! cargo run -p runledger-bench --bin pg-chaos -- --runs 200
//! ```
//!
//! Handlers may run more than once around a restart (delivery is at-least-once: a completion
//! lost with the connection is retried after the lease expires); the count is printed.

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use runledger_bench::{BoxError, PrivateCluster, fresh_database};
use runledger_engine::core::jobs::{
    JobCompletion, JobContext, JobFailure, JobHandler, JobType, WorkflowDagBuilder,
};
use runledger_engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, enqueue_jobs, enqueue_workflow_run, upsert_job_definition,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::registry::JobRegistry;
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const DB: &str = "runledger_pg_chaos";
const FETCH: &str = "chaos.fetch";
const SUM: &str = "chaos.sum";
const PING: &str = "chaos.ping";
/// Longer than the wait allowed for jobs enqueued after the last restart: only `LISTEN` can
/// find them in time.
const POLL_INTERVAL: Duration = Duration::from_secs(20);

type Runs = Arc<Mutex<HashMap<String, u32>>>;

fn count_run(runs: &Runs, context: &JobContext) {
    *runs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(context.job_id.to_string())
        .or_insert(0) += 1;
}

/// Waits a while (so that restarts hit running handlers), then returns its payload's value.
struct Fetch {
    runs: Runs,
}

#[async_trait::async_trait]
impl JobHandler for Fetch {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(FETCH)
    }

    async fn execute(
        &self,
        context: JobContext,
        payload: Value,
    ) -> Result<JobCompletion, JobFailure> {
        let pause = payload["pause_ms"].as_u64().unwrap_or(200);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        count_run(&self.runs, &context);
        Ok(JobCompletion::with_output(
            json!({ "value": payload["value"] }),
        ))
    }
}

/// Adds the values its two prerequisites produced.
struct Sum {
    runs: Runs,
}

#[async_trait::async_trait]
impl JobHandler for Sum {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(SUM)
    }

    async fn execute(&self, context: JobContext, _: Value) -> Result<JobCompletion, JobFailure> {
        let mut total = 0;
        for step in ["left", "right"] {
            let output = context
                .prerequisite_output(step)
                .await
                .map_err(|err| JobFailure::retryable(err.code, err.message))?;
            total += output
                .and_then(|o| o["value"].as_i64())
                .ok_or_else(|| JobFailure::terminal("chaos.missing_input", step))?;
        }
        count_run(&self.runs, &context);
        Ok(JobCompletion::with_output(json!({ "sum": total })))
    }
}

/// Does nothing; for the pickup check after the last restart.
struct Ping;

#[async_trait::async_trait]
impl JobHandler for Ping {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(PING)
    }

    async fn execute(&self, _: JobContext, _: Value) -> Result<JobCompletion, JobFailure> {
        Ok(JobCompletion::success())
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

async fn scalar(pool: &PgPool, sql: &'static str) -> Option<i64> {
    sqlx::query_scalar(sql).fetch_one(pool).await.ok()
}

/// Waits until `sql` (a count) reaches `target`, for at most `limit`; probes on a pool that
/// replaces broken connections, so it rides through restarts.
async fn wait_for(pool: &PgPool, sql: &'static str, target: i64, limit: Duration) -> bool {
    let begun = Instant::now();
    while begun.elapsed() < limit {
        if scalar(pool, sql).await.is_some_and(|n| n >= target) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

const LEASED: &str = "SELECT count(*) FROM runledger.job_queue WHERE status = 'LEASED'";

const FINISHED_RUNS: &str = "SELECT count(*) FROM runledger.workflow_runs WHERE status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')";

/// Restarts the server and measures how long after it was back the first job completed.
async fn restart_and_measure(
    probe: &PgPool,
    cluster: &PrivateCluster,
    mode: &str,
) -> Result<Duration, BoxError> {
    let begun = Instant::now();
    cluster.ctl(&format!("restart -m {mode}"))?;
    let back = Instant::now();
    // The server's clock: a completion after this instant is one made after the restart.
    let mut since = None;
    while since.is_none() && back.elapsed() < Duration::from_secs(30) {
        since = sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>("SELECT now()")
            .fetch_one(probe)
            .await
            .ok();
    }
    let since = since.ok_or("the server did not come back")?;
    loop {
        let done: Option<bool> = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runledger.job_queue WHERE finished_at > $1)",
        )
        .bind(since)
        .fetch_one(probe)
        .await
        .ok();
        if done == Some(true) {
            let recovery = back.elapsed();
            println!(
                "restart -m {mode}: server back after {:.2} s, first completion {:.3} s later",
                back.duration_since(begun).as_secs_f64(),
                recovery.as_secs_f64()
            );
            return Ok(recovery);
        }
        if back.elapsed() > Duration::from_secs(60) {
            return Err(format!("no job completed within 60 s of the {mode} restart").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Enqueues the runs numbered `numbers`: two fetches, then their sum (the run's result,
/// 3 * n for run n). Fetches take 0.5 to 2 s, so that restarts meet running handlers.
async fn enqueue_runs(pool: &PgPool, numbers: std::ops::Range<i64>) -> Result<(), BoxError> {
    let meta = json!({});
    let total = json!({});
    for n in numbers {
        let left = json!({ "value": n, "pause_ms": 500 + (n % 7) * 250 });
        let right = json!({ "value": 2 * n, "pause_ms": 500 + (n % 5) * 300 });
        let key = format!("chaos-{n}");
        let run = WorkflowDagBuilder::new("chaos.flow", &meta)
            .idempotency_key(&key)
            .job("left", FETCH, &left)?
            .job("right", FETCH, &right)?
            .job("total", SUM, &total)?
            .after_success("total", ["left", "right"])?
            .result_step("total")?
            .build()?;
        enqueue_workflow_run(pool, &run).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let port: u16 = arg("--port").map_or(Ok(5451), |v| v.parse())?;
    let runs_wanted: i64 = arg("--runs").map_or(Ok(200), |v| v.parse())?;
    let modes = arg("--restarts").unwrap_or_else(|| "fast,immediate,fast,immediate".to_owned());
    let cluster = PrivateCluster::create("runledger_chaos", port, "trust")?;
    let server = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port());
    let db_url = fresh_database(&server, DB).await?;
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
    for job_type in [FETCH, SUM, PING] {
        upsert_job_definition(&pool, &JobDefinitionUpsert::new(job_type).max_attempts(20)).await?;
    }

    let runs: Runs = Arc::new(Mutex::new(HashMap::new()));
    let mut registry = JobRegistry::new();
    registry.register(Fetch { runs: runs.clone() })?;
    registry.register(Sum { runs: runs.clone() })?;
    registry.register(Ping)?;
    let config = JobsConfig {
        worker_id: "pg-chaos".to_owned(),
        max_global_concurrency: 24,
        lease_ttl: Duration::from_secs(10),
        reaper_interval: Duration::from_secs(1),
        reaper_retry_delay: Duration::ZERO,
        poll_interval: POLL_INTERVAL,
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

    // Runs are enqueued in waves, one before each restart and one after the last, so that
    // every restart hits workflows whose steps are running.
    let modes: Vec<&str> = modes.split(',').collect();
    let waves = i64::try_from(modes.len())? + 1;
    println!(
        "pg-chaos: {runs_wanted} workflows (3 steps each) in {waves} waves, restarting the private cluster on port {} with {}",
        cluster.port(),
        modes.join(", ")
    );
    let mut enqueued = 0;
    let mut recoveries = Vec::new();
    for wave in 0..waves {
        let until = runs_wanted * (wave + 1) / waves;
        enqueue_runs(&pool, enqueued..until).await?;
        enqueued = until;
        let Some(mode) = modes.get(usize::try_from(wave)?) else {
            break;
        };
        wait_for(&probe, LEASED, 10, Duration::from_secs(30)).await;
        recoveries.push((*mode, restart_and_measure(&probe, &cluster, mode).await?));
    }
    let in_flight = runs_wanted - scalar(&probe, FINISHED_RUNS).await.unwrap_or(0);
    println!("{in_flight} runs were going after the last restart");

    let finished = wait_for(&probe, FINISHED_RUNS, runs_wanted, Duration::from_secs(120)).await;
    let wrong: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runledger.workflow_runs
         WHERE status <> 'SUCCEEDED'
            OR result IS DISTINCT FROM jsonb_build_object(
                   'sum', 3 * substring(idempotency_key FROM 7)::bigint)",
    )
    .fetch_one(&probe)
    .await?;
    let dead = scalar(
        &probe,
        "SELECT count(*) FROM runledger.job_queue WHERE status = 'DEAD_LETTERED'",
    )
    .await
    .unwrap_or(-1);

    // New work after the restarts proves the claim loop and its LISTEN came back.
    let pings: Vec<Value> = (0..50).map(|n| json!({ "n": n })).collect();
    let requests: Vec<_> = pings.iter().map(|p| JobEnqueue::new(PING, p)).collect();
    let enqueued = Instant::now();
    enqueue_jobs(&pool, &requests).await?;
    let picked_up = wait_for(
        &probe,
        "SELECT count(*) FROM runledger.job_queue WHERE job_type = 'chaos.ping' AND status = 'SUCCEEDED'",
        50,
        POLL_INTERVAL / 2,
    )
    .await;
    println!(
        "50 jobs enqueued after the restarts picked up through LISTEN: {picked_up} ({:.2} s)",
        enqueued.elapsed().as_secs_f64()
    );

    let (ran, repeated) = {
        let runs = runs.lock().unwrap_or_else(PoisonError::into_inner);
        (runs.len(), runs.values().filter(|n| **n > 1).count())
    };
    let alive = !running.is_finished();
    let worst = recoveries.iter().map(|(_, d)| *d).max().unwrap_or_default();
    println!(
        "runs finished: {finished}; wrong or unsuccessful runs: {wrong}; dead-lettered jobs: {dead}"
    );
    println!(
        "handlers ran for {ran} jobs, {repeated} of them more than once; slowest recovery {:.3} s",
        worst.as_secs_f64()
    );
    println!("supervisor still running: {alive}");
    let _ = stop.send(());
    let shutdown = running.await?;
    println!("shutdown: {shutdown:?}");

    if finished && wrong == 0 && dead == 0 && picked_up && alive && shutdown.is_ok() {
        println!("pg-chaos: PASS");
        Ok(())
    } else {
        Err("pg-chaos: FAIL".into())
    }
}
