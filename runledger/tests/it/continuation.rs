//! Typed continuation: a job continues through the error channel with a checkpoint, each run
//! reads the last one, and only the finishing run's output is stored.

use runledger::Continuation;
use runledger::engine::postgres::jobs::{TenantScope, get_job_by_id};
use runledger::prelude::*;
use runledger::testing::{DrainOptions, drain_worker};
use sqlx::PgPool;

use crate::support::worker_builder;

#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct Cursor {
    runs: Vec<i32>,
}

#[job(name = "it.continuation.count")]
async fn count_in_runs(ctx: JobContext, runs: usize) -> Result<Vec<i32>, JobError> {
    let mut cursor = ctx
        .checkpoint::<Cursor>()?
        .unwrap_or(Cursor { runs: Vec::new() });
    assert_eq!(ctx.attempt(), 1, "every run has a fresh attempt budget");
    cursor.runs.push(ctx.attempt());
    if cursor.runs.len() < runs {
        return Err(Continuation::now().checkpoint(&cursor).into());
    }
    Ok(cursor.runs)
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_typed_job_continues_three_runs_keeping_its_checkpoint(pool: PgPool) {
    let worker = worker_builder(&pool).build().unwrap();
    runledger::testing::prepare(&pool).await.unwrap();
    let job = CountInRuns { runs: 3 }.enqueue(&pool).await.unwrap();
    let report = drain_worker(&worker, DrainOptions::new()).await.unwrap();
    assert_eq!(
        (report.continued(), report.succeeded()),
        (2, 1),
        "{report:?}"
    );
    assert_eq!(job.output(&pool).await.unwrap(), Some(vec![1, 1, 1]));
    let record = get_job_by_id(&pool, job.id(), TenantScope::Global)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.run_number, 3);
    assert_eq!(record.checkpoint, Some(serde_json::json!({"runs": [1, 1]})));
}

#[test]
fn a_continuation_is_not_a_failure_but_converts_into_one_when_misused() {
    let exit: JobError = Continuation::now().checkpoint(&1_u32).into();
    assert!(exit.is_continuation());
    assert_eq!(exit.into_failure().code, "job.continuation_misplaced");
    let plain = JobError::retryable("boom");
    assert!(!plain.is_continuation());
}

#[job(name = "it.continuation.total")]
async fn total(#[output(Counting::COUNT)] runs: Vec<i32>) -> Result<usize, JobError> {
    Ok(runs.len())
}

/// `count` may continue (`continuation = true`); `total` waits for the run that finishes it.
#[workflow(name = "it.continuation.counting")]
struct Counting {
    #[step(continuation = true)]
    count: CountInRuns,
    #[after(count)]
    #[result]
    total: Total,
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_workflow_step_that_opted_in_continues_and_its_dependent_waits_for_the_last_run(
    pool: PgPool,
) {
    let worker = worker_builder(&pool).build().unwrap();
    runledger::testing::prepare(&pool).await.unwrap();
    let run = Counting {
        count: CountInRuns { runs: 3 },
        total: Total {},
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let report = drain_worker(&worker, DrainOptions::new()).await.unwrap();
    assert_eq!(
        (report.continued(), report.succeeded()),
        (2, 2),
        "{report:?}"
    );
    // `total` ran once, after the third run of `count`.
    let totals = report.runs_of::<Total>();
    assert_eq!(totals.len(), 1);
    let last_count = report
        .runs
        .iter()
        .rposition(|r| r.job_type == CountInRuns::NAME)
        .unwrap();
    let total_at = report
        .runs
        .iter()
        .position(|r| r.job_type == Total::NAME)
        .unwrap();
    assert!(total_at > last_count);
    let result = run
        .result(&pool, Wait::up_to(std::time::Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(result, 3);
}
