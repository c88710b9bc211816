//! Runledger benchmark harness.
//!
//! Measures, in one run against one database server, a raw-SQL ceiling (the least work a
//! claim-and-complete loop can do on the same table with the same connection count) and
//! Runledger's own figures as ratios to it: burn-down of no-op jobs through the Supervisor,
//! enqueue rates (single and batch), and pickup latency on an idle worker.
//!
//! ```sh
//! cargo run --release -p runledger-bench -- --jobs 20000
//! cargo run --release -p runledger-bench -- --jobs 20000 --finished-jobs 1000000
//! ```
//!
//! `--finished-jobs N` adds burn-down and batch enqueue with N succeeded jobs kept in the
//! tables (the history retention keeps), as ratios to the empty table of the same run.
//!
//! It creates (and drops at the start of each run) the database `runledger_bench` on the
//! server of `DATABASE_URL`.

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use runledger_bench::{BoxError, database_url};
use runledger_engine::core::jobs::{JobCompletion, JobContext, JobFailure, JobHandler, JobType};
use runledger_engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, enqueue_job, enqueue_jobs, upsert_job_definition,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::registry::JobRegistry;
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::mpsc;

const BENCH_DB: &str = "runledger_bench";
const JOB_TYPE: &str = "bench.noop";

/// Throughput and latency of Runledger beside a raw-SQL ceiling, in one run.
#[derive(clap::Parser)]
struct Options {
    /// Jobs per throughput measure.
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// Pool connections of the ceiling and the enqueue tasks.
    #[arg(long, default_value_t = 8)]
    connections: u32,
    /// The Supervisor's concurrency.
    #[arg(long, default_value_t = 1_024)]
    concurrency: u32,
    /// Claim batch size (Supervisor and ceiling).
    #[arg(long, default_value_t = 256)]
    batch: u32,
    /// Pickup latency samples.
    #[arg(long, default_value_t = 200)]
    latency_samples: usize,
    /// Also measure burn-down and enqueue with this many finished (succeeded) jobs kept in the
    /// table, as retention keeps a day of history, against the empty table of the same run.
    #[arg(long, default_value_t = 0)]
    finished_jobs: usize,
}

struct Noop {
    started: Option<mpsc::UnboundedSender<Instant>>,
}

#[async_trait::async_trait]
impl JobHandler for Noop {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(JOB_TYPE)
    }

    async fn execute(&self, _: JobContext, _: Value) -> Result<JobCompletion, JobFailure> {
        if let Some(started) = &self.started {
            let _ = started.send(Instant::now());
        }
        Ok(JobCompletion::success())
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let options: Options = clap::Parser::parse();
    let pool = bench_database(&database_url(), options.connections).await?;

    println!(
        "runledger-bench: {} jobs, {} connections, concurrency {}, batch {}",
        options.jobs, options.connections, options.concurrency, options.batch
    );
    let ceiling = raw_ceiling(&pool, &options).await?;
    let burn_down = supervisor_burn_down(&pool, &options, 0).await?;
    let single = enqueue_single(&pool, &options).await?;
    let batch = enqueue_batch(&pool, &options, 0).await?;
    let (p50, p99) = pickup_latency(&pool, &options).await?;
    let (fan_out, plain) = fan_out_fan_in(&pool, &options).await?;

    println!();
    println!("| measure | value | ratio to ceiling |");
    println!("| --- | ---: | ---: |");
    println!("| raw-SQL ceiling (claim + complete) | {ceiling:.0} jobs/s | 1.00 |");
    println!(
        "| Supervisor burn-down, no-op jobs | {burn_down:.0} jobs/s | {:.2} |",
        burn_down / ceiling
    );
    println!(
        "| enqueue, one job per call ({} tasks) | {single:.0} jobs/s | {:.2} |",
        options.connections,
        single / ceiling
    );
    println!(
        "| enqueue, batches of 1,000 | {batch:.0} jobs/s | {:.2} |",
        batch / ceiling
    );
    println!(
        "| pickup latency p50 / p99 (idle worker) | {:.2} ms / {:.2} ms | |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    println!(
        "| workflow 1 -> {FAN_OUT} -> 1 no-op steps | {:.0} ms | |",
        fan_out.as_secs_f64() * 1e3
    );
    println!(
        "| {} plain no-op jobs, same worker | {:.0} ms | |",
        FAN_OUT + 2,
        plain.as_secs_f64() * 1e3
    );
    if options.finished_jobs > 0 {
        with_history(&pool, &options, burn_down, batch).await?;
    }
    pool.close().await;
    Ok(())
}

