//! Runledger benchmark harness.
//!
//! Measures, in one run against one database server, a raw-SQL ceiling (the least work a
//! claim-and-complete loop can do on the same table, 4 connections claiming 100 jobs at a time,
//! as the shared peer harness's `raw`) and Runledger's own figures as ratios to it, first at the
//! settings users get (`JobsConfig::default()`), then at the tuned settings named in the
//! output: burn-down of no-op jobs (a `#[job]` drained by `runledger::Worker`, as user code
//! drains it), batch and single enqueue (batch beside a raw `INSERT ...
//! SELECT FROM unnest` into a table with no more than the raw queue's columns), pickup latency
//! on an idle worker, a 1 -> 1,000 -> 1 workflow against 1,002 plain jobs, typed `FanOut`s of
//! 1,000 and 10,000 children against as many plain jobs, burn-down by 1, 2 and
//! 4 worker processes, and a worker process's peak memory while it drains 100,000 jobs.
//!
//! Beside each wall-clock rate it prints the CPU time the measure cost (the benchmark's
//! processes and, when the server runs on this machine, the server's): a shared or busy
//! machine distorts that far less than it distorts wall-clock time.
//!
//! ```sh
//! cargo run --release -p runledger-bench -- --jobs 20000
//! cargo run --release -p runledger-bench -- --jobs 20000 --finished-jobs 1000000
//! bash bench/compare-peers.sh   # beside graphile_worker (bench/peers/)
//! ```
//!
//! `--finished-jobs N` adds burn-down and batch enqueue with N succeeded jobs kept in the
//! tables (the history retention keeps), as ratios to the empty table of the same run.
//!
//! It creates (and drops at the start of each run) the database `runledger_bench` on the
//! server of `DATABASE_URL`.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)]

mod typed_fan_out;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use runledger_bench::cpu::{CpuMeter, CpuSpent, peak_rss};
use runledger_bench::successes::Successes;
use runledger_bench::{BoxError, database_url, quantiles};
use runledger_engine::core::jobs::{JobCompletion, JobContext, JobFailure, JobHandler, JobType};
use runledger_engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, enqueue_job, enqueue_jobs, upsert_job_definition,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::registry::JobRegistry;
use runledger_engine::runtime::supervisor::connections_used;
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

const BENCH_DB: &str = "runledger_bench";
const JOB_TYPE: &str = "bench.noop";

/// Throughput and latency of Runledger beside a raw-SQL ceiling, in one run.
#[derive(clap::Parser)]
struct Options {
    /// Jobs per throughput measure.
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// Connections of the raw ceiling, each looping claim + complete.
    #[arg(long, default_value_t = 4)]
    ceiling_connections: u32,
    /// Jobs the raw ceiling claims at a time.
    #[arg(long, default_value_t = 100)]
    ceiling_batch: u32,
    /// Concurrency of the tuned configuration.
    #[arg(long, default_value_t = 1_024)]
    tuned_concurrency: u32,
    /// Claim batch of the tuned configuration.
    #[arg(long, default_value_t = 256)]
    tuned_batch: u32,
    /// Pickup latency samples.
    #[arg(long, default_value_t = 200)]
    latency_samples: usize,
    /// Worker process counts of the scale-out measure (default settings in each).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    scale_out: Vec<usize>,
    /// Jobs the worker processes of the scale-out measure drain together: enough that opening
    /// each process's connections (about 13 ms of server time each: TLS, backend start, the
    /// first planning of the hot statements) is a small part of the drain, as it is in a worker
    /// that runs for hours.
    #[arg(long, default_value_t = 100_000)]
    scale_out_jobs: usize,
    /// Jobs a worker process drains while its peak memory is measured (0 skips it).
    #[arg(long, default_value_t = 100_000)]
    rss_jobs: usize,
    /// Also measure burn-down and enqueue with this many finished (succeeded) jobs kept in the
    /// table, as retention keeps a day of history, against the empty table of the same run.
    #[arg(long, default_value_t = 0)]
    finished_jobs: usize,
    /// Middle steps of the `1 -> N -> 1` workflow measures (engine steps, against the same
    /// number of plain jobs).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    workflow_width: Vec<usize>,
    /// Children of the typed fan-out measures (a `#[workflow]` with a `FanOut` step, against
    /// the same number of plain jobs).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    typed_fan_out: Vec<u32>,
    /// Children of the large fan-out run by a worker process whose peak memory is measured
    /// (its join reads them in pages, `Chunks`); 0 skips it.
    #[arg(long, default_value_t = 100_000)]
    large_fan_out: u32,
    /// Run one measure alone (with its ceiling), for profiling: `burn-down` (the ceiling and
    /// burn-down at the defaults), `workflow`, `typed-fan-out`, `large-fan-out` or `pickup`.
    #[arg(long, value_enum)]
    only: Option<Only>,
    /// Run as a worker process of the scale-out and memory measures (internal).
    #[arg(long, hide = true)]
    worker_process: Option<String>,
}

