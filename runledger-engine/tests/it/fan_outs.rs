//! Fan-out steps: filled at run time by a prerequisite, checked and idempotent, finished in the
//! release with their children's outputs, and read a page at a time.

use std::time::Duration;

use runledger_engine::core::jobs::{
    JobCompletion, JobType, StepKey, WorkflowRunEnqueueBuilder, WorkflowRunId, WorkflowRunStatus,
    WorkflowStepEnqueueBuilder, WorkflowStepStatus, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    FanOutFill, PREREQUISITES_NAMED, TenantScope, WorkflowAppendOutcome, WorkflowRunHandleScope,
    enqueue_workflow_run, fill_fan_out, get_fan_out_outputs, get_workflow_run, list_workflow_steps,
    list_workflow_steps_page,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{fast_config, handler};

/// The catalog of `fan.echo`, which returns its payload's `value`, its definition synced.
async fn echo(pool: &PgPool) -> JobCatalog {
    let catalog = JobCatalog::new().job(
        "fan.echo",
        handler("fan.echo", |_, payload: Value| async move {
            Ok(JobCompletion::with_output(
                json!({ "value": payload["value"] }),
            ))
        }),
    );
    catalog.sync_definitions(pool).await.unwrap();
    catalog
}

/// `plan -> pages (fan-out) -> read`, `plan -> late (fan-out)`, and a gate `hold` that keeps
/// the run open.
async fn enqueue(pool: &PgPool) -> WorkflowRunId {
    let (meta, payload) = (json!({}), json!({"value": 0}));
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("fan.checked"), &meta)
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("plan"),
                JobType::new("fan.echo"),
                &payload,
            )
            .build(),
        )
        .step(
            WorkflowStepEnqueueBuilder::new_fan_out(StepKey::new("pages"))
                .depends_on_success(StepKey::new("plan"))
                .build(),
        )
        .step(
            WorkflowStepEnqueueBuilder::new_fan_out(StepKey::new("late"))
                .depends_on_success(StepKey::new("plan"))
                .build(),
        )
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("read"),
                JobType::new("fan.echo"),
                &payload,
            )
            .depends_on_success(StepKey::new("pages"))
            .depends_on_success(StepKey::new("plan"))
            .build(),
        )
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("hold")).build())
        .build()
        .unwrap();
    enqueue_workflow_run(pool, &run).await.unwrap().id
}

fn fill<'a>(run: WorkflowRunId, by: &'a str, fan_out: &'a str) -> FanOutFill<'a> {
    FanOutFill {
        workflow_run_id: run,
        organization_id: None,
        filled_by: StepKey::new(by),
        fan_out: StepKey::new(fan_out),
        job_type: JobType::new("fan.echo"),
    }
}

/// Fills `fan_out` of `run` on behalf of `by` with `children`.
async fn fill_with(
    pool: &PgPool,
    run: WorkflowRunId,
    by: &str,
    fan_out: &str,
    children: &[Value],
) -> Result<(WorkflowAppendOutcome, usize), runledger_engine::postgres::Error> {
    let mut children = children.iter().cloned().map(Ok);
    fill_fan_out(pool, &fill(run, by, fan_out), &mut children).await
}

