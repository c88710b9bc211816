//! Handler continuation: an attempt that asks to run again closes as a success, the same job
//! row starts its next run with a fresh attempt budget and the last committed checkpoint, and
//! a workflow step continues only when it opted in, releasing nothing until it finishes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use runledger_engine::core::jobs::{
    JobCompletion, JobContext, JobContinuation, JobFailure, JobProgressUpdate, JobStatus, JobType,
    StepKey, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    JOB_QUEUE_CHANNEL, JobContinued, TenantScope, continue_jobs, enqueue_workflow_run,
    get_job_by_id, get_job_metrics, list_job_attempts, list_workflow_steps,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use runledger_engine::runtime::observer::{
    JobContinuedEvent, JobLifecycleObserver, JobLifecycleObservers,
};
use runledger_engine::runtime::registry::JobRegistry;
use runledger_engine::runtime::worker::{WorkerConfig, WorkerLoop};
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::support::{
    DefinitionOpts, WORKER, claim, define, fast_config, handler, insert_job,
    next_notification_payload, wait_for_status,
};

/// Continues with `{"n": n + 1}` while `n` (from the checkpoint, 0 at first) is below 2, then
/// finishes with the runs it saw.
async fn three_runs(ctx: JobContext, _: Value) -> Result<JobCompletion, JobFailure> {
    let n = ctx
        .checkpoint
        .as_ref()
        .and_then(|c| c["n"].as_i64())
        .unwrap_or(0);
    assert_eq!(
        ctx.attempt, 1,
        "each run starts with a fresh attempt budget"
    );
    if n < 2 {
        return Ok(JobContinuation::now()
            .checkpoint(json!({ "n": n + 1 }))
            .progress(JobProgressUpdate::new().completed((n + 1) as u64).total(3))
            .into());
    }
    Ok(JobCompletion::with_output(json!({ "runs": n + 1 })))
}

#[derive(Default)]
struct CountContinued(AtomicUsize);

struct SharedCount(Arc<CountContinued>);