/// A measure run alone with `--only`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Only {
    BurnDown,
    Workflow,
    TypedFanOut,
    LargeFanOut,
    Pickup,
    ScaleOut,
}

/// Runs one measure alone and prints its figure.
async fn run_only(
    pool: &PgPool,
    meter: &CpuMeter,
    options: &Options,
    only: Only,
) -> Result<(), BoxError> {
    match only {
        Only::BurnDown => {
            let ceiling = raw_ceiling(pool, meter, options).await?;
            let rate = burn_down(pool, meter, options.jobs, Settings::Default, 0).await?;
            println!("burn-down at defaults: {}", rate.row(&ceiling));
        }
        Only::Workflow => {
            for &width in &options.workflow_width {
                let (fan_out, plain) = fan_out_fan_in(pool, width).await?;
                println!(
                    "workflow 1 -> {width} -> 1: {:.2} x the plain jobs (medians of {FAN_OUT_ROUNDS} rounds)",
                    fan_out.as_secs_f64() / plain.as_secs_f64()
                );
            }
        }
        Only::LargeFanOut => {
            typed_fan_out::large_fan_out(pool, options.large_fan_out).await?;
        }
        Only::TypedFanOut => {
            for &children in &options.typed_fan_out {
                let (fan_out, plain) = typed_fan_out::typed_fan_out(pool, children).await?;
                println!(
                    "typed fan-out of {children}: {:.2} x the plain jobs (medians)",
                    fan_out.as_secs_f64() / plain.as_secs_f64()
                );
            }
        }
        Only::Pickup => {
            let pickup = pickup_latency(pool, options).await?;
            println!("pickup p50 / p99: {}", pickup.describe());
        }
        Only::ScaleOut => {
            for &processes in &options.scale_out {
                scale_out(pool, meter, options, processes).await?;
            }
        }
    }
    Ok(())
}

/// A measured configuration: the settings users get, or the tuned ones.
#[derive(Clone, Copy)]
enum Settings {
    Default,
    Tuned { concurrency: u32, batch: u32 },
}

impl Settings {
    fn config(self, worker_id: &str, poll: Duration) -> JobsConfig {
        let mut config = JobsConfig {
            worker_id: worker_id.to_owned(),
            poll_interval: poll,
            ..JobsConfig::default()
        };
        if let Self::Tuned { concurrency, batch } = self {
            config.max_global_concurrency = concurrency;
            config.claim_batch_size = batch;
        }
        config
    }

    fn name(self) -> String {
        match self {
            Self::Default => {
                let defaults = JobsConfig::default();
                format!(
                    "defaults (concurrency {}, claim batch {})",
                    defaults.max_global_concurrency, defaults.claim_batch_size
                )
            }
            Self::Tuned { concurrency, batch } => {
                format!("tuned (concurrency {concurrency}, claim batch {batch})")
            }
        }
    }
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

/// One throughput figure: its rate and what it cost in CPU time.
#[derive(Clone, Copy)]
struct Rate {
    jobs_per_second: f64,
    jobs_per_cpu_second: f64,
}

impl Rate {
    fn measured(jobs: usize, elapsed: Duration, cpu: CpuSpent) -> Self {
        let rate = Self {
            jobs_per_second: jobs as f64 / elapsed.as_secs_f64(),
            jobs_per_cpu_second: cpu.jobs_per_cpu_second(jobs),
        };
        println!(
            "  {jobs} jobs in {:.2} s: {:.0} jobs/s; CPU {} = {:.0} jobs per CPU second",
            elapsed.as_secs_f64(),
            rate.jobs_per_second,
            cpu.describe(),
            rate.jobs_per_cpu_second
        );
        rate
    }