/// Burn-down and batch enqueue again, with `--finished-jobs` succeeded jobs (and their attempt
/// rows) in the tables, against the empty-table figures of this run; then the plan of a claim
/// over that history.
async fn with_history(
    pool: &PgPool,
    options: &Options,
    burn_down: f64,
    batch: f64,
) -> Result<(), BoxError> {
    let history = options.finished_jobs;
    let burn_down_history = supervisor_burn_down(pool, options, history).await?;
    let batch_history = enqueue_batch(pool, options, history).await?;
    println!();
    println!("| with {history} finished jobs kept | value | against the empty table |");
    println!("| --- | ---: | ---: |");
    println!(
        "| Supervisor burn-down, no-op jobs | {burn_down_history:.0} jobs/s | {:.2} |",
        burn_down_history / burn_down
    );
    println!(
        "| enqueue, batches of 1,000 | {batch_history:.0} jobs/s | {:.2} |",
        batch_history / batch
    );
    reset(pool).await?;
    keep_finished(pool, history).await?;
    fill(pool, options.jobs).await?;
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
         SELECT id FROM runledger.job_queue
         WHERE status = 'PENDING' AND next_run_at <= now() AND job_type = ANY($1)
         ORDER BY priority DESC, next_run_at, id
         LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(vec![JOB_TYPE.to_owned()])
    .bind(i64::from(options.batch))
    .fetch_all(pool)
    .await?;
    println!("\nclaim selection over the history:\n{}", plan.join("\n"));
    Ok(())
}

