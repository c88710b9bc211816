//! The typed fan-out as users write it: a `#[workflow]` whose root fills a `FanOut<Child>` of
//! N children and whose join reads their outputs as an `#[output(..)]` `Vec`, drained by
//! `runledger::Worker` at the defaults, against N + 2 plain jobs through the same worker; and a
//! large fan-out whose join reads its children's outputs in pages (`Chunks`), run by a worker
//! process whose peak memory is measured.

use std::time::{Duration, Instant};

use runledger::prelude::*;
use runledger_bench::successes::Successes;
use runledger_bench::{BoxError, quantiles};
use sqlx::PgPool;

use super::{
    Settings, drained, enqueue_batches, finish, go, peak_rss_reported, reset, settle_connections,
    start_typed_worker, start_worker_processes, worker_pool,
};

/// Rounds: each times one fan-out, then the plain jobs.
const ROUNDS: usize = 5;

/// A child: its output is its number.
#[job(name = "bench.fan.child")]
async fn fan_child(n: u32) -> Result<u32, JobError> {
    Ok(n)
}

/// The root: fans out `children` children.
#[job(name = "bench.fan.root")]
async fn fan_root(ctx: JobContext, children: u32) -> Result<usize, JobError> {
    ctx.fan_out(Spread::KIDS, (0..children).map(|n| FanChild { n }))
        .await
}

/// The join: reads every child's output.
#[job(name = "bench.fan.join")]
async fn fan_join(#[output(Spread::KIDS)] outputs: Vec<u32>) -> Result<usize, JobError> {
    Ok(outputs.len())
}

/// root -> kids (N children) -> join.
#[workflow(name = "bench.fan")]
struct Spread {
    root: FanRoot,
    #[after(root)]
    kids: FanOut<FanChild>,
    #[after(kids)]
    #[result]
    join: FanJoin,
}

/// Jobs that succeed in one fan-out run: the root, the children and the join.
fn jobs_of_run(children: usize) -> usize {
    children + 2
}

/// One fan-out of `children`, from enqueue to its result.
async fn run_once(pool: &PgPool, children: u32) -> Result<Duration, BoxError> {
    let begun = Instant::now();
    let run = Spread {
        root: FanRoot { children },
        kids: FanOut::new(),
        join: FanJoin {},
    }
    .enqueue(pool)
    .await?;
    let joined = run
        .result(pool, Wait::up_to(Duration::from_secs(600)))
        .await?;
    if joined != children as usize {
        return Err(format!("the join read {joined} outputs of {children}").into());
    }
    Ok(begun.elapsed())
}

/// Medians of [`ROUNDS`] rounds: a typed fan-out of `children`, and `children + 2` plain jobs,
/// through one `runledger::Worker` at the defaults, after one untimed round of each.
pub(super) async fn typed_fan_out(
    pool: &PgPool,
    children: u32,
) -> Result<(Duration, Duration), BoxError> {
    reset(pool).await?;
    let config = Settings::Default.config("bench-typed-fan", Duration::from_millis(100));
    let worker_pool = worker_pool(pool, &config).await?;
    let successes = Successes::default();
    let running = start_typed_worker(&worker_pool, config, &successes).await?;
    let (n, plain_jobs) = (children as usize, children as usize + 2);
    let mut expected = 0;
    let (mut fan_outs, mut plains) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        settle_connections().await;
        let fan_out = run_once(pool, children).await?;
        expected += jobs_of_run(n);
        successes.wait_for(expected, || drained(pool)).await?;
        settle_connections().await;
        let begun = Instant::now();
        enqueue_batches(pool, plain_jobs).await?;
        expected += plain_jobs;
        successes.wait_for(expected, || drained(pool)).await?;
        let plain = begun.elapsed();
        if round > 0 {
            println!(
                "typed fan-out of {children}: {:.0} ms; {plain_jobs} plain jobs: {:.0} ms",
                fan_out.as_secs_f64() * 1e3,
                plain.as_secs_f64() * 1e3
            );
            fan_outs.push(fan_out);
            plains.push(plain);
        }
    }
    running.shutdown().await?;
    worker_pool.close().await;
    let [fan_out] = quantiles(fan_outs, [0.5]);
    let [plain] = quantiles(plains, [0.5]);
    Ok((fan_out, plain))
}

/// The join of the large fan-out: counts its children's outputs, a page at a time.
#[job(name = "bench.fan.count")]
async fn fan_count(#[output(Large::KIDS)] mut outputs: Chunks<u32>) -> Result<usize, JobError> {
    let mut count = 0;
    while let Some(page) = outputs.next().await? {
        count += page.len();
    }
    Ok(count)
}

/// root -> kids (N children) -> count, reading the children's outputs in pages.
#[workflow(name = "bench.fan.large")]
struct Large {
    root: FanRoot,
    #[after(root)]
    kids: FanOut<FanChild>,
    #[after(kids)]
    #[result]
    count: FanCount,
}

/// What the large fan-out measured.
pub(super) struct LargeFanOut {
    children: u32,
    elapsed: Duration,
    peak_rss: u64,
    database_growth: i64,
}

impl LargeFanOut {
    pub(super) fn describe(&self) -> String {
        format!(
            "typed `FanOut` of {} children, `Chunks` join, one worker process at the defaults: {:.1} s, worker peak memory (VmHWM) {:.1} MiB, database growth {:.0} MiB",
            self.children,
            self.elapsed.as_secs_f64(),
            self.peak_rss as f64 / (1024.0 * 1024.0),
            self.database_growth as f64 / (1024.0 * 1024.0)
        )
    }
}

/// One fan-out of `children` through one worker process at the defaults, from enqueue to the
/// run's result: its wall time, the worker process's peak memory, and how much the database
/// grew.
pub(super) async fn large_fan_out(pool: &PgPool, children: u32) -> Result<LargeFanOut, BoxError> {
    reset(pool).await?;
    let size = || async {
        sqlx::query_scalar::<_, i64>("SELECT pg_database_size(current_database())")
            .fetch_one(pool)
            .await
    };
    // The job definitions, synced as the worker process syncs them when it starts.
    runledger::Worker::builder(pool)
        .schema(runledger::SchemaMode::Skip)
        .build()?
        .prepare()
        .await?;
    let before = size().await?;
    let successes = Successes::default();
    let workers = go(start_worker_processes(1, 0).await?, &successes).await?;
    let begun = Instant::now();
    let run = Large {
        root: FanRoot { children },
        kids: FanOut::new(),
        count: FanCount {},
    }
    .enqueue(pool)
    .await?;
    let counted = run
        .result(pool, Wait::up_to(Duration::from_secs(1800)))
        .await?;
    let elapsed = begun.elapsed();
    if counted != children as usize {
        return Err(format!("the join counted {counted} outputs of {children}").into());
    }
    let database_growth = size().await? - before;
    let peak_rss = peak_rss_reported(&finish(workers).await?)?;
    let measured = LargeFanOut {
        children,
        elapsed,
        peak_rss,
        database_growth,
    };
    println!("{}", measured.describe());
    Ok(measured)
}