    /// "12,345 jobs/s | 0.52 | 0.61" against `ceiling`.
    fn row(&self, ceiling: &Rate) -> String {
        format!(
            "{:.0} jobs/s | {:.2} | {:.2}",
            self.jobs_per_second,
            self.jobs_per_second / ceiling.jobs_per_second,
            self.jobs_per_cpu_second / ceiling.jobs_per_cpu_second
        )
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let options: Options = clap::Parser::parse();
    if let Some(settings) = &options.worker_process {
        return worker_process(settings).await;
    }
    let pool = bench_database(&database_url()).await?;
    let meter = CpuMeter::new(&pool).await;
    if let Some(only) = options.only {
        run_only(&pool, &meter, &options, only).await?;
        pool.close().await;
        return Ok(());
    }
    let tuned = Settings::Tuned {
        concurrency: options.tuned_concurrency,
        batch: options.tuned_batch,
    };
    println!(
        "runledger-bench: {} jobs; ceiling: {} connections claiming {}; Runledger at {}, then {}",
        options.jobs,
        options.ceiling_connections,
        options.ceiling_batch,
        Settings::Default.name(),
        tuned.name()
    );

    let ceiling = raw_ceiling(&pool, &meter, &options).await?;
    let burn_default = burn_down(&pool, &meter, options.jobs, Settings::Default, 0).await?;
    let burn_tuned = burn_down(&pool, &meter, options.jobs, tuned, 0).await?;
    let raw_enqueue = raw_batch_enqueue(&pool, &meter, options.jobs).await?;
    let batch = batch_enqueue(&pool, &meter, options.jobs, 0).await?;
    let single = single_enqueue(&pool, &meter, options.jobs).await?;
    let pickup = pickup_latency(&pool, &options).await?;
    let mut workflows = Vec::new();
    for &width in &options.workflow_width {
        workflows.push((width, fan_out_fan_in(&pool, width).await?));
    }
    let mut typed = Vec::new();
    for &children in &options.typed_fan_out {
        typed.push((
            children,
            typed_fan_out::typed_fan_out(&pool, children).await?,
        ));
    }
    let large = if options.large_fan_out > 0 {
        Some(typed_fan_out::large_fan_out(&pool, options.large_fan_out).await?)
    } else {
        None
    };
    let mut scale = Vec::new();
    for &processes in &options.scale_out {
        scale.push((
            processes,
            scale_out(&pool, &meter, &options, processes).await?,
        ));
    }
    let rss = if options.rss_jobs > 0 {
        Some(worker_memory(&pool, &options).await?)
    } else {
        None
    };

    println!();
    println!("| measure | value | ratio to its ceiling | CPU-efficiency ratio |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| raw-SQL ceiling (claim + complete) | {} |",
        ceiling.row(&ceiling)
    );
    println!(
        "| burn-down, no-op jobs, {} | {} |",
        Settings::Default.name(),
        burn_default.row(&ceiling)
    );
    println!(
        "| burn-down, no-op jobs, {} | {} |",
        tuned.name(),
        burn_tuned.row(&ceiling)
    );
    println!(
        "| raw batch enqueue (INSERT ... FROM unnest, 1,000 per statement) | {} |",
        raw_enqueue.row(&raw_enqueue)
    );
    println!(
        "| enqueue, batches of 1,000 (against the raw batch enqueue) | {} |",
        batch.row(&raw_enqueue)
    );
    println!(
        "| enqueue, one job per call, 4 tasks (against the raw batch enqueue) | {} |",
        single.row(&raw_enqueue)
    );
    println!(
        "| pickup latency p50 / p99, idle worker, defaults | {} | | |",
        pickup.describe()
    );
    for (width, (fan_out, plain)) in &workflows {
        println!(
            "| workflow 1 -> {width} -> 1 no-op steps, defaults, median of {FAN_OUT_ROUNDS} | {:.0} ms | {:.2} x {} plain jobs ({:.0} ms) | |",
            fan_out.as_secs_f64() * 1e3,
            fan_out.as_secs_f64() / plain.as_secs_f64(),
            width + 2,
            plain.as_secs_f64() * 1e3
        );
    }
    for (children, (fan_out, plain)) in &typed {
        println!(
            "| typed `FanOut` of {children} children (`#[workflow]`, `#[output]` join), defaults, median of 5 | {:.0} ms | {:.2} x {} plain jobs ({:.0} ms) | |",
            fan_out.as_secs_f64() * 1e3,
            fan_out.as_secs_f64() / plain.as_secs_f64(),
            children + 2,
            plain.as_secs_f64() * 1e3
        );
    }
    if let Some(large) = &large {
        println!("| {} | | | |", large.describe());
    }
    if let Some((first, reference)) = scale.first() {
        for (processes, rate) in &scale {
            println!(
                "| burn-down of {} jobs by {processes} worker process(es), defaults, against {first} process(es) | {} |",
                options.scale_out_jobs,
                rate.row(reference)
            );
        }
    }
    if let Some(rss) = rss {
        println!(
            "| peak memory (VmHWM) of a worker process draining {} jobs, defaults | {:.1} MiB | | |",
            options.rss_jobs,
            rss as f64 / (1024.0 * 1024.0)
        );
    }
    if options.finished_jobs > 0 {
        with_history(&pool, &meter, &options, &burn_default, &batch).await?;
    }
    pool.close().await;
    Ok(())
}

/// Recreates `runledger_bench`, applies the schema and defines the benchmark's job type.
async fn bench_database(url: &str) -> Result<PgPool, BoxError> {
    let db_url = runledger_bench::fresh_database(url, BENCH_DB).await?;
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&db_url)
        .await?;
    runledger_engine::postgres::migrate(&pool).await?;
    upsert_job_definition(&pool, &JobDefinitionUpsert::new(JOB_TYPE)).await?;
    Ok(pool)
}

/// A pool for a worker with `config`, sized as `runledger::Worker::from_env` sizes its own:
/// the loops' connections plus one per handler slot, at most 50.
async fn worker_pool(pool: &PgPool, config: &JobsConfig) -> Result<PgPool, BoxError> {
    let loops = connections_used(config);
    let size = loops
        .saturating_add(config.max_global_concurrency)
        .min(50)
        .max(loops);
    Ok(PgPoolOptions::new()
        .max_connections(size)
        .connect_with(pool.connect_options().as_ref().clone())
        .await?)
}

async fn reset(pool: &PgPool) -> Result<(), BoxError> {
    sqlx::query(
        "TRUNCATE runledger.job_queue, runledger.job_attempts, runledger.workflow_runs CASCADE",
    )
    .execute(pool)
    .await?;
    sqlx::query("VACUUM ANALYZE runledger.job_queue")
        .execute(pool)
        .await?;
    sqlx::query("CHECKPOINT").execute(pool).await?;
    Ok(())
}

/// Enqueues `jobs` no-op jobs in batches of 1,000, then refreshes the planner's statistics, as
/// autovacuum would have for a table that holds a backlog (a plan made while the statistics
/// still describe the empty table would be the wrong one).
async fn fill(pool: &PgPool, jobs: usize) -> Result<(), BoxError> {
    enqueue_batches(pool, jobs).await?;
    sqlx::query("ANALYZE runledger.job_queue")
        .execute(pool)
        .await?;
    Ok(())
}

async fn enqueue_batches(pool: &PgPool, jobs: usize) -> Result<(), BoxError> {
    let payloads: Vec<Value> = (0..jobs).map(|n| json!({ "n": n })).collect();
    for chunk in payloads.chunks(1_000) {
        let requests: Vec<_> = chunk.iter().map(|p| JobEnqueue::new(JOB_TYPE, p)).collect();
        enqueue_jobs(pool, &requests).await?;
    }
    Ok(())
}

/// The ceiling: each connection loops "claim a batch with SKIP LOCKED, mark it done" with the
/// fewest writes possible on the same table, until the queue is empty.
async fn raw_ceiling(pool: &PgPool, meter: &CpuMeter, options: &Options) -> Result<Rate, BoxError> {
    reset(pool).await?;
    fill(pool, options.jobs).await?;
    let (begun, cpu) = (Instant::now(), meter.sample());
    let mut tasks = Vec::new();
    for worker in 0..options.ceiling_connections {
        let pool = pool.clone();
        let batch = i64::from(options.ceiling_batch);
        tasks.push(tokio::spawn(async move {
            let worker_id = format!("ceiling-{worker}");
            loop {
                let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
                    "WITH picked AS (
                         SELECT id FROM runledger.job_queue
                         WHERE status = 'PENDING' AND NOT gated AND next_run_at <= now()
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
    let rate = Rate::measured(options.jobs, begun.elapsed(), meter.sample().since(&cpu));
    println!("ceiling: {:.0} jobs/s", rate.jobs_per_second);
    Ok(rate)
}

/// Whether no job is pending or leased: what a wait for successes asks when their count stands
/// still.
async fn drained(pool: &PgPool) -> Result<bool, BoxError> {
    // Each probe reads the head of one partial index (claimable, gated, leased). A probe of
    // `status IN ('PENDING', 'LEASED')`, planned from the statistics of the filled table,
    // scanned the whole table: several milliseconds of the server every 5 ms, taken from the
    // worker being measured. The ORDER BY of the claim index keeps each probe on it.
    let busy: bool = sqlx::query_scalar(
        "SELECT (SELECT id FROM runledger.job_queue WHERE status = 'PENDING' AND NOT gated
                 ORDER BY priority DESC, next_run_at, id LIMIT 1) IS NOT NULL
             OR (SELECT id FROM runledger.job_queue WHERE status = 'PENDING' AND gated
                 ORDER BY priority DESC, next_run_at, id LIMIT 1) IS NOT NULL
             OR (SELECT id FROM runledger.job_queue WHERE status = 'LEASED'
                 ORDER BY lease_expires_at LIMIT 1) IS NOT NULL",
    )
    .fetch_one(pool)
    .await?;
    Ok(!busy)
}

/// A `#[job]` with no work: what the burn-down drains through `runledger::Worker`, as user
/// code would. Its payload, `{"n": ..}`, is the one `enqueue_batches` writes.
#[runledger::job(name = "bench.noop")]
async fn typed_noop(n: u64) -> Result<(), runledger::JobError> {
    let _ = n;
    Ok(())
}

/// Starts a `runledger::Worker` running every `#[job]` of this binary with `config` on
/// `worker_pool`, its successes counted by `successes` (the schema is already in place).
async fn start_typed_worker(
    worker_pool: &PgPool,
    config: JobsConfig,
    successes: &Successes,
) -> Result<runledger::RunningWorker, BoxError> {
    let worker = runledger::Worker::builder(worker_pool)
        .config(config)
        .schema(runledger::SchemaMode::Skip)
        .observer(successes.clone())
        .build()?;
    Ok(worker.start().await?)
}

/// A `runledger::Worker` with `settings` on its own pool drains `jobs` no-op jobs through the
/// typed API (after `history` finished jobs were put in the tables).
async fn burn_down(
    pool: &PgPool,
    meter: &CpuMeter,
    jobs: usize,
    settings: Settings,
    history: usize,
) -> Result<Rate, BoxError> {
    reset(pool).await?;
    keep_finished(pool, history).await?;
    fill(pool, jobs).await?;
    let config = settings.config("bench-worker", Duration::from_millis(100));
    let worker_pool = worker_pool(pool, &config).await?;
    let successes = Successes::default();
    let (begun, cpu) = (Instant::now(), meter.sample());
    let running = start_typed_worker(&worker_pool, config, &successes).await?;
    successes.wait_for(jobs, || drained(pool)).await?;
    let rate = Rate::measured(jobs, begun.elapsed(), meter.sample().since(&cpu));
    running.shutdown().await?;
    worker_pool.close().await;
    println!(
        "burn-down at {}: {:.0} jobs/s",
        settings.name(),
        rate.jobs_per_second
    );
    Ok(rate)
}

/// The raw enqueue ceiling: `INSERT ... SELECT FROM unnest` of 1,000 payloads at a time into a
/// table with the raw queue's columns and its one partial index.
async fn raw_batch_enqueue(pool: &PgPool, meter: &CpuMeter, jobs: usize) -> Result<Rate, BoxError> {
    sqlx::raw_sql(
        "DROP TABLE IF EXISTS bench_raw_jobs;
         CREATE TABLE bench_raw_jobs (
             id bigserial PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL,
             status text NOT NULL DEFAULT 'pending', priority smallint NOT NULL DEFAULT 0,
             run_at timestamptz NOT NULL DEFAULT now(), attempts int NOT NULL DEFAULT 0,
             lease_owner text, lease_expires_at timestamptz,
             created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz
         );
         CREATE INDEX bench_raw_jobs_pending ON bench_raw_jobs (priority, run_at, id)
             WHERE status = 'pending';
         CHECKPOINT;",
    )
    .execute(pool)
    .await?;
    let payloads: Vec<Value> = (0..jobs).map(|n| json!({ "n": n })).collect();
    let (begun, cpu) = (Instant::now(), meter.sample());
    for chunk in payloads.chunks(1_000) {
        sqlx::query(
            "INSERT INTO bench_raw_jobs (kind, payload) SELECT $1, p FROM unnest($2::jsonb[]) p",
        )
        .bind(JOB_TYPE)
        .bind(chunk)
        .execute(pool)
        .await?;
    }
    let rate = Rate::measured(jobs, begun.elapsed(), meter.sample().since(&cpu));
    sqlx::query("DROP TABLE bench_raw_jobs")
        .execute(pool)
        .await?;
    println!("raw batch enqueue: {:.0} jobs/s", rate.jobs_per_second);
    Ok(rate)
}

async fn batch_enqueue(
    pool: &PgPool,
    meter: &CpuMeter,
    jobs: usize,
    history: usize,
) -> Result<Rate, BoxError> {
    reset(pool).await?;
    keep_finished(pool, history).await?;
    let (begun, cpu) = (Instant::now(), meter.sample());
    enqueue_batches(pool, jobs).await?;
    let rate = Rate::measured(jobs, begun.elapsed(), meter.sample().since(&cpu));
    println!("enqueue batch: {:.0} jobs/s", rate.jobs_per_second);
    Ok(rate)
}

async fn single_enqueue(pool: &PgPool, meter: &CpuMeter, jobs: usize) -> Result<Rate, BoxError> {
    reset(pool).await?;
    let total = (jobs / 4).max(1_000);
    let next = Arc::new(AtomicUsize::new(0));
    let (begun, cpu) = (Instant::now(), meter.sample());
    let mut tasks = Vec::new();
    for _ in 0..4 {
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
    let rate = Rate::measured(total, begun.elapsed(), meter.sample().since(&cpu));
    println!("enqueue single: {:.0} jobs/s", rate.jobs_per_second);
    Ok(rate)
}

/// Pickup latency percentiles on an idle worker, and how much of the median the enqueue call
/// itself took.
struct Pickup {
    p50: Duration,
    p99: Duration,
    /// Median time of the enqueue call alone (taking a pooled connection, the insert and its
    /// commit); the rest of a pickup is the notification, the claim and the handler's start.
    enqueue_p50: Duration,
}

impl Pickup {
    fn describe(&self) -> String {
        format!(
            "{:.2} ms / {:.2} ms (the enqueue call's median {:.2} ms)",
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.enqueue_p50.as_secs_f64() * 1e3
        )
    }
}

/// Enqueue one job at a time on an idle worker at the default settings, with a long poll
/// interval (so only the notification path is measured), and time enqueue-to-handler-start.
async fn pickup_latency(pool: &PgPool, options: &Options) -> Result<Pickup, BoxError> {
    reset(pool).await?;
    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let mut registry = JobRegistry::new();
    registry.register(Noop {
        started: Some(started_tx),
    })?;
    let config = Settings::Default.config("bench-pickup", Duration::from_secs(60));
    let worker_pool = worker_pool(pool, &config).await?;
    let supervisor = Supervisor::builder(&worker_pool, config)?
        .with_registry(registry)
        .build()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut samples = Vec::with_capacity(options.latency_samples);
    let mut enqueues = Vec::with_capacity(options.latency_samples);
    for n in 0..options.latency_samples {
        let payload = json!({ "n": n });
        let before = Instant::now();
        enqueue_job(pool, &JobEnqueue::new(JOB_TYPE, &payload)).await?;
        enqueues.push(before.elapsed());
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
    worker_pool.close().await;
    let [p50, p99] = quantiles(samples, [0.50, 0.99]);
    let [enqueue_p50] = quantiles(enqueues, [0.50]);
    Ok(Pickup {
        p50,
        p99,
        enqueue_p50,
    })
}

/// The middle steps' keys of a fan-out of `width` steps.
fn middle_keys(width: usize) -> Vec<String> {
    (0..width).map(|n| format!("mid-{n}")).collect()
}

/// A `start -> one step per key -> end` workflow of no-op steps whose result is the last step.
fn fan_out_run<'a>(
    keys: &'a [String],
    empty: &'a Value,
) -> Result<runledger_engine::core::jobs::WorkflowRunEnqueue<'a>, BoxError> {
    use runledger_engine::core::jobs::WorkflowDagBuilder;

    let mut builder = WorkflowDagBuilder::new("bench.fan", empty)
        .job("start", JOB_TYPE, empty)?
        .job("end", JOB_TYPE, empty)?
        .result_step("end")?;
    for key in keys {
        builder = builder
            .job(key, JOB_TYPE, empty)?
            .after_success(key, ["start"])?;
    }
    builder = builder.after_success("end", keys.iter().map(String::as_str))?;
    Ok(builder.build()?)
}

/// Runs a workflow to its end; returns the time from enqueue to the result, and of it the
/// enqueue's own.
async fn run_workflow(
    pool: &PgPool,
    run: &runledger_engine::core::jobs::WorkflowRunEnqueue<'_>,
) -> Result<(Duration, Duration), BoxError> {
    use runledger_engine::postgres::jobs::{WorkflowRunWaitOptions, enqueue_workflow_run_handle};

    let begun = Instant::now();
    let handle = enqueue_workflow_run_handle(pool, run).await?;
    let enqueued = begun.elapsed();
    handle
        .get_result(WorkflowRunWaitOptions {
            timeout: Some(Duration::from_secs(300)),
            poll_interval: Duration::from_millis(50),
        })
        .await
        .or_else(|err| match err.code() {
            // The no-op result step stores no output; the run succeeded all the same.
            "workflow.result_missing" => Ok(Value::Null),
            _ => Err(err),
        })?;
    Ok((begun.elapsed(), enqueued))
}

/// Waits for the connections just dropped (a result wait's listener) to be back in their
/// pool: sqlx returns them from background tasks, and a timed phase that asks before that gets
/// a new connection instead (its acquire took about 90 ms on the 2-core machine of
/// docs/benchmarks.md), which measures the pool, not the queue.
async fn settle_connections() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Rounds of the workflow measure: each times the workflow, then the plain jobs.
const FAN_OUT_ROUNDS: usize = 5;

/// Untimed workflows that warm the worker's connections before the rounds.
const FAN_OUT_WARM_UPS: usize = 3;

/// Time to finish a 1 -> `width` -> 1 workflow of no-op steps, against `width` + 2 plain no-op jobs
/// through the same worker at the default settings, both from enqueue to the last completion:
/// the median of [`FAN_OUT_ROUNDS`] rounds, each timing one of both (one sample of each swung
/// the ratio from 1.3 to 3.7 on the 2-core machine of docs/benchmarks.md).
async fn fan_out_fan_in(pool: &PgPool, width: usize) -> Result<(Duration, Duration), BoxError> {
    reset(pool).await?;
    let mut registry = JobRegistry::new();
    registry.register(Noop { started: None })?;
    let config = Settings::Default.config("bench-fan", Duration::from_millis(100));
    let worker_pool = worker_pool(pool, &config).await?;
    let successes = Successes::default();
    let supervisor = Supervisor::builder(&worker_pool, config)?
        .with_registry(registry)
        .with_job_lifecycle_observer(successes.clone())
        .build()?;

    let empty = json!({});
    let keys = middle_keys(width);
    let run = fan_out_run(&keys, &empty)?;
    // Every job the worker runs here succeeds: the successes expected so far.
    let mut expected = 0;
    // Both timings start from a warm worker: its connections open and the statements of both
    // paths planned. Each connection plans a function's statements the first time it runs
    // them, and the completer's batches take whichever pooled connection is free, so one small
    // warm-up workflow left most connections cold: the first measured round then took 1.3 to
    // 1.7 times the later ones. [`FAN_OUT_WARM_UPS`] whole workflows run first,
    // spreading those plans over the pool.
    enqueue_batches(pool, 200).await?;
    expected += 200;
    successes.wait_for(expected, || drained(pool)).await?;
    for _ in 0..FAN_OUT_WARM_UPS {
        run_workflow(pool, &run).await?;
        expected += width + 2;
    }
    let (mut fan_outs, mut plains) = (Vec::new(), Vec::new());
    for _ in 0..FAN_OUT_ROUNDS {
        settle_connections().await;
        let (fan_out, enqueue) = run_workflow(pool, &run).await?;
        expected += width + 2;
        println!(
            "fan-out/fan-in: {:.0} ms (its enqueue {:.0} ms)",
            fan_out.as_secs_f64() * 1e3,
            enqueue.as_secs_f64() * 1e3
        );
        settle_connections().await;
        let begun = Instant::now();
        enqueue_batches(pool, width + 2).await?;
        expected += width + 2;
        successes.wait_for(expected, || drained(pool)).await?;
        let plain = begun.elapsed();
        println!("plain jobs: {:.0} ms", plain.as_secs_f64() * 1e3);
        fan_outs.push(fan_out);
        plains.push(plain);
    }
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await?;
    worker_pool.close().await;
    let [fan_out] = quantiles(fan_outs, [0.5]);
    let [plain] = quantiles(plains, [0.5]);
    Ok((fan_out, plain))
}

/// `processes` worker processes at the default settings drain `--scale-out-jobs` jobs together.
/// Each starts its Supervisor when told to, so that process start-up is not timed; opening the
/// pool's connections is.
async fn scale_out(
    pool: &PgPool,
    meter: &CpuMeter,
    options: &Options,
    processes: usize,
) -> Result<Rate, BoxError> {
    let jobs = options.scale_out_jobs;
    reset(pool).await?;
    fill(pool, jobs).await?;
    let workers = start_worker_processes(processes, jobs).await?;
    let successes = Successes::default();
    let (begun, cpu) = (Instant::now(), meter.sample());
    let workers = go(workers, &successes).await?;
    successes.wait_for(jobs, || drained(pool)).await?;
    let elapsed = begun.elapsed();
    finish(workers).await?;
    let rate = Rate::measured(jobs, elapsed, meter.sample().since(&cpu));
    println!(
        "burn-down by {processes} worker process(es): {:.0} jobs/s",
        rate.jobs_per_second
    );
    Ok(rate)
}

/// A worker process drains `--rss-jobs` jobs at the default settings and reports its peak
/// resident memory.
async fn worker_memory(pool: &PgPool, options: &Options) -> Result<u64, BoxError> {
    reset(pool).await?;
    fill(pool, options.rss_jobs).await?;
    let successes = Successes::default();
    let workers = go(
        start_worker_processes(1, options.rss_jobs).await?,
        &successes,
    )
    .await?;
    successes
        .wait_for(options.rss_jobs, || drained(pool))
        .await?;
    let rss = peak_rss_reported(&finish(workers).await?)?;
    println!(
        "worker process peak memory: {:.1} MiB",
        rss as f64 / (1024.0 * 1024.0)
    );
    Ok(rss)
}

struct WorkerProcess {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

/// Starts `count` worker processes and waits until each says it is connected.
async fn start_worker_processes(count: usize, jobs: usize) -> Result<Vec<WorkerProcess>, BoxError> {
    let exe = std::env::current_exe()?;
    let mut workers = Vec::with_capacity(count);
    for n in 0..count {
        let mut child = tokio::process::Command::new(&exe)
            .args(["--worker-process", &format!("bench-process-{n}")])
            .args(["--jobs", &jobs.to_string()])
            .env("DATABASE_URL", database_url_of_bench())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        match lines.next_line().await? {
            Some(line) if line == "READY" => {}
            other => return Err(format!("worker process {n} did not start: {other:?}").into()),
        }
        workers.push(WorkerProcess { child, lines });
    }
    Ok(workers)
}

/// A worker process told to start, and the task reading what it prints.
struct RunningWorker {
    child: tokio::process::Child,
    /// Its lines other than its success counts, once its output ends.
    reports: tokio::task::JoinHandle<Result<Vec<String>, std::io::Error>>,
}

/// Tells every worker process to start its Supervisor. The successes each reports committed
/// add up in `successes`.
async fn go(
    workers: Vec<WorkerProcess>,
    successes: &Successes,
) -> Result<Vec<RunningWorker>, BoxError> {
    let mut running = Vec::with_capacity(workers.len());
    for WorkerProcess {
        mut child,
        mut lines,
    } in workers
    {
        let stdin = child.stdin.as_mut().ok_or("no stdin")?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
        let successes = successes.clone();
        let reports = tokio::spawn(async move {
            let (mut counted, mut reports) = (0, Vec::new());
            while let Some(line) = lines.next_line().await? {
                match line.strip_prefix(SUCCEEDED).map(str::parse::<usize>) {
                    Some(Ok(total)) => {
                        successes.add(total.saturating_sub(counted));
                        counted = counted.max(total);
                    }
                    _ => reports.push(line),
                }
            }
            Ok(reports)
        });
        running.push(RunningWorker { child, reports });
    }
    Ok(running)
}

/// Closes every worker process's input (they shut down) and collects what they printed.
async fn finish(workers: Vec<RunningWorker>) -> Result<Vec<String>, BoxError> {
    let mut reports = Vec::new();
    for mut worker in workers {
        drop(worker.child.stdin.take());
        reports.extend(worker.reports.await??);
        let status = worker.child.wait().await?;
        if !status.success() {
            return Err(format!("a worker process failed: {status}").into());
        }
    }
    Ok(reports)
}

/// The peak memory a worker process reported as it ended.
fn peak_rss_reported(reports: &[String]) -> Result<u64, BoxError> {
    reports
        .iter()
        .filter_map(|line| line.strip_prefix("RSS "))
        .find_map(|bytes| bytes.trim().parse().ok())
        .ok_or_else(|| "the worker process reported no memory figure".into())
}

/// How a worker process reports the successes it committed so far.
const SUCCEEDED: &str = "SUCCEEDED ";

fn database_url_of_bench() -> String {
    let url = database_url();
    let base = url.split('?').next().unwrap_or(&url).to_owned();
    match base.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{BENCH_DB}"),
        None => base,
    }
}

/// A worker process: connects, says READY, starts a `runledger::Worker` running this binary's
/// `#[job]`s at the default settings on "go", prints how many successes it committed as that grows (at most once a millisecond),
/// runs until its input closes, then prints its peak memory.
async fn worker_process(worker_id: &str) -> Result<(), BoxError> {
    let url = database_url();
    let config = Settings::Default.config(worker_id, Duration::from_millis(100));
    let probe = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    let pool = worker_pool(&probe, &config).await?;
    probe.close().await;
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    println!("READY");
    if input.next_line().await?.as_deref() != Some("go") {
        return Ok(());
    }
    let successes = Successes::default();
    let running = start_typed_worker(&pool, config, &successes).await?;
    let reporter = tokio::spawn(async move {
        let mut seen = 0;
        loop {
            seen = successes.changed_from(seen).await;
            println!("{SUCCEEDED}{seen}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    while input.next_line().await?.is_some() {}
    reporter.abort();
    running.shutdown().await?;
    pool.close().await;
    println!("RSS {}", peak_rss().unwrap_or(0));
    Ok(())
}

/// Burn-down and batch enqueue again, with `--finished-jobs` succeeded jobs (and their attempt
/// rows) in the tables, against the empty-table figures of this run; then the plan of a claim
/// over that history.
async fn with_history(
    pool: &PgPool,
    meter: &CpuMeter,
    options: &Options,
    burn_default: &Rate,
    batch: &Rate,
) -> Result<(), BoxError> {
    let history = options.finished_jobs;
    let burn_history = burn_down(pool, meter, options.jobs, Settings::Default, history).await?;
    let batch_history = batch_enqueue(pool, meter, options.jobs, history).await?;
    println!();
    println!(
        "| with {history} finished jobs kept | value | against the empty table | CPU-efficiency ratio |"
    );
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| burn-down, no-op jobs, defaults | {} |",
        burn_history.row(burn_default)
    );
    println!(
        "| enqueue, batches of 1,000 | {} |",
        batch_history.row(batch)
    );
    reset(pool).await?;
    keep_finished(pool, history).await?;
    fill(pool, options.jobs).await?;
    // The claim's selection as the runtime plans it: with the planner settings of the claim
    // function (runledger.claim_jobs), read from the catalog.
    let mut tx = pool.begin().await?;
    sqlx::query(
        "SELECT set_config(split_part(c, '=', 1), split_part(c, '=', 2), true)
         FROM pg_proc p, unnest(p.proconfig) AS c
         WHERE p.oid = 'runledger.claim_jobs'::regproc",
    )
    .execute(&mut *tx)
    .await?;
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
         SELECT q.id FROM runledger.job_queue q
         WHERE q.status = 'PENDING' AND NOT q.gated AND q.next_run_at <= now()
           AND q.job_type = ANY($1)
           AND q.queue <> ALL (ARRAY(SELECT c.name FROM runledger.job_queues c WHERE c.is_paused))
         ORDER BY q.priority DESC, q.next_run_at, q.id
         LIMIT $2 FOR UPDATE OF q SKIP LOCKED",
    )
    .bind(vec![JOB_TYPE.to_owned()])
    .bind(64_i64)
    .fetch_all(&mut *tx)
    .await?;
    tx.rollback().await?;
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
