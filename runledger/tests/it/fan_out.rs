//! Dynamic fan-out: a step fills a `FanOut` with a number of jobs chosen at run time, and a
//! later step reads their outputs as a `Vec`.

use std::time::Duration;

use runledger::engine::core::jobs::{WorkflowRunStatus, WorkflowStepStatus};
use runledger::engine::postgres::jobs::{TenantScope, list_workflow_steps};
use runledger::prelude::*;
use runledger::testing::{DrainOptions, drain, drain_with, prepare};
use sqlx::PgPool;

#[job(name = "it.fan.square")]
async fn square(n: u64) -> Result<u64, JobError> {
    if n == 1_000 {
        return Err(JobError::terminal("no squares of 1000 today").with_code("it.refused"));
    }
    Ok(n * n)
}

/// Fills `PAGES` with `count` squares to compute; its first attempt fails after fanning out, so
/// the retry fans out again (the same children: accepted, nothing added twice).
#[job(name = "it.fan.plan", max_attempts = 3)]
async fn plan(ctx: JobContext, first: u64, count: u64) -> Result<usize, JobError> {
    let added = ctx
        .fan_out(Squares::PAGES, (first..first + count).map(|n| Square { n }))
        .await?;
    if ctx.attempt() == 1 {
        return Err(JobError::retryable("the planner restarts once"));
    }
    Ok(added)
}

#[job(name = "it.fan.collect")]
async fn collect(#[output(Squares::PAGES)] squares: Vec<u64>) -> Result<Vec<u64>, JobError> {
    Ok(squares)
}

#[job(name = "it.fan.report")]
async fn report(#[output(Squares::PAGES)] squares: Option<Vec<u64>>) -> Result<bool, JobError> {
    Ok(squares.is_some())
}

#[workflow(name = "it.fan.squares")]
struct Squares {
    plan: Plan,
    #[after(plan)]
    pages: FanOut<Square>,
    #[after(pages)]
    #[result]
    collect: Collect,
    #[after_terminal(pages)]
    report: Report,
}

fn squares(first: u64, count: u64) -> Squares {
    Squares {
        plan: Plan { first, count },
        pages: FanOut::new(),
        collect: Collect {},
        report: Report {},
    }
}

fn wait() -> Wait {
    Wait::up_to(Duration::from_secs(30))
}