async fn step(
    pool: &PgPool,
    run: WorkflowRunId,
    key: &str,
) -> runledger_engine::postgres::jobs::WorkflowStepRecord {
    list_workflow_steps(pool, run, TenantScope::Admin)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.step_key == key)
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_fill_is_checked_idempotent_and_its_fan_out_closes_with_the_outputs_in_order(
    pool: PgPool,
) {
    let catalog = echo(&pool).await;
    let run = enqueue(&pool).await;
    let children: Vec<Value> = (0..12).map(|n| json!({ "value": n })).collect();

    let refused = |err: runledger_engine::postgres::Error| err.code();
    assert_eq!(
        refused(
            fill_with(&pool, run, "hold", "pages", &children)
                .await
                .unwrap_err()
        ),
        "workflow.fan_out_filler_not_prerequisite"
    );
    assert_eq!(
        refused(
            fill_with(&pool, run, "plan", "read", &children)
                .await
                .unwrap_err()
        ),
        "workflow.fan_out_not_found"
    );
    let bad = [json!({ "text": "nul \u{0000}" })];
    assert_eq!(
        refused(
            fill_with(&pool, run, "plan", "pages", &bad)
                .await
                .unwrap_err()
        ),
        "job.invalid_payload"
    );
    assert_eq!(
        fill_with(&pool, run, "plan", "pages", &children)
            .await
            .unwrap(),
        (WorkflowAppendOutcome::Applied, 12)
    );
    assert_eq!(
        fill_with(&pool, run, "plan", "pages", &children)
            .await
            .unwrap(),
        (WorkflowAppendOutcome::AlreadyApplied, 12),
        "the same children again: a retried attempt"
    );
    assert_eq!(
        refused(
            fill_with(&pool, run, "plan", "pages", &children[1..])
                .await
                .unwrap_err()
        ),
        "workflow.append_conflicting_retry"
    );
    let pages = step(&pool, run, "pages").await;
    assert_eq!(pages.status, WorkflowStepStatus::Blocked);
    assert_eq!(
        step(&pool, run, "pages/11").await.status,
        WorkflowStepStatus::Blocked
    );

    let supervisor = Supervisor::builder(&pool, fast_config("w-fan"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while step(&pool, run, "read").await.status != WorkflowStepStatus::Succeeded {
        assert!(
            std::time::Instant::now() < deadline,
            "the run did not reach `read`"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await
        .unwrap();

    let pages = step(&pool, run, "pages").await;
    assert_eq!(pages.status, WorkflowStepStatus::Succeeded);
    assert_eq!(pages.job_id, None, "a fan-out runs no job");
    let expected: Vec<Value> = children
        .iter()
        .map(|c| json!({ "value": c["value"] }))
        .collect();
    assert_eq!(pages.output, Some(Value::Array(expected.clone())));
    // Filled by no one, `late` closed empty when `plan` succeeded; filling it now is too late.
    assert_eq!(step(&pool, run, "late").await.output, Some(json!([])));
    assert_eq!(
        refused(
            fill_with(&pool, run, "plan", "late", &children)
                .await
                .unwrap_err()
        ),
        "workflow.fan_out_closed"
    );
    let status = get_workflow_run(&pool, run, WorkflowRunHandleScope::Admin)
        .await
        .unwrap()
        .unwrap()
        .status;
    assert_eq!(
        status,
        WorkflowRunStatus::WaitingForExternal,
        "`hold` keeps it open"
    );

    // A page of the children's outputs, read on behalf of `read`.
    let read = step(&pool, run, "read").await.id;
    let page = get_fan_out_outputs(&pool, read, "pages", 10, 5)
        .await
        .unwrap();
    assert_eq!(page.children, 12);
    assert_eq!(
        page.outputs,
        vec![Some(expected[10].clone()), Some(expected[11].clone())]
    );
    assert!(
        get_fan_out_outputs(&pool, read, "pages", 12, 5)
            .await
            .unwrap()
            .outputs
            .is_empty()
    );
    assert_eq!(
        get_fan_out_outputs(&pool, read, "plan", 0, 5)
            .await
            .unwrap_err()
            .code(),
        "workflow.fan_out_not_found"
    );
    let hold = step(&pool, run, "hold").await.id;
    assert_eq!(
        get_fan_out_outputs(&pool, hold, "pages", 0, 5)
            .await
            .unwrap_err()
            .code(),
        "workflow.not_a_prerequisite"
    );
}

/// A run read a page at a time gives the steps of the whole read, in the same order, each with
/// its prerequisites, whichever page they fall on.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_runs_steps_read_in_pages_are_its_steps_read_at_once(pool: PgPool) {
    echo(&pool).await;
    let run = enqueue(&pool).await;
    let children: Vec<Value> = (0..1_203).map(|n| json!({ "value": n })).collect();
    fill_with(&pool, run, "plan", "pages", &children)
        .await
        .unwrap();
    let all = list_workflow_steps(&pool, run, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(all.len(), 5 + 1_203);

    let mut paged = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = list_workflow_steps_page(&pool, run, TenantScope::Admin, after, 500)
            .await
            .unwrap();
        pages += 1;
        after = page.last().map(|step| step.id);
        let full = page.len() == 500;
        paged.extend(page);
        if !full {
            break;
        }
    }
    assert_eq!(pages, 3);
    // A page names the first prerequisites of each step and counts them all.
    let named = usize::try_from(PREREQUISITES_NAMED).unwrap();
    let expected: Vec<_> = all
        .into_iter()
        .map(|mut step| {
            assert_eq!(step.dependency_count, step.dependencies.len() as i64);
            step.dependencies.truncate(named);
            step
        })
        .collect();
    assert_eq!(paged, expected);
    let fan_out = paged.iter().find(|s| s.step_key == "pages").unwrap();
    assert_eq!(
        fan_out.dependency_count,
        1 + 1_203,
        "`plan` and every child"
    );
    assert_eq!(fan_out.dependencies.len(), named);
    let child = paged.iter().find(|s| s.step_key == "pages/1202").unwrap();
    assert_eq!(
        child.dependencies,
        vec![("plan".to_owned(), "SUCCESS".to_owned())]
    );
    let read = paged.iter().find(|s| s.step_key == "read").unwrap();
    assert_eq!(read.dependencies.len(), 2);

    let other = uuid::Uuid::now_v7();
    assert!(
        list_workflow_steps_page(&pool, run, TenantScope::Organization(other), None, 500)
            .await
            .unwrap()
            .is_empty(),
        "another tenant's run has no steps to read"
    );
}

/// Outputs past 16 MiB are not collected into the fan-out's own output (a `jsonb` value cannot
/// exceed 255 MiB): it succeeds with a reason, and its children keep their outputs.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_fan_out_whose_outputs_exceed_16_mib_succeeds_without_collecting_them(pool: PgPool) {
    echo(&pool).await;
    let run = enqueue(&pool).await;
    let children: Vec<Value> = (0..20).map(|n| json!({ "value": n })).collect();
    fill_with(&pool, run, "plan", "pages", &children)
        .await
        .unwrap();
    // Each child as if it had succeeded with about 1 MiB of output that does not compress,
    // and the fan-out released; then the release's closing step.
    sqlx::query(
        "UPDATE runledger.workflow_steps
         SET status = 'SUCCEEDED', finished_at = now(),
             output = to_jsonb((SELECT string_agg(md5(random()::text), '')
                                FROM generate_series(1, 32768)))
         WHERE workflow_run_id = $1 AND step_key LIKE 'pages/%'",
    )
    .bind(run.0)
    .execute(&pool)
    .await
    .unwrap();
    let pages = step(&pool, run, "pages").await.id;
    sqlx::query(
        "UPDATE runledger.workflow_steps SET status = 'WAITING_FOR_EXTERNAL' WHERE id = $1",
    )
    .bind(pages.0)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("SELECT runledger.workflow_close_fan_outs(ARRAY[$1])")
        .bind(pages.0)
        .execute(&pool)
        .await
        .unwrap();
    let pages = step(&pool, run, "pages").await;
    assert_eq!(pages.status, WorkflowStepStatus::Succeeded);
    assert_eq!(pages.output, None);
    assert_eq!(
        pages.status_reason.as_deref(),
        Some("workflow.fan_out_outputs_not_collected")
    );
    assert!(step(&pool, run, "pages/19").await.output.is_some());
}

/// A fill larger than one statement numbers its children across statements; a child the caller
/// could not produce fails the whole fill, and nothing of it stays.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_fill_spans_statements_and_a_bad_child_leaves_nothing(pool: PgPool) {
    echo(&pool).await;
    let run = enqueue(&pool).await;
    let steps = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM runledger.workflow_steps WHERE workflow_run_id = $1",
        )
        .bind(run.0)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let before = steps().await;

    let mut broken = (0..7_000).map(|n| match n {
        6_000 => Err("child 6000 could not be serialized".to_owned()),
        n => Ok(json!({ "value": n })),
    });
    let err = fill_fan_out(&pool, &fill(run, "plan", "pages"), &mut broken)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "payload.serialize_failed");
    assert_eq!(
        steps().await,
        before,
        "the first 5,000 children were rolled back"
    );

    let children: Vec<Value> = (0..5_001).map(|n| json!({ "value": n })).collect();
    assert_eq!(
        fill_with(&pool, run, "plan", "pages", &children)
            .await
            .unwrap(),
        (WorkflowAppendOutcome::Applied, 5_001)
    );
    assert_eq!(steps().await, before + 5_001);
    let last = step(&pool, run, "pages/5000").await;
    assert_eq!(
        last.dependencies,
        vec![("plan".to_owned(), "SUCCESS".to_owned())]
    );
    let payload: Value = sqlx::query_scalar(
        "SELECT payload FROM runledger.workflow_steps WHERE workflow_run_id = $1 AND step_key = 'pages/5000'",
    )
    .bind(run.0)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(payload, json!({ "value": 5000 }));
    assert_eq!(
        step(&pool, run, "pages").await.dependencies.len(),
        5_002,
        "plan and 5,001 children"
    );
}