impl JobLifecycleObserver for SharedCount {
    fn on_job_continued(&self, event: &JobContinuedEvent) {
        assert!(event.run_number >= 2);
        self.0.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_continued_job_runs_three_runs_and_keeps_its_checkpoint(pool: PgPool) {
    let catalog = JobCatalog::new().job("crawl.pages", handler("crawl.pages", three_runs));
    catalog.sync_definitions(&pool).await.unwrap();
    let job = insert_job(&pool, "crawl.pages", json!({})).await;

    let continued = Arc::new(CountContinued::default());
    let supervisor = Supervisor::builder(&pool, fast_config("w-continue"))
        .unwrap()
        .with_catalog(&catalog)
        .with_job_lifecycle_observer(SharedCount(Arc::clone(&continued)))
        .build()
        .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 1, Duration::from_secs(30)).await;
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await
        .unwrap();

    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, JobStatus::Succeeded);
    assert_eq!(record.run_number, 3);
    assert_eq!(record.output, Some(json!({"runs": 3})));
    assert_eq!(record.checkpoint, Some(json!({"n": 2})));
    assert_eq!(record.progress, Some(json!({"completed": 2, "total": 3})));
    let attempts = list_job_attempts(&pool, job, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 3);
    assert!(attempts.iter().all(|a| a.outcome.as_str() == "SUCCEEDED"));
    assert_eq!(continued.0.load(Ordering::SeqCst), 2);
    let metrics = get_job_metrics(&pool, None).await.unwrap();
    let row = metrics
        .iter()
        .find(|m| m.job_type == "crawl.pages")
        .unwrap();
    assert_eq!((row.continued_24h, row.succeeded_24h), (2, 1));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_continuation_after_a_delay_is_not_claimable_before_it(pool: PgPool) {
    define(&pool, "later", DefinitionOpts::default()).await;
    let job = insert_job(&pool, "later", json!({})).await;
    let mut registry = JobRegistry::new();
    registry
        .register(handler("later", |_, _| async {
            Ok(JobContinuation::after(Duration::from_secs(3600)).into())
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-later")),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    let pass = worker.run_once().await.unwrap();
    assert_eq!(pass.continued, 1, "{pass:?}");
    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, JobStatus::Pending);
    assert!(record.next_run_at > chrono::Utc::now() + chrono::Duration::minutes(59));
    assert_eq!(record.checkpoint, None);
    assert_eq!(worker.run_once().await.unwrap().claimed, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_continuation_with_an_output_fails_the_attempt(pool: PgPool) {
    define(&pool, "confused", DefinitionOpts::default()).await;
    let job = insert_job(&pool, "confused", json!({})).await;
    let mut registry = JobRegistry::new();
    registry
        .register(handler("confused", |_, _| async {
            let mut completion = JobCompletion::from(JobContinuation::now());
            completion.output = Some(json!({"partial": true}));
            Ok(completion)
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-confused")),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    worker.run_once().await.unwrap();
    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, JobStatus::DeadLettered);
    assert_eq!(
        record.last_error_code.as_deref(),
        Some("job.continuation_with_output")
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn workflow_steps_continue_only_when_they_opted_in_and_release_nothing_meanwhile(
    pool: PgPool,
) {
    define(&pool, "wf.crawl", DefinitionOpts::default()).await;
    define(&pool, "wf.after", DefinitionOpts::default()).await;
    let meta = json!({});
    let payload = json!({});
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf.continuing"), &meta)
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("crawl"),
                JobType::new("wf.crawl"),
                &payload,
            )
            .allow_continuation()
            .build(),
        )
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("strict"),
                JobType::new("wf.crawl"),
                &payload,
            )
            .build(),
        )
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("after"),
                JobType::new("wf.after"),
                &payload,
            )
            .depends_on_success(StepKey::new("crawl"))
            .build(),
        )
        .build()
        .unwrap();
    let run = enqueue_workflow_run(&pool, &run).await.unwrap().id;

    let mut registry = JobRegistry::new();
    registry.register(handler("wf.crawl", three_runs)).unwrap();
    registry
        .register(handler("wf.after", |_, _| async {
            Ok(JobCompletion::success())
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-wf")),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    let status_of = |key: &'static str| {
        let pool = pool.clone();
        async move {
            list_workflow_steps(&pool, run, TenantScope::Admin)
                .await
                .unwrap()
                .into_iter()
                .find(|s| s.step_key == key)
                .unwrap()
                .status
                .as_str()
                .to_owned()
        }
    };

    // Run 1 of both steps: `crawl` continues, `strict` (no opt-in) fails for good.
    let pass = worker.run_once().await.unwrap();
    assert_eq!((pass.continued, pass.failed), (1, 1), "{pass:?}");
    assert_eq!(status_of("crawl").await, "ENQUEUED");
    assert_eq!(status_of("strict").await, "FAILED");
    assert_eq!(status_of("after").await, "BLOCKED");
    // Run 2 continues again; `after` still waits.
    assert_eq!(worker.run_once().await.unwrap().continued, 1);
    assert_eq!(status_of("after").await, "BLOCKED");
    // Run 3 finishes the step and releases `after`.
    assert_eq!(worker.run_once().await.unwrap().succeeded, 1);
    assert_eq!(status_of("crawl").await, "SUCCEEDED");
    assert_eq!(status_of("after").await, "ENQUEUED");
    let strict_code: Option<String> = sqlx::query_scalar(
        "SELECT last_error_code FROM runledger.job_queue WHERE workflow_step_key = 'strict'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        strict_code.as_deref(),
        Some("workflow.continuation_not_allowed")
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_continuation_due_at_once_wakes_idle_workers_and_a_delayed_one_does_not(pool: PgPool) {
    define(&pool, "crawl.later", DefinitionOpts::default()).await;
    define(&pool, "crawl.now", DefinitionOpts::default()).await;
    insert_job(&pool, "crawl.later", json!({})).await;
    insert_job(&pool, "crawl.now", json!({})).await;
    let mut claimed = claim(&pool, WORKER, 2).await;
    claimed.sort_by_key(|job| job.job_type.clone());
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen(JOB_QUEUE_CHANNEL).await.unwrap();

    let continued = continue_jobs(
        &pool,
        WORKER,
        &[
            JobContinued::new(
                claimed[0].id,
                claimed[0].attempt,
                JobContinuation::after(Duration::from_secs(3600)),
            ),
            JobContinued::new(claimed[1].id, claimed[1].attempt, JobContinuation::now()),
        ],
    )
    .await
    .unwrap();

    assert_eq!(continued.len(), 2);
    assert_eq!(next_notification_payload(&mut listener).await, "crawl.now");
    let more = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await;
    assert!(more.is_err(), "a delayed continuation woke the workers");
}
