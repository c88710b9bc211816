//! Workflow runs through real workers: release, data flow, failure propagation, gates,
//! cancellation, results and idempotency.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use runledger_engine::core::jobs::{
    JobCompletion, JobFailure, StepKey, WorkflowDagBuilder, WorkflowRunEnqueue, WorkflowRunId,
    WorkflowRunStatus, WorkflowStepStatus,
};
use runledger_engine::postgres::jobs::{
    CompleteExternalWorkflowStepInput, ExternalStepCompletion, TenantScope, WorkflowRunHandle,
    WorkflowRunHandleScope, WorkflowRunWaitOptions, cancel_workflow_run,
    complete_external_workflow_step, complete_job_failure, enqueue_workflow_run,
    enqueue_workflow_run_handle, get_workflow_run, list_workflow_steps, reap_expired_leases,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{
    DefinitionOpts, claim, claim_one, define, expire_lease, fast_config, handler, successes_of,
};

const WAIT: Duration = Duration::from_secs(30);

fn wait_long() -> WorkflowRunWaitOptions {
    WorkflowRunWaitOptions {
        timeout: Some(WAIT),
        ..WorkflowRunWaitOptions::default()
    }
}

async fn wait_for_run(pool: &PgPool, run: WorkflowRunId, status: WorkflowRunStatus) {
    let deadline = Instant::now() + WAIT;
    loop {
        let current = get_workflow_run(pool, run, WorkflowRunHandleScope::Admin)
            .await
            .unwrap()
            .unwrap()
            .status;
        if current == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "run stuck in {current}, expected {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn step_statuses(pool: &PgPool, run: WorkflowRunId) -> Vec<(String, WorkflowStepStatus)> {
    let mut steps: Vec<_> = list_workflow_steps(pool, run, TenantScope::Admin)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.step_key, s.status))
        .collect();
    steps.sort();
    steps
}

/// Step handlers: `wf.echo` returns its payload's `value`; `wf.sum` adds its prerequisites'
/// outputs; `wf.fail` fails terminally.
fn catalog() -> JobCatalog {
    JobCatalog::new()
        .job(
            "wf.echo",
            handler("wf.echo", |_, payload: Value| async move {
                Ok(JobCompletion::with_output(
                    json!({ "value": payload["value"] }),
                ))
            }),
        )
        .job(
            "wf.sum",
            handler("wf.sum", |ctx, payload: Value| async move {
                let keys: Vec<String> = payload["from"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|key| key.as_str().unwrap_or_default().to_owned())
                    .collect();
                let outputs = ctx
                    .prerequisite_outputs(&keys)
                    .await
                    .map_err(|e| JobFailure::terminal(e.code, e.message))?;
                let total: i64 = outputs
                    .iter()
                    .flatten()
                    .filter_map(|output| output["value"].as_i64())
                    .sum();
                Ok(JobCompletion::with_output(json!({ "value": total })))
            }),
        )
        .job(
            "wf.fail",
            handler("wf.fail", |_, _| async {
                Err::<JobCompletion, _>(JobFailure::terminal("wf.broken", "always fails"))
            }),
        )
}

async fn start(pool: &PgPool, worker: &str) -> Supervisor {
    let catalog = catalog();
    catalog.sync_definitions(pool).await.unwrap();
    Supervisor::builder(pool, fast_config(worker))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn diamond_succeeds_and_the_last_step_reads_the_first_steps_output(pool: PgPool) {
    let supervisor = start(&pool, "w-diamond").await;
    let meta = json!({});
    let (a, b, c) = (
        json!({"value": 5}),
        json!({"value": 1}),
        json!({"value": 2}),
    );
    let d = json!({"from": ["a", "b", "c"]});
    let run = WorkflowDagBuilder::new("wf.diamond", &meta)
        .job("a", "wf.echo", &a)
        .unwrap()
        .job("b", "wf.echo", &b)
        .unwrap()
        .after_success("b", ["a"])
        .unwrap()
        .job("c", "wf.echo", &c)
        .unwrap()
        .after_success("c", ["a"])
        .unwrap()
        .job("d", "wf.sum", &d)
        .unwrap()
        .after_success("d", ["b", "c", "a"])
        .unwrap()
        .result_step("d")
        .unwrap()
        .build()
        .unwrap();
    let handle = enqueue_workflow_run_handle(&pool, &run).await.unwrap();
    let result = handle.get_result(wait_long()).await.unwrap();
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    assert_eq!(result, json!({"value": 8}), "d read a, b and c");
    assert_eq!(
        handle.get_status().await.unwrap(),
        WorkflowRunStatus::Succeeded
    );
    assert!(
        step_statuses(&pool, handle.id())
            .await
            .iter()
            .all(|(_, s)| *s == WorkflowStepStatus::Succeeded)
    );
}

/// A run of two `job_type` steps, `next` after `root`'s success.
fn chain<'a>(
    workflow_type: &'a str,
    job_type: &'a str,
    meta: &'a Value,
    payload: &'a Value,
) -> WorkflowRunEnqueue<'a> {
    WorkflowDagBuilder::new(workflow_type, meta)
        .job("root", job_type, payload)
        .unwrap()
        .job("next", job_type, payload)
        .unwrap()
        .after_success("next", ["root"])
        .unwrap()
        .build()
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_released_steps_job_takes_the_steps_id(pool: PgPool) {
    let supervisor = start(&pool, "w-step-ids").await;
    let (meta, value) = (json!({}), json!({"value": 1}));
    let run = chain("wf.chain", "wf.echo", &meta, &value);
    let enqueued = enqueue_workflow_run(&pool, &run).await.unwrap();
    wait_for_run(&pool, enqueued.id, WorkflowRunStatus::Succeeded).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let steps = list_workflow_steps(&pool, enqueued.id, TenantScope::Admin)
        .await
        .unwrap();
    // The root is released by the enqueue, the other by its prerequisite's completion.
    for step in &steps {
        assert_eq!(
            step.job_id.map(|job| job.0),
            Some(step.id.0),
            "step {}",
            step.step_key
        );
    }
    let jobs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runledger.job_queue WHERE workflow_step_id = id AND status = 'SUCCEEDED'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(jobs, 2, "both jobs ran under their steps' ids");
}