/// Inserts `count` succeeded jobs with one attempt each, created and finished over the last
/// 23 hours (inside the default retention, so a pruner keeps them), and refreshes statistics.
async fn keep_finished(pool: &PgPool, count: usize) -> Result<(), BoxError> {
    if count == 0 {
        return Ok(());
    }
    let began = Instant::now();
    let count = i64::try_from(count)?;
    let chunk = 100_000;
    let mut from = 1;
    while from <= count {
        let to = (from + chunk - 1).min(count);
        sqlx::query(
            "WITH made AS (
                 INSERT INTO runledger.job_queue (
                     id, job_type, status, payload, max_attempts, timeout_seconds, attempt,
                     created_at, updated_at, leased_at, started_at, finished_at
                 )
                 SELECT encode(overlay(uuid_send(gen_random_uuid())
                            PLACING substring(int8send(floor(extract(epoch FROM t) * 1000)::bigint) FROM 3)
                            FROM 1 FOR 6), 'hex')::uuid,
                        $4, 'SUCCEEDED', jsonb_build_object('n', g), 5, 300, 1, t, t, t, t, t
                 FROM generate_series($1::bigint, $2::bigint) g,
                      LATERAL (SELECT now() - interval '23 hours' + g * interval '23 hours' / $3 AS t) x
                 RETURNING id, leased_at, finished_at
             )
             INSERT INTO runledger.job_attempts (job_id, attempt, worker_id, outcome, leased_at, started_at, finished_at)
             SELECT id, 1, 'bench-history', 'SUCCEEDED', leased_at, leased_at, finished_at FROM made",
        )
        .bind(from)
        .bind(to)
        .bind(count)
        .bind(JOB_TYPE)
        .execute(pool)
        .await?;
        from = to + 1;
    }
    sqlx::query("VACUUM ANALYZE runledger.job_queue")
        .execute(pool)
        .await?;
    sqlx::query("VACUUM ANALYZE runledger.job_attempts")
        .execute(pool)
        .await?;
    println!(
        "kept {count} finished jobs in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

const FAN_OUT: usize = 1_000;

/// Time to finish a 1 -> 1,000 -> 1 workflow of no-op steps, against 1,002 plain no-op jobs
/// through the same worker, both measured from enqueue to the last completion.
async fn fan_out_fan_in(
    pool: &PgPool,
    options: &Options,
) -> Result<(Duration, Duration), BoxError> {
    use runledger_engine::core::jobs::WorkflowDagBuilder;
    use runledger_engine::postgres::jobs::{WorkflowRunWaitOptions, enqueue_workflow_run_handle};

    reset(pool).await?;
    let mut registry = JobRegistry::new();
    registry.register(Noop { started: None })?;
    let supervisor = Supervisor::builder(pool, bench_config(options, Duration::from_millis(100)))?
        .with_registry(registry)
        .build()?;

    let meta = json!({});
    let payload = json!({});
    let keys: Vec<String> = (0..FAN_OUT).map(|n| format!("mid-{n}")).collect();
    let mut builder = WorkflowDagBuilder::new("bench.fan", &meta)
        .job("start", JOB_TYPE, &payload)?
        .job("end", JOB_TYPE, &payload)?
        .result_step("end")?;
    for key in &keys {
        builder = builder
            .job(key, JOB_TYPE, &payload)?
            .after_success(key, ["start"])?;
    }
    builder = builder.after_success("end", keys.iter().map(String::as_str))?;
    let run = builder.build()?;
    let begun = Instant::now();
    let handle = enqueue_workflow_run_handle(pool, &run).await?;
    handle
        .get_result(WorkflowRunWaitOptions {
            timeout: Some(Duration::from_secs(300)),
            poll_interval: Duration::from_millis(50),
        })
        .await
        .or_else(|err| match err.code() {
            "workflow.result_missing" => Ok(Value::Null),
            _ => Err(err),
        })?;
    let fan_out = begun.elapsed();
    println!("fan-out/fan-in: {:.0} ms", fan_out.as_secs_f64() * 1e3);

    let begun = Instant::now();
    fill(pool, FAN_OUT + 2).await?;
    wait_drained(pool).await?;
    let plain = begun.elapsed();
    println!("plain jobs: {:.0} ms", plain.as_secs_f64() * 1e3);
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await?;
    Ok((fan_out, plain))
}

/// Recreates `runledger_bench`, applies the schema and defines the benchmark's job type.
async fn bench_database(url: &str, connections: u32) -> Result<PgPool, BoxError> {
    let db_url = runledger_bench::fresh_database(url, BENCH_DB).await?;
    let pool = PgPoolOptions::new()
        .max_connections(connections + 2)
        .connect(&db_url)
        .await?;
    runledger_engine::postgres::migrate(&pool).await?;
    upsert_job_definition(&pool, &JobDefinitionUpsert::new(JOB_TYPE)).await?;
    Ok(pool)
}

async fn reset(pool: &PgPool) -> Result<(), BoxError> {
    sqlx::query("TRUNCATE runledger.job_queue, runledger.workflow_runs CASCADE")
        .execute(pool)
        .await?;
    sqlx::query("VACUUM ANALYZE runledger.job_queue")
        .execute(pool)
        .await?;
    Ok(())
}

async fn fill(pool: &PgPool, jobs: usize) -> Result<(), BoxError> {
    let payloads: Vec<Value> = (0..jobs).map(|n| json!({ "n": n })).collect();
    for chunk in payloads.chunks(1_000) {
        let requests: Vec<_> = chunk.iter().map(|p| JobEnqueue::new(JOB_TYPE, p)).collect();
        enqueue_jobs(pool, &requests).await?;
    }
    Ok(())
}

/// The ceiling: each connection loops "claim a batch with SKIP LOCKED, mark it done" with the
/// fewest writes possible on the same table, until the queue is empty.
async fn raw_ceiling(pool: &PgPool, options: &Options) -> Result<f64, BoxError> {
    reset(pool).await?;
    fill(pool, options.jobs).await?;
    let begun = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..options.connections {
        let pool = pool.clone();
        let batch = i64::from(options.batch);
        tasks.push(tokio::spawn(async move {
            let worker_id = format!("ceiling-{worker}");
            loop {
                let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
                    "WITH picked AS (
                         SELECT id FROM runledger.job_queue
                         WHERE status = 'PENDING' AND next_run_at <= now()
                         ORDER BY priority DESC, next_run_at, id
                         LIMIT $1 FOR UPDATE SKIP LOCKED
                     )
                     UPDATE runledger.job_queue q
                     SET status = 'LEASED', attempt = q.attempt + 1, worker_id = $2,
                         lease_expires_at = now() + interval '30 seconds', leased_at = now()
                     FROM picked WHERE q.id = picked.id
                     RETURNING q.id",
                )
                .bind(batch)
                .bind(&worker_id)
                .fetch_all(&pool)
                .await?;
                if ids.is_empty() {
                    return Ok::<_, sqlx::Error>(());
                }
                sqlx::query(
                    "UPDATE runledger.job_queue
                     SET status = 'SUCCEEDED', worker_id = NULL, lease_expires_at = NULL,
                         finished_at = now()
                     WHERE id = ANY($1)",
                )
                .bind(&ids)
                .execute(&pool)
                .await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let rate = options.jobs as f64 / begun.elapsed().as_secs_f64();
    println!("ceiling: {rate:.0} jobs/s");
    Ok(rate)
}

/// Waits until no job is pending or leased, with a cheap probe on the partial indexes so that
/// watching does not slow the run down.
async fn wait_drained(pool: &PgPool) -> Result<(), BoxError> {
    loop {
        let busy: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runledger.job_queue WHERE status IN ('PENDING', 'LEASED'))",
        )
        .fetch_one(pool)
        .await?;
        if !busy {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn bench_config(options: &Options, poll: Duration) -> JobsConfig {
    JobsConfig {
        worker_id: "bench-worker".to_owned(),
        max_global_concurrency: options.concurrency,
        claim_batch_size: options.batch,
        poll_interval: poll,
        ..JobsConfig::default()
    }
}

async fn supervisor_burn_down(
    pool: &PgPool,
    options: &Options,
    history: usize,
) -> Result<f64, BoxError> {
    reset(pool).await?;
    keep_finished(pool, history).await?;
    fill(pool, options.jobs).await?;
    let mut registry = JobRegistry::new();
    registry.register(Noop { started: None })?;
    let begun = Instant::now();
    let supervisor = Supervisor::builder(pool, bench_config(options, Duration::from_millis(100)))?
        .with_registry(registry)
        .build()?;
    wait_drained(pool).await?;
    let rate = options.jobs as f64 / begun.elapsed().as_secs_f64();
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await?;
    println!("burn-down: {rate:.0} jobs/s");
    Ok(rate)
}

async fn enqueue_single(pool: &PgPool, options: &Options) -> Result<f64, BoxError> {
    reset(pool).await?;
    let total = (options.jobs / 4).max(1_000);
    let next = Arc::new(AtomicUsize::new(0));
    let begun = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..options.connections {
        let (pool, next) = (pool.clone(), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let payload = json!({ "n": 1 });
                enqueue_job(&pool, &JobEnqueue::new(JOB_TYPE, &payload)).await?;
            }
            Ok::<_, runledger_engine::postgres::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let rate = total as f64 / begun.elapsed().as_secs_f64();
    println!("enqueue single: {rate:.0} jobs/s");
    Ok(rate)
}

async fn enqueue_batch(pool: &PgPool, options: &Options, history: usize) -> Result<f64, BoxError> {
    reset(pool).await?;
    keep_finished(pool, history).await?;
    let begun = Instant::now();
    fill(pool, options.jobs).await?;
    let rate = options.jobs as f64 / begun.elapsed().as_secs_f64();
    println!("enqueue batch: {rate:.0} jobs/s");
    Ok(rate)
}

/// Enqueue one job at a time on an idle worker with a long poll interval (so only the
/// notification path can be measured) and time enqueue-to-handler-start.
async fn pickup_latency(
    pool: &PgPool,
    options: &Options,
) -> Result<(Duration, Duration), BoxError> {
    reset(pool).await?;
    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let mut registry = JobRegistry::new();
    registry.register(Noop {
        started: Some(started_tx),
    })?;
    let supervisor = Supervisor::builder(pool, bench_config(options, Duration::from_secs(60)))?
        .with_registry(registry)
        .build()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut samples = Vec::with_capacity(options.latency_samples);
    for n in 0..options.latency_samples {
        let payload = json!({ "n": n });
        let before = Instant::now();
        enqueue_job(pool, &JobEnqueue::new(JOB_TYPE, &payload)).await?;
        let started = tokio::time::timeout(Duration::from_secs(10), started_rx.recv())
            .await?
            .ok_or("worker stopped")?;
        samples.push(started.saturating_duration_since(before));
        // Let the completion flush so the worker is idle again.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await?;
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    Ok((at(0.50), at(0.99)))
}