/// Runs every job, the planner's delayed retry included, until none is left.
async fn drain_all(pool: &PgPool) {
    drain_with(
        pool,
        DrainOptions::new().include_delayed_for(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_step_fans_out_to_100_children_and_a_later_step_reads_their_outputs_in_order(
    pool: PgPool,
) {
    prepare(&pool).await.unwrap();
    let run = squares(0, 100).enqueue(&pool).await.unwrap();
    drain_all(&pool).await;

    let collected = run.result(&pool, wait()).await.unwrap();
    assert_eq!(collected, (0..100).map(|n| n * n).collect::<Vec<u64>>());
    let steps = list_workflow_steps(&pool, run.id(), TenantScope::Admin)
        .await
        .unwrap();
    let children: Vec<_> = steps
        .iter()
        .filter(|s| s.step_key.starts_with("pages/"))
        .collect();
    assert_eq!(
        children.len(),
        100,
        "the retried planner added nothing twice"
    );
    assert!(
        children
            .iter()
            .all(|s| s.status == WorkflowStepStatus::Succeeded)
    );
    let status = |key: &str| steps.iter().find(|s| s.step_key == key).unwrap().status;
    assert_eq!(status("pages"), WorkflowStepStatus::Succeeded);
    assert_eq!(status("report"), WorkflowStepStatus::Succeeded);
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn an_empty_fan_out_gives_an_empty_vec(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let run = squares(0, 0).enqueue(&pool).await.unwrap();
    drain_all(&pool).await;
    assert_eq!(run.result(&pool, wait()).await.unwrap(), Vec::<u64>::new());
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_child_that_fails_fails_the_fan_out_and_cancels_its_after_dependents(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let run = squares(998, 4).enqueue(&pool).await.unwrap();
    drain_all(&pool).await;

    assert_eq!(
        run.status(&pool).await.unwrap(),
        WorkflowRunStatus::CompletedWithErrors
    );
    let steps = list_workflow_steps(&pool, run.id(), TenantScope::Admin)
        .await
        .unwrap();
    let step = |key: &str| steps.iter().find(|s| s.step_key == key).unwrap();
    assert_eq!(step("pages/2").status, WorkflowStepStatus::Failed);
    assert_eq!(step("pages").status, WorkflowStepStatus::Failed);
    assert_eq!(
        step("pages").last_error_code.as_deref(),
        Some("workflow.fan_out_failed")
    );
    assert_eq!(step("collect").status, WorkflowStepStatus::Canceled);
    // The #[after_terminal] dependent runs and reads `None`.
    assert_eq!(step("report").status, WorkflowStepStatus::Succeeded);
    assert_eq!(step("report").output, Some(serde_json::json!(false)));
}

#[job(name = "it.fan.lonely")]
async fn lonely(ctx: JobContext) -> Result<usize, JobError> {
    ctx.fan_out(Squares::PAGES, [Square { n: 2 }]).await
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn fanning_out_outside_a_workflow_fails_terminally(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let job = Lonely {}.enqueue(&pool).await.unwrap();
    let report = drain(&pool).await.unwrap();
    assert_eq!(report.dead_lettered(), 1);
    let record =
        runledger::engine::postgres::jobs::get_job_by_id(&pool, job.id(), TenantScope::Admin)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(
        record.last_error_code.as_deref(),
        Some("workflow.not_a_workflow_step")
    );
}

#[job(name = "it.fan.paged_sum")]
async fn paged_sum(#[output(Paged::PAGES)] squares: Chunks<u64>) -> Result<(u64, usize), JobError> {
    let mut squares = squares.page_size(7);
    let (mut total, mut pages) = (0, 0);
    while let Some(page) = squares.next().await? {
        assert!(page.len() <= 7);
        total += page.iter().sum::<u64>();
        pages += 1;
    }
    Ok((total, pages))
}

#[workflow(name = "it.fan.paged")]
struct Paged {
    plan: Plan,
    #[after(plan)]
    pages: FanOut<Square>,
    #[after(pages)]
    #[result]
    sum: PagedSum,
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_join_reads_the_childrens_outputs_a_page_at_a_time(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let run = Paged {
        plan: Plan {
            first: 0,
            count: 100,
        },
        pages: FanOut::new(),
        sum: PagedSum {},
    }
    .enqueue(&pool)
    .await
    .unwrap();
    drain_all(&pool).await;
    let (total, pages) = run.result(&pool, wait()).await.unwrap();
    assert_eq!(total, (0..100).map(|n| n * n).sum::<u64>());
    assert_eq!(pages, 15, "100 outputs in pages of 7");
}

#[job(name = "it.fan.outsider")]
async fn outsider(ctx: JobContext) -> Result<usize, JobError> {
    ctx.fan_out(Stray::PAGES, [Square { n: 2 }]).await
}

#[job(name = "it.fan.noop")]
async fn noop() -> Result<(), JobError> {
    Ok(())
}

/// `outsider` fills `pages` but is not its prerequisite.
#[workflow(name = "it.fan.stray")]
struct Stray {
    first: Noop,
    #[after(first)]
    pages: FanOut<Square>,
    outsider: Outsider,
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn only_a_prerequisite_of_a_fan_out_can_fill_it(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let run = Stray {
        first: Noop {},
        pages: FanOut::new(),
        outsider: Outsider {},
    }
    .enqueue(&pool)
    .await
    .unwrap();
    drain_all(&pool).await;
    let steps = list_workflow_steps(&pool, run.id(), TenantScope::Admin)
        .await
        .unwrap();
    let step = |key: &str| steps.iter().find(|s| s.step_key == key).unwrap();
    assert_eq!(step("outsider").status, WorkflowStepStatus::Failed);
    assert_eq!(
        step("outsider").last_error_code.as_deref(),
        Some("workflow.fan_out_filler_not_prerequisite")
    );
    // Its filler never filled it: the fan-out closed empty once `first` succeeded.
    assert_eq!(step("pages").status, WorkflowStepStatus::Succeeded);
    assert_eq!(step("pages").output, Some(serde_json::json!([])));
    assert_eq!(steps.len(), 3, "no child was added");
}
