//! The typed fan-out as users write it: a `#[workflow]` whose root fills a `FanOut<Child>` of
//! N children and whose join reads their outputs as an `#[output(..)]` `Vec`, drained by
//! `runledger::Worker` at the defaults, against N + 2 plain jobs through the same worker.

use std::time::{Duration, Instant};

use runledger::prelude::*;
use runledger_bench::successes::Successes;
use runledger_bench::{BoxError, quantiles};
use sqlx::PgPool;

use super::{
    Settings, drained, enqueue_batches, reset, settle_connections, start_typed_worker, worker_pool,
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
