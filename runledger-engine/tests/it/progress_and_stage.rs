//! Progress and stage fidelity: a job is marked running when its handler starts, reports
//! progress through its context, stores its final progress with the success, and its stage
//! follows its status (a succeeded job is `COMPLETED`).

use std::sync::Arc;

use runledger_engine::core::jobs::{
    JobCompletion, JobFailure, JobProgressUpdate, JobStage, JobStatus,
};
use runledger_engine::postgres::jobs::{
    TenantScope, complete_job_failure, get_job_by_id, list_job_attempts, mark_job_running,
};
use runledger_engine::runtime::observer::JobLifecycleObservers;
use runledger_engine::runtime::registry::JobRegistry;
use runledger_engine::runtime::worker::{WorkerConfig, WorkerLoop};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{DefinitionOpts, claim_one, define, fast_config, handler, insert_job};

async fn stage_of(pool: &PgPool, job: runledger_engine::core::jobs::JobId) -> JobStage {
    get_job_by_id(pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap()
        .stage
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_running_handler_is_marked_started_reports_progress_and_stores_its_final_progress(
    pool: PgPool,
) {
    define(&pool, "stage.job", DefinitionOpts::default()).await;
    let job = insert_job(&pool, "stage.job", json!({})).await;
    assert_eq!(stage_of(&pool, job).await, JobStage::Queued);

    let seen = pool.clone();
    let mut registry = JobRegistry::new();
    registry
        .register(handler("stage.job", move |ctx, _| {
            let pool = seen.clone();
            async move {
                // Seen from inside the handler: started and running.
                let record = get_job_by_id(&pool, ctx.job_id, TenantScope::Admin)
                    .await
                    .unwrap()
                    .unwrap();
                assert!(
                    record.started_at.is_some(),
                    "started_at unset while running"
                );
                assert_eq!(record.stage, JobStage::Running);
                ctx.report_progress(&JobProgressUpdate::new().stage("half").completed(1).total(2))
                    .await
                    .unwrap();
                let record = get_job_by_id(&pool, ctx.job_id, TenantScope::Admin)
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(
                    record.progress,
                    Some(json!({"stage": "half", "completed": 1, "total": 2}))
                );
                Ok(JobCompletion::success()
                    .progress(JobProgressUpdate::new().stage("done").completed(2).total(2)))
            }
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-stage")),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    let pass = worker.run_once().await.unwrap();
    assert_eq!(pass.succeeded, 1, "{pass:?}");

    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, JobStatus::Succeeded);
    assert_eq!(record.stage, JobStage::Completed);
    assert_eq!(
        record.progress,
        Some(json!({"stage": "done", "completed": 2, "total": 2}))
    );
    let attempts = list_job_attempts(&pool, job, TenantScope::Admin)
        .await
        .unwrap();
    assert!(attempts[0].started_at.is_some());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_success_without_final_progress_keeps_the_last_update(pool: PgPool) {
    define(&pool, "stage.keep", DefinitionOpts::default()).await;
    let job = insert_job(&pool, "stage.keep", json!({})).await;
    let mut registry = JobRegistry::new();
    registry
        .register(handler("stage.keep", |ctx, _| async move {
            ctx.report_progress(&JobProgressUpdate::new().completed(7))
                .await
                .unwrap();
            Ok(JobCompletion::success())
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-keep")),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    worker.run_once().await.unwrap();
    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.stage, JobStage::Completed);
    assert_eq!(record.progress, Some(json!({"completed": 7})));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_stage_follows_lease_start_retry_and_dead_letter(pool: PgPool) {
    define(
        &pool,
        "stage.fail",
        DefinitionOpts {
            max_attempts: 2,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let job = insert_job(&pool, "stage.fail", json!({})).await;
    let claimed = claim_one(&pool).await;
    assert_eq!(stage_of(&pool, job).await, JobStage::Leased);
    mark_job_running(&pool, &claimed.lease()).await.unwrap();
    assert_eq!(stage_of(&pool, job).await, JobStage::Running);
    complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::retryable("stage.flaky", "try again"),
    )
    .await
    .unwrap();
    assert_eq!(stage_of(&pool, job).await, JobStage::RetryScheduled);
    sqlx::query("UPDATE runledger.job_queue SET next_run_at = now() WHERE id = $1")
        .bind(job.0)
        .execute(&pool)
        .await
        .unwrap();
    let claimed = claim_one(&pool).await;
    complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::terminal("stage.broken", "give up"),
    )
    .await
    .unwrap();
    assert_eq!(stage_of(&pool, job).await, JobStage::DeadLettered);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_worker_marks_a_long_handler_running_and_a_fast_one_starts_at_its_lease(pool: PgPool) {
    define(&pool, "stage.long", DefinitionOpts::default()).await;
    define(&pool, "stage.fast", DefinitionOpts::default()).await;
    let long = insert_job(&pool, "stage.long", json!({})).await;
    let fast = insert_job(&pool, "stage.fast", json!({})).await;

    let seen = pool.clone();
    let mut registry = JobRegistry::new();
    registry
        .register(handler("stage.long", move |ctx, _| {
            let pool = seen.clone();
            async move {
                // The worker marks a handler still running after a moment; wait to see it.
                for _ in 0..100 {
                    if stage_of(&pool, ctx.job_id).await == JobStage::Running {
                        return Ok(JobCompletion::success());
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(JobFailure::terminal(
                    "stage.never_running",
                    "never marked running",
                ))
            }
        }))
        .unwrap();
    registry
        .register(handler("stage.fast", |_, _| async {
            Ok(JobCompletion::success())
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-marks")),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running =
        tokio::spawn(worker.run(shutdown.clone(), tokio_util::sync::CancellationToken::new()));
    for _ in 0..200 {
        if stage_of(&pool, long).await == JobStage::Completed
            && stage_of(&pool, fast).await == JobStage::Completed
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    running.await.unwrap();

    assert_eq!(stage_of(&pool, long).await, JobStage::Completed);
    let fast_record = get_job_by_id(&pool, fast, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fast_record.stage, JobStage::Completed);
    let attempts = list_job_attempts(&pool, fast, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].started_at, Some(attempts[0].leased_at));
}