/// The statements that end a job outside the worker's batch of successes end its step too: a
/// failure, the reaper (on the last attempt) and the claim's dead letter of a payload it cannot
/// decode. Each root step fails with its job's error, and its dependent is canceled.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn each_statement_that_dead_letters_a_step_job_fails_its_step(pool: PgPool) {
    let once = DefinitionOpts {
        max_attempts: 1,
        ..DefinitionOpts::default()
    };
    define(&pool, "wf.once", once).await;
    let (meta, value) = (json!({}), json!({"value": 1}));
    let enqueue_chain = |workflow_type: &'static str| {
        let run = chain(workflow_type, "wf.once", &meta, &value);
        let pool = pool.clone();
        async move { enqueue_workflow_run(&pool, &run).await.unwrap().id }
    };

    let failed = enqueue_chain("wf.failed").await;
    let job = claim_one(&pool).await;
    let failure = JobFailure::terminal("step.broke", "the step broke");
    complete_job_failure(&pool, &job.lease(), &failure)
        .await
        .unwrap();

    let reaped = enqueue_chain("wf.reaped").await;
    let job = claim_one(&pool).await;
    expire_lease(&pool, job.id).await;
    assert_eq!(
        reap_expired_leases(&pool, 10, Duration::ZERO)
            .await
            .unwrap()
            .len(),
        1
    );

    let unreadable = enqueue_chain("wf.unreadable").await;
    sqlx::query(
        "UPDATE runledger.job_queue SET payload = (repeat('[', 200) || repeat(']', 200))::jsonb
         WHERE workflow_run_id = $1",
    )
    .bind(unreadable.0)
    .execute(&pool)
    .await
    .unwrap();
    assert!(claim(&pool, "w-unreadable", 10).await.is_empty());

    for (run, code) in [
        (failed, "step.broke"),
        (reaped, "job.lease_expired"),
        (unreadable, "job.payload_too_deep"),
    ] {
        let record = get_workflow_run(&pool, run, WorkflowRunHandleScope::Admin)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            record.status,
            WorkflowRunStatus::CompletedWithErrors,
            "{code}"
        );
        let steps = list_workflow_steps(&pool, run, TenantScope::Admin)
            .await
            .unwrap();
        let find = |key: &str| steps.iter().find(|s| s.step_key == key).unwrap();
        assert_eq!(find("root").status, WorkflowStepStatus::Failed, "{code}");
        assert_eq!(find("root").last_error_code.as_deref(), Some(code));
        assert_eq!(find("next").status, WorkflowStepStatus::Canceled, "{code}");
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn failed_after_success_prerequisite_cancels_the_dependent_but_siblings_run(pool: PgPool) {
    let supervisor = start(&pool, "w-unsatisfied").await;
    let meta = json!({});
    let (ok, sum) = (json!({"value": 1}), json!({"from": []}));
    let run = WorkflowDagBuilder::new("wf.failing", &meta)
        .job("a", "wf.echo", &ok)
        .unwrap()
        .job("b", "wf.fail", &ok)
        .unwrap()
        .after_success("b", ["a"])
        .unwrap()
        .job("c", "wf.echo", &ok)
        .unwrap()
        .after_success("c", ["a"])
        .unwrap()
        .job("d", "wf.sum", &sum)
        .unwrap()
        .after_success("d", ["b", "c"])
        .unwrap()
        .job("e", "wf.echo", &ok)
        .unwrap()
        .after_success("e", ["d"])
        .unwrap()
        .build()
        .unwrap();
    let enqueued = enqueue_workflow_run(&pool, &run).await.unwrap();
    wait_for_run(&pool, enqueued.id, WorkflowRunStatus::CompletedWithErrors).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let steps = list_workflow_steps(&pool, enqueued.id, TenantScope::Admin)
        .await
        .unwrap();
    let find = |key: &str| steps.iter().find(|s| s.step_key == key).unwrap();
    assert_eq!(find("b").status, WorkflowStepStatus::Failed);
    assert_eq!(
        find("c").status,
        WorkflowStepStatus::Succeeded,
        "the sibling still ran"
    );
    assert_eq!(find("d").status, WorkflowStepStatus::Canceled);
    assert_eq!(
        find("d").last_error_code.as_deref(),
        Some("workflow.dependency_unsatisfied")
    );
    assert_eq!(
        find("e").status,
        WorkflowStepStatus::Canceled,
        "cancellation cascades"
    );
    assert_eq!(find("d").job_id, None, "a canceled step never got a job");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn after_terminal_dependent_runs_even_when_its_prerequisite_failed(pool: PgPool) {
    let supervisor = start(&pool, "w-terminal").await;
    let meta = json!({});
    let (ok, sum) = (json!({"value": 1}), json!({"from": ["b"]}));
    let run = WorkflowDagBuilder::new("wf.cleanup", &meta)
        .job("b", "wf.fail", &ok)
        .unwrap()
        .job("d", "wf.sum", &sum)
        .unwrap()
        .after_terminal("d", ["b"])
        .unwrap()
        .build()
        .unwrap();
    let enqueued = enqueue_workflow_run(&pool, &run).await.unwrap();
    wait_for_run(&pool, enqueued.id, WorkflowRunStatus::CompletedWithErrors).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    assert_eq!(
        step_statuses(&pool, enqueued.id).await,
        vec![
            ("b".to_owned(), WorkflowStepStatus::Failed),
            ("d".to_owned(), WorkflowStepStatus::Succeeded)
        ]
    );
}

fn gate_run<'a>(
    meta: &'a Value,
    payload: &'a Value,
) -> runledger_engine::core::jobs::WorkflowRunEnqueue<'a> {
    use runledger_engine::core::jobs::{
        JobType, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
    };
    WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf.approval"), meta)
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("approval")).build())
        .step(
            WorkflowStepEnqueueBuilder::new(StepKey::new("ship"), JobType::new("wf.echo"), payload)
                .depends_on_success(StepKey::new("approval"))
                .build(),
        )
        .result_step(StepKey::new("ship"))
        .build()
        .unwrap()
}

