//! "Why is this job not running?": `explain_job` names each rule that holds a waiting job, and
//! supervisors keep the presence rows that tell whether a live worker serves it.

use std::time::Duration;

use runledger_engine::core::jobs::{
    JobId, JobStatus, JobType, StepKey, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder,
    WorkflowStepStatus, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    JobEnqueue, JobExplanation, JobHold, TenantScope, WorkerPresence, enqueue_job,
    enqueue_workflow_run, explain_job, list_workflow_steps, pause_queue, record_worker,
    set_queue_global_concurrency,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{DefinitionOpts, define, fast_config, handler};

const TYPE: &str = "explain.job";

async fn enqueue(pool: &PgPool, request: JobEnqueue<'_>) -> JobId {
    enqueue_job(pool, &request).await.unwrap().id
}

async fn explain(pool: &PgPool, job: JobId) -> JobExplanation {
    explain_job(pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .expect("the job exists")
}

/// Leases `job` to a worker, as a claim would.
async fn lease(pool: &PgPool, job: JobId) {
    sqlx::query(
        "UPDATE runledger.job_queue
         SET status = 'LEASED', attempt = attempt + 1, worker_id = 'elsewhere',
             leased_at = now(), lease_expires_at = now() + interval '1 hour'
         WHERE id = $1",
    )
    .bind(job.0)
    .execute(pool)
    .await
    .unwrap();
}

/// A live worker running `TYPE` from every queue.
async fn serve_everything(pool: &PgPool) {
    record_worker(
        pool,
        &WorkerPresence::new("w-all", vec![TYPE.to_owned()], None),
    )
    .await
    .unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_pending_job_is_held_by_no_live_worker_until_one_serves_its_type_and_queue(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let payload = json!({});
    let job = enqueue(&pool, JobEnqueue::new(TYPE, &payload)).await;
    let no_worker = JobHold::NoLiveWorker {
        job_type: TYPE.to_owned(),
        queue: "default".to_owned(),
    };
    assert_eq!(explain(&pool, job).await.holds, vec![no_worker.clone()]);

    // A worker of another type, and one of this type serving other queues: still none.
    record_worker(
        &pool,
        &WorkerPresence::new("w-other", vec!["other.job".to_owned()], None),
    )
    .await
    .unwrap();
    record_worker(
        &pool,
        &WorkerPresence::new(
            "w-mail",
            vec![TYPE.to_owned()],
            Some(vec!["mail".to_owned()]),
        ),
    )
    .await
    .unwrap();
    assert_eq!(explain(&pool, job).await.holds, vec![no_worker.clone()]);

    record_worker(
        &pool,
        &WorkerPresence::new(
            "w-default",
            vec![TYPE.to_owned()],
            Some(vec!["default".to_owned()]),
        ),
    )
    .await
    .unwrap();
    let explained = explain(&pool, job).await;
    assert_eq!(explained.status, Some(JobStatus::Pending));
    assert!(explained.holds.is_empty());
    assert!(explained.is_claimable());

    // A presence row not written for a minute is a worker that died.
    sqlx::query("UPDATE runledger.worker_presence SET seen_at = now() - interval '1 minute'")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(explain(&pool, job).await.holds, vec![no_worker]);

    // Rows of workers unseen for an hour go with the next write of any worker.
    sqlx::query(
        "UPDATE runledger.worker_presence SET seen_at = now() - interval '2 hours'
         WHERE worker_id <> 'w-default'",
    )
    .execute(&pool)
    .await
    .unwrap();
    serve_everything(&pool).await;
    let left: Vec<String> =
        sqlx::query_scalar("SELECT worker_id FROM runledger.worker_presence ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(left, vec!["w-all".to_owned(), "w-default".to_owned()]);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn each_claim_rule_that_holds_a_job_is_named(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    serve_everything(&pool).await;
    let payload = json!({});

    // Scheduled for later.
    let later = enqueue(
        &pool,
        JobEnqueue::new(TYPE, &payload).delay(Duration::from_secs(3_600)),
    )
    .await;
    let holds = explain(&pool, later).await.holds;
    assert!(
        matches!(holds.as_slice(), [JobHold::Scheduled { until }] if *until > chrono::Utc::now()),
        "{holds:?}"
    );

    // A paused queue.
    pause_queue(&pool, "default").await.unwrap();
    let now = enqueue(&pool, JobEnqueue::new(TYPE, &payload)).await;
    assert_eq!(
        explain(&pool, now).await.holds,
        vec![JobHold::QueuePaused {
            queue: "default".to_owned()
        }]
    );
    runledger_engine::postgres::jobs::resume_queue(&pool, "default")
        .await
        .unwrap();
    assert!(explain(&pool, now).await.is_claimable());

    // The queue's limit, 1 of 1 leased.
    set_queue_global_concurrency(&pool, "default", Some(1))
        .await
        .unwrap();
    lease(&pool, later).await;
    assert_eq!(
        explain(&pool, now).await.holds,
        vec![JobHold::QueueLimitReached {
            queue: "default".to_owned(),
            running: 1,
            limit: 1
        }]
    );
    let leased = explain(&pool, later).await;
    assert_eq!(leased.status, Some(JobStatus::Leased));
    assert!(leased.holds.is_empty(), "a leased job waits for nothing");
    set_queue_global_concurrency(&pool, "default", None)
        .await
        .unwrap();

    // The type's limit, 1 of 1 leased.
    sqlx::query("UPDATE runledger.job_definitions SET global_concurrency = 1 WHERE job_type = $1")
        .bind(TYPE)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        explain(&pool, now).await.holds,
        vec![JobHold::TypeLimitReached {
            job_type: TYPE.to_owned(),
            running: 1,
            limit: 1
        }]
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_held_resource_key_names_its_holder(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    serve_everything(&pool).await;
    let payload = json!({});
    let first = enqueue(
        &pool,
        JobEnqueue::new(TYPE, &payload).resource_key("printer:lobby"),
    )
    .await;
    let second = enqueue(
        &pool,
        JobEnqueue::new(TYPE, &payload).resource_key("printer:lobby"),
    )
    .await;
    assert!(explain(&pool, second).await.is_claimable());
    lease(&pool, first).await;
    assert_eq!(
        explain(&pool, second).await.holds,
        vec![JobHold::ResourceKeyHeld {
            resource_key: "printer:lobby".to_owned(),
            holder: first
        }]
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_blocked_step_names_its_waiting_prerequisites_and_a_gate_says_it_waits(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let (meta, payload) = (json!({}), json!({}));
    let job = |key: &'static str| {
        WorkflowStepEnqueueBuilder::new(StepKey::new(key), JobType::new(TYPE), &payload)
    };
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("explain.flow"), &meta)
        .organization_id(uuid::Uuid::from_u128(7))
        .step(job("draft").build())
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("approve")).build())
        .step(
            job("ship")
                .depends_on_success(StepKey::new("draft"))
                .depends_on_success(StepKey::new("approve"))
                .build(),
        )
        .build()
        .unwrap();
    let run = enqueue_workflow_run(&pool, &run).await.unwrap().id;
    let steps = list_workflow_steps(&pool, run, TenantScope::Admin)
        .await
        .unwrap();
    let id_of = |key: &str| JobId(steps.iter().find(|s| s.step_key == key).unwrap().id.0);

    let ship = explain(&pool, id_of("ship")).await;
    assert_eq!(ship.status, None, "a blocked step has no job yet");
    let [
        JobHold::Prerequisites {
            workflow_run_id,
            waiting,
            count,
        },
    ] = ship.holds.as_slice()
    else {
        panic!("{:?}", ship.holds);
    };
    assert_eq!((*workflow_run_id, *count), (run, 2));
    let waiting: Vec<(&str, WorkflowStepStatus)> = waiting
        .iter()
        .map(|w| (w.step_key.as_str(), w.status))
        .collect();
    assert_eq!(
        waiting,
        vec![
            ("approve", WorkflowStepStatus::WaitingForExternal),
            ("draft", WorkflowStepStatus::Enqueued)
        ]
    );
    assert_eq!(
        explain(&pool, id_of("approve")).await.holds,
        vec![JobHold::WaitingForExternal {
            workflow_run_id: run,
            step_key: "approve".to_owned()
        }]
    );
    // The released step is a job like any other.
    let draft = explain(&pool, id_of("draft")).await;
    assert_eq!(draft.status, Some(JobStatus::Pending));

    // Another tenant sees none of it; an unknown id is none.
    let other = TenantScope::Organization(uuid::Uuid::from_u128(8));
    for key in ["ship", "approve", "draft"] {
        assert_eq!(explain_job(&pool, id_of(key), other).await.unwrap(), None);
    }
    assert_eq!(
        explain_job(&pool, JobId(uuid::Uuid::now_v7()), TenantScope::Admin)
            .await
            .unwrap(),
        None
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_supervisor_keeps_its_presence_while_it_runs_and_removes_it_when_it_stops(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        TYPE,
        handler(TYPE, |_, _: Value| async move {
            Ok(runledger_engine::core::jobs::JobCompletion::success())
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let payload = json!({});
    let job = enqueue(
        &pool,
        JobEnqueue::new(TYPE, &payload).delay(Duration::from_secs(3_600)),
    )
    .await;
    let supervisor = Supervisor::builder(&pool, fast_config("w-present"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let presence = loop {
        let row: Option<(Vec<String>, Option<Vec<String>>)> = sqlx::query_as(
            "SELECT job_types, queues FROM runledger.worker_presence WHERE worker_id = 'w-present'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap();
        if let Some(row) = row {
            break row;
        }
        assert!(std::time::Instant::now() < deadline, "no presence row");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(presence, (vec![TYPE.to_owned()], None));
    let holds = explain(&pool, job).await.holds;
    assert!(
        matches!(holds.as_slice(), [JobHold::Scheduled { .. }]),
        "only its delay holds it while the worker lives: {holds:?}"
    );

    supervisor
        .shutdown_with_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger.worker_presence")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "a stopped worker leaves no presence behind");
    assert!(
        explain(&pool, job)
            .await
            .holds
            .iter()
            .any(|hold| matches!(hold, JobHold::NoLiveWorker { .. }))
    );
}
