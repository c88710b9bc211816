//! Operator reads: job filters and counts, job detail, logs written through the context,
//! runtime configs, per-type metrics and workflow progress.

use std::sync::Arc;

use runledger_engine::core::jobs::{
    JobCompletion, JobLogLevel, JobLogLine, JobStatus, WorkflowDagBuilder,
};
use runledger_engine::postgres::jobs::{
    JobEnqueue, JobListFilter, JobLogListFilter, TenantScope, append_job_logs, count_jobs,
    enqueue_job, enqueue_workflow_run, get_job_detail, get_job_metrics, get_job_runtime_config,
    list_job_logs, list_job_runtime_configs, list_jobs, list_workflow_run_step_counts,
    upsert_job_runtime_config,
};
use runledger_engine::runtime::observer::JobLifecycleObservers;
use runledger_engine::runtime::registry::JobRegistry;
use runledger_engine::runtime::worker::{WorkerConfig, WorkerLoop};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    DefinitionOpts, claim, claim_one, dead_letter, define, expire_lease, fast_config, handler,
    insert_job,
};

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_jobs_filters_by_type_substring_organization_run_and_search(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    define(&pool, "emails.bounce", DefinitionOpts::default()).await;
    define(&pool, "reports.render", DefinitionOpts::default()).await;
    let org = Uuid::now_v7();
    let payload = json!({});
    let keyed = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &payload)
            .organization_id(org)
            .idempotency_key("welcome:42"),
    )
    .await
    .unwrap()
    .id;
    let bounce = insert_job(&pool, "emails.bounce", json!({})).await;
    let report = insert_job(&pool, "reports.render", json!({})).await;

    let emails = list_jobs(&pool, &JobListFilter::new().job_type_contains("EMAILS"))
        .await
        .unwrap();
    assert_eq!(
        emails.jobs.iter().map(|job| job.id).collect::<Vec<_>>(),
        vec![bounce, keyed]
    );
    let scoped = list_jobs(&pool, &JobListFilter::new().organization_id(org))
        .await
        .unwrap();
    assert_eq!(scoped.jobs.len(), 1);
    assert_eq!(scoped.jobs[0].id, keyed);

    let by_id = list_jobs(&pool, &JobListFilter::new().search(report.to_string()))
        .await
        .unwrap();
    assert_eq!(by_id.jobs.len(), 1);
    assert_eq!(by_id.jobs[0].id, report);
    let by_key = list_jobs(&pool, &JobListFilter::new().search(" welcome:42 "))
        .await
        .unwrap();
    assert_eq!(by_key.jobs[0].id, keyed);
    let blank = list_jobs(&pool, &JobListFilter::new().search("  "))
        .await
        .unwrap();
    assert_eq!(blank.jobs.len(), 3);

    assert_eq!(
        count_jobs(&pool, &JobListFilter::new(), None)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        count_jobs(&pool, &JobListFilter::new().job_type_contains("mail"), None)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        count_jobs(&pool, &JobListFilter::new(), Some(2))
            .await
            .unwrap(),
        2
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn search_by_error_code_finds_dead_lettered_jobs(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let failed = insert_job(&pool, "test.job", json!({})).await;
    let job = claim_one(&pool).await;
    dead_letter(&pool, &job).await;
    insert_job(&pool, "test.job", json!({})).await;

    let page = list_jobs(&pool, &JobListFilter::new().search("test.terminal"))
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 1);
    assert_eq!(page.jobs[0].id, failed);
    let filter = JobListFilter::new().status(JobStatus::DeadLettered);
    assert_eq!(count_jobs(&pool, &filter, None).await.unwrap(), 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn job_detail_gathers_attempts_events_dead_letters_and_logs(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let job_id = insert_job(&pool, "test.job", json!({"n": 1})).await;
    let job = claim_one(&pool).await;
    append_job_logs(
        &pool,
        &[
            JobLogLine::new(job_id, 1, JobLogLevel::Info, "starting"),
            JobLogLine::new(job_id, 1, JobLogLevel::Error, "smtp refused")
                .with_fields(json!({"code": 554})),
        ],
    )
    .await
    .unwrap();
    dead_letter(&pool, &job).await;

    let detail = get_job_detail(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap()
        .expect("job exists");
    assert_eq!(detail.job.status, JobStatus::DeadLettered);
    assert_eq!(detail.attempts.len(), 1);
    assert_eq!(detail.events.len(), 1);
    assert_eq!(detail.dead_letters.len(), 1);
    assert_eq!(
        detail.dead_letters[0].error_code.as_deref(),
        Some("test.terminal")
    );
    let messages: Vec<_> = detail.logs.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(messages, ["starting", "smtp refused"]);
    assert_eq!(detail.logs[1].level, JobLogLevel::Error);
    assert_eq!(detail.logs[1].fields, json!({"code": 554}));

    assert!(
        get_job_detail(
            &pool,
            runledger_engine::core::jobs::JobId::new_v7(),
            TenantScope::Admin
        )
        .await
        .unwrap()
        .is_none()
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_job_logs_pages_forward_and_tails(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let job_id = insert_job(&pool, "test.job", json!({})).await;
    let lines: Vec<_> = (0..5)
        .map(|n| JobLogLine::new(job_id, 1, JobLogLevel::Debug, format!("line {n}")))
        .collect();
    assert_eq!(append_job_logs(&pool, &lines).await.unwrap(), 5);

    let first = list_job_logs(
        &pool,
        job_id,
        TenantScope::Admin,
        &JobLogListFilter::new().limit(2),
    )
    .await
    .unwrap();
    assert_eq!(
        first.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(),
        ["line 0", "line 1"]
    );
    let next = list_job_logs(
        &pool,
        job_id,
        TenantScope::Admin,
        &JobLogListFilter::new().after_id(first[1].id).limit(2),
    )
    .await
    .unwrap();
    assert_eq!(next[0].message, "line 2");
    let tail = list_job_logs(
        &pool,
        job_id,
        TenantScope::Admin,
        &JobLogListFilter::tail(2),
    )
    .await
    .unwrap();
    assert_eq!(
        tail.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(),
        ["line 3", "line 4"]
    );

    // Lines of a job that does not exist are skipped, not an error.
    let orphan = JobLogLine::new(
        runledger_engine::core::jobs::JobId::new_v7(),
        1,
        JobLogLevel::Info,
        "x",
    );
    assert_eq!(append_job_logs(&pool, &[orphan]).await.unwrap(), 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn lines_a_handler_logs_through_its_context_are_stored_with_the_attempt(pool: PgPool) {
    let mut registry = JobRegistry::new();
    registry
        .register(handler("logged", |ctx, _| async move {
            ctx.info("hello from the handler");
            ctx.log_with_fields(JobLogLevel::Warn, "slow", json!({"ms": 900}));
            Ok(JobCompletion::success())
        }))
        .unwrap();
    define(&pool, "logged", DefinitionOpts::default()).await;
    let job_id = insert_job(&pool, "logged", json!({})).await;
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-logs")),
        JobLifecycleObservers::new(),
    )
    .unwrap();

    assert_eq!(worker.run_once().await.unwrap().succeeded, 1);

    let logs = list_job_logs(&pool, job_id, TenantScope::Admin, &JobLogListFilter::new())
        .await
        .unwrap();
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0].message, "hello from the handler");
    assert_eq!(logs[0].level, JobLogLevel::Info);
    assert_eq!(logs[0].attempt, Some(1));
    assert_eq!(logs[1].fields, json!({"ms": 900}));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn runtime_config_is_stored_replaced_and_listed(pool: PgPool) {
    assert!(
        get_job_runtime_config(&pool, "emails.send")
            .await
            .unwrap()
            .is_none()
    );
    upsert_job_runtime_config(&pool, "emails.send", &json!({"batch": 10}))
        .await
        .unwrap();
    let replaced = upsert_job_runtime_config(&pool, "emails.send", &json!({"batch": 50}))
        .await
        .unwrap();
    assert_eq!(replaced.config, json!({"batch": 50}));
    let read = get_job_runtime_config(&pool, "emails.send")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.config, json!({"batch": 50}));
    assert_eq!(list_job_runtime_configs(&pool).await.unwrap().len(), 1);

    let err = upsert_job_runtime_config(&pool, "emails.send", &json!([1]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.invalid_runtime_config");
    let err = upsert_job_runtime_config(&pool, " ", &json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.invalid_job_type");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn job_metrics_count_backlog_stale_leases_and_the_last_day(pool: PgPool) {
    define(&pool, "a.job", DefinitionOpts::default()).await;
    define(&pool, "b.idle", DefinitionOpts::default()).await;
    let org = Uuid::now_v7();
    for _ in 0..4 {
        insert_job(&pool, "a.job", json!({})).await;
    }
    let leased = claim(&pool, "w", 3).await;
    expire_lease(&pool, leased[0].id).await;
    runledger_engine::postgres::jobs::complete_job_success(&pool, &leased[1].lease(), None)
        .await
        .unwrap();
    dead_letter(&pool, &leased[2]).await;
    let payload = json!({});
    enqueue_job(
        &pool,
        &JobEnqueue::new("a.job", &payload).organization_id(org),
    )
    .await
    .unwrap();

    let metrics = get_job_metrics(&pool, None).await.unwrap();
    assert_eq!(
        metrics
            .iter()
            .map(|m| m.job_type.as_str())
            .collect::<Vec<_>>(),
        ["a.job", "b.idle"]
    );
    let a = &metrics[0];
    assert_eq!((a.pending, a.pending_ready), (2, 2));
    assert_eq!((a.leased, a.stale_leases), (1, 1));
    assert_eq!((a.succeeded_24h, a.dead_lettered_24h), (1, 1));
    assert!(a.p50_duration_ms.is_some() && a.p95_duration_ms.is_some());
    assert!(a.oldest_ready_at.is_some());
    let idle = &metrics[1];
    assert_eq!((idle.pending, idle.leased, idle.succeeded_24h), (0, 0, 0));
    assert_eq!(idle.p50_duration_ms, None);

    let scoped = get_job_metrics(&pool, Some(org)).await.unwrap();
    assert_eq!(
        (scoped[0].pending, scoped[0].leased, scoped[0].succeeded_24h),
        (1, 0, 0)
    );

    let view: i64 = sqlx::query_scalar(
        "SELECT pending FROM runledger.job_metrics_rollup WHERE job_type = 'a.job'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(view, 2);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn workflow_step_counts_group_steps_by_progress(pool: PgPool) {
    define(&pool, "wf.step", DefinitionOpts::default()).await;
    let meta = json!({});
    let payload = json!({});
    let run = WorkflowDagBuilder::new("wf.progress", &meta)
        .job("a", "wf.step", &payload)
        .unwrap()
        .job("b", "wf.step", &payload)
        .unwrap()
        .after_success("b", ["a"])
        .unwrap()
        .build()
        .unwrap();
    let run = enqueue_workflow_run(&pool, &run).await.unwrap();

    let counts = list_workflow_run_step_counts(&pool, &[run.id])
        .await
        .unwrap();
    assert_eq!(counts.len(), 1);
    let c = counts[0];
    assert_eq!(
        (c.total, c.active, c.waiting, c.succeeded, c.failed),
        (2, 1, 1, 0, 0)
    );

    let steps = list_jobs(&pool, &JobListFilter::new().workflow_run_id(run.id))
        .await
        .unwrap();
    assert_eq!(steps.jobs.len(), 1);
    assert!(
        list_workflow_run_step_counts(&pool, &[])
            .await
            .unwrap()
            .is_empty()
    );
}