fn completion<'a>(
    run: WorkflowRunId,
    status: WorkflowStepStatus,
    reason: Option<&'a str>,
    output: Option<&'a Value>,
) -> CompleteExternalWorkflowStepInput<'a> {
    CompleteExternalWorkflowStepInput {
        workflow_run_id: run,
        organization_id: None,
        step_key: StepKey::new("approval"),
        terminal_status: status,
        status_reason: reason,
        last_error_code: None,
        last_error_message: None,
        output,
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn approved_gate_releases_its_dependent_and_retries_are_checked(pool: PgPool) {
    let supervisor = start(&pool, "w-gate").await;
    let (meta, payload) = (json!({}), json!({"value": 3}));
    let handle = enqueue_workflow_run_handle(&pool, &gate_run(&meta, &payload))
        .await
        .unwrap();
    assert_eq!(
        handle.get_status().await.unwrap(),
        WorkflowRunStatus::WaitingForExternal
    );

    let approval = json!({"approved_by": "ops"});
    let input = completion(
        handle.id(),
        WorkflowStepStatus::Succeeded,
        Some("approved"),
        Some(&approval),
    );
    assert_eq!(
        complete_external_workflow_step(&pool, &input)
            .await
            .unwrap(),
        ExternalStepCompletion::Completed
    );
    assert_eq!(
        handle.get_result(wait_long()).await.unwrap(),
        json!({"value": 3})
    );
    assert_eq!(
        complete_external_workflow_step(&pool, &input)
            .await
            .unwrap(),
        ExternalStepCompletion::AlreadyCompleted,
        "an identical retry is idempotent"
    );
    let other_output = json!({"approved_by": "someone else"});
    let err = complete_external_workflow_step(
        &pool,
        &completion(
            handle.id(),
            WorkflowStepStatus::Succeeded,
            Some("approved"),
            Some(&other_output),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.code(),
        "workflow.external_step_conflicting_output_retry"
    );
    let err = complete_external_workflow_step(
        &pool,
        &completion(
            handle.id(),
            WorkflowStepStatus::Failed,
            Some("rejected"),
            None,
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.code(),
        "workflow.external_step_conflicting_completion_retry"
    );
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn rejected_or_canceled_gate_ends_the_run_with_errors(pool: PgPool) {
    let (meta, payload) = (json!({}), json!({"value": 3}));
    for status in [WorkflowStepStatus::Failed, WorkflowStepStatus::Canceled] {
        catalog().sync_definitions(&pool).await.unwrap();
        let run = enqueue_workflow_run(&pool, &gate_run(&meta, &payload))
            .await
            .unwrap();
        complete_external_workflow_step(&pool, &completion(run.id, status, Some("no"), None))
            .await
            .unwrap();
        let record = get_workflow_run(&pool, run.id, WorkflowRunHandleScope::Global)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            record.status,
            WorkflowRunStatus::CompletedWithErrors,
            "{status}"
        );
        let steps = step_statuses(&pool, run.id).await;
        assert_eq!(steps[1], ("ship".to_owned(), WorkflowStepStatus::Canceled));
        let handle = WorkflowRunHandle::new(&pool, run.id, WorkflowRunHandleScope::Global);
        assert_eq!(
            handle.get_result(wait_long()).await.unwrap_err().code(),
            "workflow.result_unsuccessful_terminal"
        );
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn external_completion_errors_have_their_own_codes(pool: PgPool) {
    catalog().sync_definitions(&pool).await.unwrap();
    let (meta, payload) = (json!({}), json!({"value": 3}));
    let run = enqueue_workflow_run(&pool, &gate_run(&meta, &payload))
        .await
        .unwrap();
    let mut input = completion(run.id, WorkflowStepStatus::Succeeded, None, None);

    input.step_key = StepKey::new("ship");
    let err = complete_external_workflow_step(&pool, &input)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workflow.step_not_external");
    input.step_key = StepKey::new("nope");
    let err = complete_external_workflow_step(&pool, &input)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workflow.step_not_found");
    input.step_key = StepKey::new("approval");
    input.organization_id = Some(uuid::Uuid::now_v7());
    let err = complete_external_workflow_step(&pool, &input)
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        "workflow.run_not_found",
        "another organization's run is invisible"
    );
    input.organization_id = None;
    let output = json!(1);
    input.terminal_status = WorkflowStepStatus::Failed;
    input.output = Some(&output);
    let err = complete_external_workflow_step(&pool, &input)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workflow.external_step_output_requires_success");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn canceling_mid_flight_cancels_everything_and_a_late_completion_releases_nothing(
    pool: PgPool,
) {
    let started = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&started);
    let catalog = JobCatalog::new().job(
        "wf.slow",
        handler("wf.slow", move |_, _| {
            let seen = Arc::clone(&seen);
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let supervisor = Supervisor::builder(&pool, fast_config("w-cancel"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    let meta = json!({});
    let payload = json!({});
    use runledger_engine::core::jobs::{
        JobType, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
    };
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf.cancel"), &meta)
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("slow"),
                JobType::new("wf.slow"),
                &payload,
            )
            .build(),
        )
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("gate")).build())
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("after"),
                JobType::new("wf.slow"),
                &payload,
            )
            .depends_on_success(StepKey::new("slow"))
            .depends_on_success(StepKey::new("gate"))
            .build(),
        )
        .build()
        .unwrap();
    let enqueued = enqueue_workflow_run(&pool, &run).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while started.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One step leased, one blocked, one gate waiting.
    cancel_workflow_run(&pool, enqueued.id, WorkflowRunHandleScope::Global)
        .await
        .unwrap();
    // The leased step's handler finishes after the cancel; its completion is refused.
    tokio::time::sleep(Duration::from_secs(3)).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let record = get_workflow_run(&pool, enqueued.id, WorkflowRunHandleScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, WorkflowRunStatus::Canceled);
    assert!(
        step_statuses(&pool, enqueued.id)
            .await
            .iter()
            .all(|(_, s)| *s == WorkflowStepStatus::Canceled),
        "{:?}",
        step_statuses(&pool, enqueued.id).await
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "nothing was released after the cancel"
    );
    let job_statuses: Vec<String> =
        sqlx::query_scalar("SELECT status FROM runledger.job_queue WHERE workflow_run_id = $1")
            .bind(enqueued.id.0)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(job_statuses, vec!["CANCELED".to_owned()]);
    // Canceling again is a no-op.
    cancel_workflow_run(&pool, enqueued.id, WorkflowRunHandleScope::Global)
        .await
        .unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn result_waits_are_woken_by_notification_and_scoped(pool: PgPool) {
    let supervisor = start(&pool, "w-result").await;
    let org = uuid::Uuid::now_v7();
    let (meta, payload) = (json!({}), json!({"value": 9}));
    let run = WorkflowDagBuilder::new("wf.result", &meta)
        .organization_id(org)
        .job("only", "wf.echo", &payload)
        .unwrap()
        .result_step("only")
        .unwrap()
        .build()
        .unwrap();
    let handle = enqueue_workflow_run_handle(&pool, &run).await.unwrap();
    // With an hour-long poll interval only the notification can end this wait in time.
    let notified_only = WorkflowRunWaitOptions {
        timeout: Some(WAIT),
        poll_interval: Duration::from_secs(3_600),
    };
    assert_eq!(
        handle.get_result(notified_only).await.unwrap(),
        json!({"value": 9})
    );
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    for scope in [
        WorkflowRunHandleScope::Global,
        WorkflowRunHandleScope::Organization(uuid::Uuid::now_v7()),
    ] {
        let foreign = WorkflowRunHandle::new(&pool, handle.id(), scope);
        assert_eq!(
            foreign.get_status().await.unwrap_err().code(),
            "workflow.run_not_found"
        );
    }
    let admin = WorkflowRunHandle::new(&pool, handle.id(), WorkflowRunHandleScope::Admin);
    assert_eq!(
        admin.get_status().await.unwrap(),
        WorkflowRunStatus::Succeeded
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_result_wait_takes_one_connection_from_its_pool(pool: PgPool) {
    // Every connection the waiter's pool hands out, new or reused.
    let handed_out = Arc::new(AtomicUsize::new(0));
    let (on_connect, on_acquire) = (Arc::clone(&handed_out), Arc::clone(&handed_out));
    let waiter_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .after_connect(move |_, _| {
            on_connect.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        })
        .before_acquire(move |_, _| {
            on_acquire.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(true) })
        })
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .unwrap();
    // Opening the pool took its first connection; count from here.
    handed_out.store(0, Ordering::SeqCst);
    let (meta, payload) = (json!({}), json!({"value": 4}));
    let run = WorkflowDagBuilder::new("wf.one-connection", &meta)
        .job("first", "wf.echo", &payload)
        .unwrap()
        .job("last", "wf.echo", &payload)
        .unwrap()
        .after_success("last", ["first"])
        .unwrap()
        .result_step("last")
        .unwrap()
        .build()
        .unwrap();
    catalog().sync_definitions(&pool).await.unwrap();
    let enqueued = enqueue_workflow_run(&pool, &run).await.unwrap();
    let handle = WorkflowRunHandle::new(&waiter_pool, enqueued.id, WorkflowRunHandleScope::Global);
    let notified_only = WorkflowRunWaitOptions {
        timeout: Some(WAIT),
        poll_interval: Duration::from_secs(3_600),
    };
    let waiting = tokio::spawn(async move { handle.get_result(notified_only).await });
    // No worker runs yet: the wait's first read finds the run going, and waits.
    let deadline = Instant::now() + WAIT;
    while handed_out.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the wait never took a connection"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let supervisor = start(&pool, "w-one-connection").await;
    assert_eq!(waiting.await.unwrap().unwrap(), json!({"value": 4}));
    // The listener's connection read the run as well: a read on a second connection just
    // before it could make the pool open one more.
    assert_eq!(handed_out.load(Ordering::SeqCst), 1);
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn short_result_wait_times_out_and_undeclared_results_are_reported(pool: PgPool) {
    catalog().sync_definitions(&pool).await.unwrap();
    let (meta, payload) = (json!({}), json!({"value": 1}));
    let declared = WorkflowDagBuilder::new("wf.nobody-runs-this", &meta)
        .job("only", "wf.echo", &payload)
        .unwrap()
        .result_step("only")
        .unwrap()
        .build()
        .unwrap();
    let handle = enqueue_workflow_run_handle(&pool, &declared).await.unwrap();
    let short = WorkflowRunWaitOptions {
        timeout: Some(Duration::from_millis(200)),
        poll_interval: Duration::from_millis(50),
    };
    assert_eq!(
        handle.get_result(short).await.unwrap_err().code(),
        "workflow.result_wait_timeout"
    );

    let undeclared = WorkflowDagBuilder::new("wf.no-result", &meta)
        .job("only", "wf.echo", &payload)
        .unwrap()
        .build()
        .unwrap();
    let handle = enqueue_workflow_run_handle(&pool, &undeclared)
        .await
        .unwrap();
    assert_eq!(
        handle.get_result(short).await.unwrap_err().code(),
        "workflow.result_not_declared"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn keyed_workflow_enqueue_with_reordered_steps_returns_the_same_run(pool: PgPool) {
    catalog().sync_definitions(&pool).await.unwrap();
    let (meta, payload) = (json!({"source": "api"}), json!({"value": 1}));
    let first = WorkflowDagBuilder::new("wf.keyed", &meta)
        .idempotency_key("order:1")
        .job("a", "wf.echo", &payload)
        .unwrap()
        .job("b", "wf.echo", &payload)
        .unwrap()
        .job("c", "wf.sum", &payload)
        .unwrap()
        .after_success("c", ["a", "b"])
        .unwrap()
        .build()
        .unwrap();
    let reordered = WorkflowDagBuilder::new("wf.keyed", &meta)
        .idempotency_key("order:1")
        .job("c", "wf.sum", &payload)
        .unwrap()
        .job("b", "wf.echo", &payload)
        .unwrap()
        .job("a", "wf.echo", &payload)
        .unwrap()
        .after_success("c", ["b", "a"])
        .unwrap()
        .build()
        .unwrap();
    let original = enqueue_workflow_run(&pool, &first).await.unwrap();
    let retry = enqueue_workflow_run(&pool, &reordered).await.unwrap();
    assert!(original.created);
    assert!(!retry.created);
    assert_eq!(retry.id, original.id);

    let changed = WorkflowDagBuilder::new("wf.keyed", &meta)
        .idempotency_key("order:1")
        .job("a", "wf.echo", &payload)
        .unwrap()
        .build()
        .unwrap();
    let err = enqueue_workflow_run(&pool, &changed).await.unwrap_err();
    assert_eq!(err.code(), "workflow.idempotency_conflict");
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger.workflow_runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_inside_a_rolled_back_transaction_leaves_no_run_and_unknown_types_are_refused(
    pool: PgPool,
) {
    catalog().sync_definitions(&pool).await.unwrap();
    let (meta, payload) = (json!({}), json!({}));
    let run = WorkflowDagBuilder::new("wf.tx", &meta)
        .job("a", "wf.echo", &payload)
        .unwrap()
        .build()
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    enqueue_workflow_run(&mut *tx, &run).await.unwrap();
    tx.rollback().await.unwrap();
    let rows: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM runledger.workflow_runs) + (SELECT count(*) FROM runledger.job_queue)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(rows, 0);

    let unknown = WorkflowDagBuilder::new("wf.tx", &meta)
        .job("a", "wf.unknown", &payload)
        .unwrap()
        .build()
        .unwrap();
    let err = enqueue_workflow_run(&pool, &unknown).await.unwrap_err();
    assert_eq!(err.code(), "job.definition_not_found_or_disabled");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_step_reading_a_step_that_is_not_its_prerequisite_gets_a_code(pool: PgPool) {
    let supervisor = start(&pool, "w-flow").await;
    let (meta, a, b) = (json!({}), json!({"value": 1}), json!({"from": ["a"]}));
    // b does not depend on a, so reading a's output is refused and b fails terminally.
    let run = WorkflowDagBuilder::new("wf.flow", &meta)
        .job("a", "wf.echo", &a)
        .unwrap()
        .job("b", "wf.sum", &b)
        .unwrap()
        .build()
        .unwrap();
    let enqueued = enqueue_workflow_run(&pool, &run).await.unwrap();
    wait_for_run(&pool, enqueued.id, WorkflowRunStatus::CompletedWithErrors).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
    let steps = list_workflow_steps(&pool, enqueued.id, TenantScope::Admin)
        .await
        .unwrap();
    let b = steps.iter().find(|s| s.step_key == "b").unwrap();
    assert_eq!(b.status, WorkflowStepStatus::Failed);
    assert_eq!(
        b.last_error_code.as_deref(),
        Some("workflow.not_a_prerequisite")
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn steps_appended_while_a_gate_waits_run_and_an_identical_retry_is_a_no_op(pool: PgPool) {
    use runledger_engine::core::jobs::{JobType, WorkflowStepEnqueueBuilder};
    use runledger_engine::postgres::jobs::{
        WorkflowAppend, WorkflowAppendOutcome, append_workflow_steps,
    };

    let supervisor = start(&pool, "w-append").await;
    let (meta, payload) = (json!({}), json!({"value": 3}));
    let run = enqueue_workflow_run(&pool, &gate_run(&meta, &payload))
        .await
        .unwrap();
    assert_eq!(run.status, WorkflowRunStatus::WaitingForExternal);

    let (now, later) = (json!({"value": 10}), json!({"from": ["extra"]}));
    let append = WorkflowAppend {
        workflow_run_id: run.id,
        organization_id: None,
        mutation_key: "add-extra",
        steps: vec![
            WorkflowStepEnqueueBuilder::new(StepKey::new("extra"), JobType::new("wf.echo"), &now)
                .build(),
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("after-gate"),
                JobType::new("wf.sum"),
                &later,
            )
            .depends_on_success(StepKey::new("extra"))
            .depends_on_success(StepKey::new("approval"))
            .build(),
        ],
    };
    assert_eq!(
        append_workflow_steps(&pool, &append).await.unwrap(),
        WorkflowAppendOutcome::Applied
    );
    assert_eq!(
        append_workflow_steps(&pool, &append).await.unwrap(),
        WorkflowAppendOutcome::AlreadyApplied
    );
    let mut changed = append.clone();
    changed.steps.truncate(1);
    let err = append_workflow_steps(&pool, &changed).await.unwrap_err();
    assert_eq!(err.code(), "workflow.append_conflicting_retry");

    // The appended step with no pending prerequisite runs while the gate still waits.
    let deadline = Instant::now() + WAIT;
    loop {
        let steps = step_statuses(&pool, run.id).await;
        if steps.contains(&("extra".to_owned(), WorkflowStepStatus::Succeeded)) {
            assert!(steps.contains(&("after-gate".to_owned(), WorkflowStepStatus::Blocked)));
            break;
        }
        assert!(Instant::now() < deadline, "{steps:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let approve = completion(run.id, WorkflowStepStatus::Succeeded, None, None);
    complete_external_workflow_step(&pool, &approve)
        .await
        .unwrap();
    wait_for_run(&pool, run.id, WorkflowRunStatus::Succeeded).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let steps = list_workflow_steps(&pool, run.id, TenantScope::Admin)
        .await
        .unwrap();
    let after = steps.iter().find(|s| s.step_key == "after-gate").unwrap();
    assert_eq!(
        after.output,
        Some(json!({"value": 10})),
        "read the appended step's output"
    );
    assert_eq!(
        after.dependencies,
        vec![
            ("approval".to_owned(), "SUCCESS".to_owned()),
            ("extra".to_owned(), "SUCCESS".to_owned())
        ]
    );
    let err = append_workflow_steps(
        &pool,
        &WorkflowAppend {
            mutation_key: "too-late",
            ..append.clone()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "workflow.append_run_finished");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn admin_reads_list_and_count_runs_by_status_type_and_organization(pool: PgPool) {
    use runledger_engine::postgres::jobs::{
        WorkflowRunCountFilter, WorkflowRunListFilter, count_workflow_runs, list_workflow_runs,
    };

    catalog().sync_definitions(&pool).await.unwrap();
    let org = uuid::Uuid::now_v7();
    let (meta, payload) = (json!({}), json!({"value": 1}));
    for (workflow_type, organization) in [
        ("billing.invoice", Some(org)),
        ("billing.refund", None),
        ("profiles.research", Some(org)),
    ] {
        let mut builder = WorkflowDagBuilder::new(workflow_type, &meta);
        if let Some(org) = organization {
            builder = builder.organization_id(org);
        }
        let run = builder
            .job("a", "wf.echo", &payload)
            .unwrap()
            .build()
            .unwrap();
        enqueue_workflow_run(&pool, &run).await.unwrap();
    }
    let gate = enqueue_workflow_run(&pool, &gate_run(&meta, &payload))
        .await
        .unwrap();

    let billing = list_workflow_runs(
        &pool,
        &WorkflowRunListFilter {
            workflow_type_contains: Some("BILLING".to_owned()),
            ..WorkflowRunListFilter::default()
        },
    )
    .await
    .unwrap();
    let types: Vec<_> = billing.iter().map(|r| r.workflow_type.as_str()).collect();
    assert_eq!(types, ["billing.refund", "billing.invoice"], "newest first");

    let count = |filter: WorkflowRunCountFilter| {
        let pool = pool.clone();
        async move { count_workflow_runs(&pool, &filter).await.unwrap() }
    };
    assert_eq!(count(WorkflowRunCountFilter::default()).await, 4);
    assert_eq!(
        count(WorkflowRunCountFilter {
            organization_id: Some(org),
            ..WorkflowRunCountFilter::default()
        })
        .await,
        2
    );
    assert_eq!(
        count(WorkflowRunCountFilter {
            status: Some(WorkflowRunStatus::WaitingForExternal),
            ..WorkflowRunCountFilter::default()
        })
        .await,
        1
    );
    let page = list_workflow_runs(
        &pool,
        &WorkflowRunListFilter {
            limit: 2,
            ..WorkflowRunListFilter::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(page[0].id, gate.id);
    let rest = list_workflow_runs(
        &pool,
        &WorkflowRunListFilter {
            after: Some(page[1].id),
            ..WorkflowRunListFilter::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(rest.len(), 2);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_retried_step_stays_active_and_its_dependent_waits_for_the_retry(pool: PgPool) {
    let catalog = catalog().job(
        "wf.flaky",
        handler("wf.flaky", |ctx, _| async move {
            if ctx.attempt == 1 {
                Err(JobFailure::retryable("wf.later", "try again").with_retry_after(Duration::ZERO))
            } else {
                Ok(JobCompletion::with_output(json!({ "value": 4 })))
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    runledger_engine::postgres::jobs::upsert_job_definition(
        &pool,
        &runledger_engine::postgres::jobs::JobDefinitionUpsert::new("wf.flaky")
            .retry_delays_ms(2_000, 2_000),
    )
    .await
    .unwrap();
    let (meta, empty, sum) = (json!({}), json!({}), json!({"from": ["flaky"]}));
    let run = WorkflowDagBuilder::new("wf.retry", &meta)
        .job("flaky", "wf.flaky", &empty)
        .unwrap()
        .job("sum", "wf.sum", &sum)
        .unwrap()
        .after_success("sum", ["flaky"])
        .unwrap()
        .result_step("sum")
        .unwrap()
        .build()
        .unwrap();
    let handle = enqueue_workflow_run_handle(&pool, &run).await.unwrap();
    let supervisor = Supervisor::builder(&pool, fast_config("w-flaky"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();

    // While the retry is pending the step is ENQUEUED again, not failed, and the run runs on.
    let deadline = Instant::now() + WAIT;
    loop {
        let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger.job_attempts")
            .fetch_one(&pool)
            .await
            .unwrap();
        let steps = step_statuses(&pool, handle.id()).await;
        if attempts >= 1 && steps[0].1 != WorkflowStepStatus::Succeeded {
            assert!(
                matches!(
                    steps[0].1,
                    WorkflowStepStatus::Enqueued | WorkflowStepStatus::Running
                ),
                "{steps:?}"
            );
            assert_eq!(steps[1].1, WorkflowStepStatus::Blocked);
            assert_eq!(
                handle.get_status().await.unwrap(),
                WorkflowRunStatus::Running
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first attempt never failed: {steps:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        handle.get_result(wait_long()).await.unwrap(),
        json!({"value": 4})
    );
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_step_reads_running_while_its_job_is_leased_and_its_claim_writes_no_step_row(
    pool: PgPool,
) {
    use runledger_engine::postgres::jobs::{
        ClaimRequest, claim_jobs, complete_job_failure, complete_job_success,
    };

    crate::support::define(&pool, "wf.step", crate::support::DefinitionOpts::default()).await;
    let meta = json!({});
    let payload = json!({});
    let run = WorkflowDagBuilder::new("wf.running", &meta)
        .job("only", "wf.step", &payload)
        .unwrap()
        .build()
        .unwrap();
    let run_id = enqueue_workflow_run(&pool, &run).await.unwrap().id;
    let stored = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT status FROM runledger.workflow_steps WHERE workflow_run_id = $1",
        )
        .bind(run_id.0)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let claim = || async {
        claim_jobs(
            &pool,
            &ClaimRequest::new("w-running", 1, Duration::from_secs(60)),
        )
        .await
        .unwrap()
        .remove(0)
    };
    let step_version = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT xmin::text FROM runledger.workflow_steps WHERE workflow_run_id = $1",
        )
        .bind(run_id.0)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let released = step_version().await;

    let job = claim().await;
    assert_eq!(
        step_statuses(&pool, run_id).await[0].1,
        WorkflowStepStatus::Running
    );
    assert_eq!(stored().await, "ENQUEUED");
    assert_eq!(
        step_version().await,
        released,
        "the claim rewrote the step row"
    );

    complete_job_failure(
        &pool,
        &job.lease(),
        &JobFailure::retryable("wf.again", "once more"),
    )
    .await
    .unwrap();
    assert_eq!(
        step_statuses(&pool, run_id).await[0].1,
        WorkflowStepStatus::Enqueued
    );
    sqlx::query("UPDATE runledger.job_queue SET next_run_at = now() WHERE workflow_run_id = $1")
        .bind(run_id.0)
        .execute(&pool)
        .await
        .unwrap();

    let job = claim().await;
    assert_eq!(
        step_statuses(&pool, run_id).await[0].1,
        WorkflowStepStatus::Running
    );
    complete_job_success(&pool, &job.lease(), None)
        .await
        .unwrap();
    assert_eq!(
        step_statuses(&pool, run_id).await[0].1,
        WorkflowStepStatus::Succeeded
    );
    assert_eq!(stored().await, "SUCCEEDED");
}

/// The keys of `width` middle steps, in the order of their keys.
fn middle_keys(width: usize) -> Vec<String> {
    (0..width).map(|n| format!("mid-{n:03}")).collect()
}

/// A `start -> one step per key -> end` run of `wf.step` jobs with empty payloads.
fn fan_out_run<'a>(
    meta: &'a Value,
    keys: &'a [String],
) -> runledger_engine::core::jobs::WorkflowRunEnqueue<'a> {
    let mut builder = WorkflowDagBuilder::new("wf.fan", meta)
        .job("start", "wf.step", meta)
        .unwrap()
        .job("end", "wf.step", meta)
        .unwrap();
    for key in keys {
        builder = builder
            .job(key, "wf.step", meta)
            .unwrap()
            .after_success(key, ["start"])
            .unwrap();
    }
    builder
        .after_success("end", keys.iter().map(String::as_str))
        .unwrap()
        .build()
        .unwrap()
}

/// Defines `wf.step` and enqueues a `start -> width steps -> end` run of it.
async fn enqueue_fan_out(pool: &PgPool, width: usize) -> WorkflowRunId {
    crate::support::define(pool, "wf.step", crate::support::DefinitionOpts::default()).await;
    let (meta, keys) = (json!({}), middle_keys(width));
    enqueue_workflow_run(pool, &fan_out_run(&meta, &keys))
        .await
        .unwrap()
        .id
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_fan_out_release_writes_each_released_step_once_and_gives_it_its_job(pool: PgPool) {
    use runledger_engine::postgres::jobs::{ClaimRequest, claim_jobs, complete_job_success};

    const WIDTH: usize = 20;
    let run_id = enqueue_fan_out(&pool, WIDTH).await;
    let start = claim_jobs(
        &pool,
        &ClaimRequest::new("w-fan", 10, Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert_eq!(start.len(), 1, "only the first step is released at enqueue");

    // Counted within one transaction (the backend's counts may still hold earlier ones).
    let mut tx = pool.begin().await.unwrap();
    let (before, _) = step_updates(&mut tx).await;
    complete_job_success(&mut *tx, &start[0].lease(), None)
        .await
        .unwrap();
    let (after, _) = step_updates(&mut tx).await;
    tx.commit().await.unwrap();
    let updated = after - before;
    // The first step finished (one row) and each middle step released (one row each): no
    // second write of a released step.
    assert_eq!(updated, 1 + WIDTH as i64);

    let linked: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT s.step_key, s.status, j.id IS NOT NULL AND j.status = 'PENDING' \
         FROM runledger.workflow_steps s \
         LEFT JOIN runledger.job_queue j ON j.id = s.job_id AND j.workflow_step_id = s.id \
         WHERE s.workflow_run_id = $1 AND s.step_key <> 'start' ORDER BY s.step_key",
    )
    .bind(run_id.0)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(linked.len(), WIDTH + 1);
    for (key, status, has_job) in linked {
        if key == "end" {
            assert_eq!((status.as_str(), has_job), ("BLOCKED", false), "{key}");
        } else {
            assert_eq!((status.as_str(), has_job), ("ENQUEUED", true), "{key}");
        }
    }
}

/// A run wider than one statement's batch of steps (5,000) is written in several, each step
/// with its edges, and its release sees every one.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_run_wider_than_one_statement_keeps_every_step_and_edge(pool: PgPool) {
    use runledger_engine::postgres::jobs::{ClaimRequest, claim_jobs, complete_job_success};

    const WIDTH: usize = 6_000;
    let run_id = enqueue_fan_out(&pool, WIDTH).await;
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM runledger.workflow_steps WHERE workflow_run_id = $1), \
                (SELECT count(*) FROM runledger.workflow_step_dependencies WHERE workflow_run_id = $1)",
    )
    .bind(run_id.0)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(counts, (WIDTH as i64 + 2, 2 * WIDTH as i64));
    let start = claim_jobs(
        &pool,
        &ClaimRequest::new("w-wide", 10, Duration::from_secs(60)),
    )
    .await
    .unwrap();
    complete_job_success(&pool, &start[0].lease(), None)
        .await
        .unwrap();
    let released: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runledger.job_queue WHERE workflow_run_id = $1 AND status = 'PENDING'",
    )
    .bind(run_id.0)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        released, WIDTH as i64,
        "every middle step released, none of `end`"
    );
}

/// The step table's updates and heap-only updates in the current transaction.
async fn step_updates(tx: &mut sqlx::PgConnection) -> (i64, i64) {
    sqlx::query_as(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables \
         WHERE schemaname = 'runledger' AND relname = 'workflow_steps'",
    )
    .fetch_one(tx)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_fan_out_releases_and_finishes_its_steps_without_new_index_entries(pool: PgPool) {
    use runledger_engine::postgres::jobs::complete_jobs_success;

    // Wide enough to fill many pages.
    const WIDTH: usize = 300;
    define(&pool, "wf.step", DefinitionOpts::default()).await;
    let (meta, keys) = (json!({}), middle_keys(WIDTH));
    enqueue_workflow_run(&pool, &fan_out_run(&meta, &keys))
        .await
        .unwrap();

    // Each write runs in a transaction of its own, so that the counts are its own.
    let write = async |jobs: Vec<runledger_engine::postgres::jobs::ClaimedJob>| {
        let mut tx = pool.begin().await.unwrap();
        let before = step_updates(&mut tx).await;
        let done = complete_jobs_success(&mut *tx, "w-hot", &successes_of(&jobs))
            .await
            .unwrap();
        assert_eq!(done.len(), jobs.len());
        let after = step_updates(&mut tx).await;
        tx.commit().await.unwrap();
        (after.0 - before.0, after.1 - before.1)
    };

    // A transaction open from before the release to after the finishes (a long report, say)
    // keeps the release's old row versions from being pruned: the finishes must fit beside
    // them.
    let mut horizon = pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *horizon)
        .await
        .unwrap();
    sqlx::query("SELECT count(*) FROM runledger.workflow_runs")
        .execute(&mut *horizon)
        .await
        .unwrap();

    let start = claim(&pool, "w-hot", 10).await;
    assert_eq!(start.len(), 1);
    let (updated, in_place) = write(start).await;
    assert_eq!(
        updated,
        1 + WIDTH as i64,
        "the first step and its released dependents"
    );
    assert_eq!(
        in_place, updated,
        "every release update stays on its row's page"
    );

    let middle = claim(&pool, "w-hot", WIDTH as i64).await;
    assert_eq!(middle.len(), WIDTH);
    let (updated, in_place) = write(middle).await;
    // The middle steps finished and the last one counted down (and released).
    assert_eq!(updated, WIDTH as i64 + 1);
    assert_eq!(
        in_place, updated,
        "every finish update stays on its row's page"
    );
    horizon.rollback().await.unwrap();
}

/// The keys of a run's steps stored as `ENQUEUED` (released, their job not finished), sorted.
async fn enqueued_steps(pool: &PgPool, run: WorkflowRunId) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT step_key FROM runledger.workflow_steps \
         WHERE workflow_run_id = $1 AND status = 'ENQUEUED' ORDER BY step_key",
    )
    .bind(run.0)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Checks that the run's count of active steps is the number of its steps that are.
async fn assert_active_counted(pool: &PgPool, run: WorkflowRunId) {
    let (counted, active): (i32, i64) = sqlx::query_as(
        "SELECT w.active_steps, (SELECT count(*) FROM runledger.workflow_steps s \
                                 WHERE s.workflow_run_id = w.id \
                                   AND s.status IN ('ENQUEUED', 'RUNNING')) \
         FROM runledger.workflow_runs w WHERE w.id = $1",
    )
    .bind(run.0)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        i64::from(counted),
        active,
        "the run's count of active steps"
    );
}

/// Claims the run's released jobs, keyed by step.
async fn claim_steps(
    pool: &PgPool,
    worker: &str,
) -> std::collections::HashMap<String, runledger_engine::postgres::jobs::ClaimedJob> {
    use runledger_engine::postgres::jobs::{ClaimRequest, claim_jobs};
    claim_jobs(
        pool,
        &ClaimRequest::new(worker, 50, Duration::from_secs(60)),
    )
    .await
    .unwrap()
    .into_iter()
    .map(|job| (job.workflow_step_key.clone().unwrap_or_default(), job))
    .collect()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_runs_steps_follow_releases_failures_gates_appends_and_cancellation(pool: PgPool) {
    use runledger_engine::core::jobs::{
        JobType, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
    };
    use runledger_engine::postgres::jobs::{
        WorkflowAppend, append_workflow_steps, complete_job_failure, complete_job_success,
    };

    crate::support::define(&pool, "wf.step", crate::support::DefinitionOpts::default()).await;
    let (meta, payload) = (json!({}), json!({}));
    let job = |key: &'static str, after: &[&'static str]| {
        after.iter().fold(
            WorkflowStepEnqueueBuilder::new(StepKey::new(key), JobType::new("wf.step"), &payload),
            |step, prerequisite| step.depends_on_success(StepKey::new(prerequisite)),
        )
    };
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf.counted"), &meta)
        .step(job("a", &[]).build())
        .step(job("b", &["a"]).build())
        .step(job("c", &["a"]).build())
        .step(job("d", &["b"]).build())
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("gate")).build())
        .step(job("e", &["gate"]).build())
        .build()
        .unwrap();
    let run = enqueue_workflow_run(&pool, &run).await.unwrap().id;
    let status = |pool: PgPool| async move {
        get_workflow_run(&pool, run, TenantScope::Admin)
            .await
            .unwrap()
            .unwrap()
            .status
    };
    assert_eq!(enqueued_steps(&pool, run).await, ["a"], "root a");
    assert_active_counted(&pool, run).await;

    let jobs = claim_steps(&pool, "w-count").await;
    complete_job_success(&pool, &jobs["a"].lease(), None)
        .await
        .unwrap();
    assert_eq!(
        enqueued_steps(&pool, run).await,
        ["b", "c"],
        "a released b and c"
    );
    assert_active_counted(&pool, run).await;

    let jobs = claim_steps(&pool, "w-count").await;
    let broken = JobFailure::terminal("wf.broken", "always fails");
    complete_job_failure(&pool, &jobs["b"].lease(), &broken)
        .await
        .unwrap();
    assert_eq!(
        enqueued_steps(&pool, run).await,
        ["c"],
        "b failed and d was canceled"
    );
    assert_active_counted(&pool, run).await;
    assert!(
        step_statuses(&pool, run)
            .await
            .contains(&("d".to_owned(), WorkflowStepStatus::Canceled))
    );
    complete_job_success(&pool, &jobs["c"].lease(), None)
        .await
        .unwrap();
    assert_eq!(enqueued_steps(&pool, run).await, Vec::<String>::new());
    assert_active_counted(&pool, run).await;
    assert_eq!(
        status(pool.clone()).await,
        WorkflowRunStatus::WaitingForExternal,
        "only the gate is open"
    );

    let later = json!({});
    let append = WorkflowAppend {
        workflow_run_id: run,
        organization_id: None,
        mutation_key: "add-f",
        steps: vec![
            WorkflowStepEnqueueBuilder::new(StepKey::new("f"), JobType::new("wf.step"), &later)
                .build(),
        ],
    };
    append_workflow_steps(&pool, &append).await.unwrap();
    assert_eq!(enqueued_steps(&pool, run).await, ["f"], "appended root f");
    assert_active_counted(&pool, run).await;
    assert_eq!(status(pool.clone()).await, WorkflowRunStatus::Running);

    let approve = completion(run, WorkflowStepStatus::Succeeded, None, None);
    let approve = CompleteExternalWorkflowStepInput {
        step_key: StepKey::new("gate"),
        ..approve
    };
    complete_external_workflow_step(&pool, &approve)
        .await
        .unwrap();
    assert_eq!(
        enqueued_steps(&pool, run).await,
        ["e", "f"],
        "the gate released e"
    );
    assert_active_counted(&pool, run).await;

    let jobs = claim_steps(&pool, "w-count").await;
    complete_job_success(&pool, &jobs["f"].lease(), None)
        .await
        .unwrap();
    assert_eq!(enqueued_steps(&pool, run).await, ["e"]);
    assert_active_counted(&pool, run).await;
    cancel_workflow_run(&pool, run, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(
        enqueued_steps(&pool, run).await,
        Vec::<String>::new(),
        "canceled"
    );
    assert_eq!(status(pool.clone()).await, WorkflowRunStatus::Canceled);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_completion_batch_reads_each_of_its_steps_once(pool: PgPool) {
    use runledger_engine::postgres::jobs::{complete_job_success, complete_jobs_success};

    const WIDTH: usize = 40;
    const BATCH: usize = 20;
    enqueue_fan_out(&pool, WIDTH).await;
    let jobs = claim_steps(&pool, "w-reads").await;
    complete_job_success(&pool, &jobs["start"].lease(), None)
        .await
        .unwrap();
    let jobs = claim_steps(&pool, "w-reads").await;
    assert_eq!(jobs.len(), WIDTH);

    // Index scans of step rows, counted within one transaction: one per finished step and one
    // for the dependent they count down. The finished steps are not read again, and the run's
    // refresh reads none: its count of active steps says that some are.
    let batch: Vec<_> = middle_keys(BATCH)
        .iter()
        .map(|key| jobs[key].clone())
        .collect();
    let scans = "SELECT idx_scan + seq_scan FROM pg_stat_xact_user_tables \
                 WHERE schemaname = 'runledger' AND relname = 'workflow_steps'";
    let mut tx = pool.begin().await.unwrap();
    let before: i64 = sqlx::query_scalar(scans).fetch_one(&mut *tx).await.unwrap();
    let done = complete_jobs_success(&mut *tx, "w-reads", &crate::support::successes_of(&batch))
        .await
        .unwrap();
    let after: i64 = sqlx::query_scalar(scans).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(done.len(), BATCH);
    assert_eq!(after - before, BATCH as i64 + 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn each_step_keeps_its_own_settings_beside_steps_that_set_none(pool: PgPool) {
    use runledger_engine::core::jobs::{
        JobType, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
    };

    crate::support::define(&pool, "wf.step", crate::support::DefinitionOpts::default()).await;
    let (empty, payload, tagged) = (json!({}), json!({"n": 1}), json!({"team": "search"}));
    let organization = uuid::Uuid::now_v7();
    let plain = |key: &'static str| {
        WorkflowStepEnqueueBuilder::new(StepKey::new(key), JobType::new("wf.step"), &payload)
    };
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf.settings"), &empty)
        .organization_id(organization)
        .step(plain("bare").build())
        .step(
            plain("set")
                .priority(7)
                .max_attempts(4)
                .timeout_seconds(90)
                .stage("crawling")
                .organization_id(organization)
                .metadata(&tagged)
                .allow_continuation()
                .resource_key("index")
                .depends_on_success(StepKey::new("bare"))
                .build(),
        )
        .step(
            plain("after")
                .depends_on_success(StepKey::new("set"))
                .build(),
        )
        .build()
        .unwrap();
    let run_id = enqueue_workflow_run(&pool, &run).await.unwrap().id;

    type Settings = (
        Option<i32>,
        Option<i32>,
        Option<i32>,
        Option<String>,
        Option<uuid::Uuid>,
        Value,
        bool,
        Option<String>,
        Value,
    );
    let settings = |key: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, Settings>(
                "SELECT priority, max_attempts, timeout_seconds, stage, organization_id, metadata,
                        continuation_allowed, resource_key, payload
                 FROM runledger.workflow_steps WHERE workflow_run_id = $1 AND step_key = $2",
            )
            .bind(run_id.0)
            .bind(key)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let unset = (
        None,
        None,
        None,
        None,
        None,
        json!({}),
        false,
        None,
        payload.clone(),
    );
    assert_eq!(settings("bare").await, unset);
    assert_eq!(settings("after").await, unset);
    assert_eq!(
        settings("set").await,
        (
            Some(7),
            Some(4),
            Some(90),
            Some("crawling".to_owned()),
            Some(organization),
            tagged.clone(),
            true,
            Some("index".to_owned()),
            payload.clone(),
        )
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_release_planned_on_a_small_step_table_reads_only_the_steps_it_counts_down(pool: PgPool) {
    use runledger_engine::postgres::jobs::complete_jobs_success;
    use sqlx::Connection;

    crate::support::define(&pool, "wf.step", crate::support::DefinitionOpts::default()).await;
    let (meta, small, wide) = (json!({}), middle_keys(2), middle_keys(3_000));
    // A connection keeps the plans it made for its first releases (at the latest from the
    // sixth): this one made them from the statistics of a few small runs, as autovacuum
    // leaves them on a quiet database.
    let mut conn = pool.acquire().await.unwrap();
    for round in 0..6 {
        enqueue_workflow_run(&pool, &fan_out_run(&meta, &small))
            .await
            .unwrap();
        if round == 0 {
            sqlx::query("ANALYZE runledger.workflow_steps, runledger.workflow_step_dependencies")
                .execute(&pool)
                .await
                .unwrap();
        }
        let start = claim_steps(&pool, "w-plans").await["start"].clone();
        let done = complete_jobs_success(
            &mut *conn,
            "w-plans",
            &crate::support::successes_of(&[start]),
        )
        .await
        .unwrap();
        assert_eq!(done.len(), 1);
    }

    let measured = enqueue_workflow_run(&pool, &fan_out_run(&meta, &small))
        .await
        .unwrap();
    let start = claim_steps(&pool, "w-plans").await["start"].clone();
    // A wide run fills the step table.
    enqueue_workflow_run(&pool, &fan_out_run(&meta, &wide))
        .await
        .unwrap();
    let mut tx = conn.begin().await.unwrap();
    let before = crate::support::rows_read(&mut tx, "workflow_steps").await;
    complete_jobs_success(&mut *tx, "w-plans", &crate::support::successes_of(&[start]))
        .await
        .unwrap();
    let fetched = crate::support::rows_read(&mut tx, "workflow_steps").await - before;
    tx.commit().await.unwrap();
    assert_eq!(
        step_statuses(&pool, measured.id)
            .await
            .into_iter()
            .filter(|(_, status)| *status == WorkflowStepStatus::Enqueued)
            .count(),
        small.len()
    );
    // The finished step, its two dependents and the run's probe, not the wide run's steps.
    assert!(
        fetched <= 20,
        "releasing {} steps fetched {fetched} step rows",
        small.len()
    );
}

/// With one slot (claims of one job) and two runs of `a -> b -> c`: run-first order claims
/// `a1 b1 c1` and ends the first run after three claims; release order claims `a1 a2 b1`.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn run_first_order_finishes_the_older_run_before_starting_the_newer(pool: PgPool) {
    use crate::support::LONG_LEASE;
    use runledger_engine::core::jobs::{
        JobType, WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
    };
    use runledger_engine::postgres::jobs::{ClaimRequest, claim_jobs, complete_job_success};

    define(&pool, "order.step", DefinitionOpts::default()).await;
    let (meta, payload) = (json!({}), json!({}));
    let enqueue = |run_first: bool| {
        let (pool, meta, payload) = (&pool, &meta, &payload);
        async move {
            let step = |key: &'static str| {
                WorkflowStepEnqueueBuilder::new(
                    StepKey::new(key),
                    JobType::new("order.step"),
                    payload,
                )
            };
            let mut run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("order.chain"), meta)
                .step(step("a").build())
                .step(step("b").depends_on_success(StepKey::new("a")).build())
                .step(step("c").depends_on_success(StepKey::new("b")).build());
            if run_first {
                run = run.run_first();
            }
            enqueue_workflow_run(pool, &run.build().unwrap())
                .await
                .unwrap()
                .id
        }
    };
    // Claims one job at a time and completes it; returns (run, step) of each claim.
    let drain = |claims: usize| {
        let pool = &pool;
        async move {
            let mut order = Vec::new();
            for _ in 0..claims {
                let claimed = claim_jobs(pool, &ClaimRequest::new("w-order", 1, LONG_LEASE))
                    .await
                    .unwrap();
                let [job] = claimed.as_slice() else {
                    panic!("one job per claim: {claimed:?}");
                };
                order.push((
                    job.workflow_run_id.unwrap(),
                    job.workflow_step_key.clone().unwrap(),
                ));
                complete_job_success(pool, &job.lease(), None)
                    .await
                    .unwrap();
            }
            order
        }
    };

    for run_first in [true, false] {
        let first = enqueue(run_first).await;
        let second = enqueue(run_first).await;
        let order = drain(3).await;
        let steps: Vec<(bool, &str)> = order
            .iter()
            .map(|(run, key)| (*run == first, key.as_str()))
            .collect();
        let status = get_workflow_run(&pool, first, WorkflowRunHandleScope::Admin)
            .await
            .unwrap()
            .unwrap()
            .status;
        if run_first {
            assert_eq!(steps, [(true, "a"), (true, "b"), (true, "c")]);
            assert_eq!(status, WorkflowRunStatus::Succeeded, "after three claims");
        } else {
            assert_eq!(steps, [(true, "a"), (false, "a"), (true, "b")]);
            assert_eq!(
                status,
                WorkflowRunStatus::Running,
                "release order interleaves"
            );
        }
        drain(3).await;
        for run in [first, second] {
            let status = get_workflow_run(&pool, run, WorkflowRunHandleScope::Admin)
                .await
                .unwrap()
                .unwrap()
                .status;
            assert_eq!(status, WorkflowRunStatus::Succeeded);
        }
    }
}
