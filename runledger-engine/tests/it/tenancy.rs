//! Organizations are isolated: reads and operator actions by id see only their scope's jobs
//! and runs, a run's steps belong to the run's organization, and idempotency keys are scoped
//! by organization and type.

use runledger_engine::core::jobs::{
    JobId, JobLogLevel, JobLogLine, JobStatus, JobType, StepKey, WorkflowDagBuilder,
    WorkflowRunEnqueueBuilder, WorkflowStepEnqueueBuilder, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    JobEnqueue, JobLogListFilter, TenantScope, WorkflowAppend, append_job_logs,
    append_workflow_steps, cancel_job, enqueue_job, enqueue_workflow_run, get_job_by_id,
    get_job_detail, list_job_attempts, list_job_events, list_job_logs, list_workflow_steps,
    requeue_job,
};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{DefinitionOpts, claim_one, dead_letter, define};

/// A job of `organization` (with one log line and a finished attempt).
async fn job_of(pool: &PgPool, organization: Uuid) -> JobId {
    define(pool, "tenant.job", DefinitionOpts::default()).await;
    let payload = json!({ "secret": "tenant data" });
    let job = enqueue_job(
        pool,
        &JobEnqueue::new("tenant.job", &payload).organization_id(organization),
    )
    .await
    .unwrap()
    .id;
    append_job_logs(
        pool,
        &[JobLogLine::new(job, 1, JobLogLevel::Info, "private")],
    )
    .await
    .unwrap();
    job
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn reads_by_job_id_see_only_their_scope(pool: PgPool) {
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let job = job_of(&pool, a).await;
    dead_letter(&pool, &claim_one(&pool).await).await;

    for outside in [TenantScope::Organization(b), TenantScope::Global] {
        assert_eq!(get_job_by_id(&pool, job, outside).await.unwrap(), None);
        assert_eq!(get_job_detail(&pool, job, outside).await.unwrap(), None);
        assert!(
            list_job_attempts(&pool, job, outside)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            list_job_events(&pool, job, outside)
                .await
                .unwrap()
                .is_empty()
        );
        let logs = list_job_logs(&pool, job, outside, &JobLogListFilter::new())
            .await
            .unwrap();
        assert!(logs.is_empty());
    }
    for inside in [TenantScope::Organization(a), TenantScope::Admin] {
        let detail = get_job_detail(&pool, job, inside).await.unwrap().unwrap();
        assert_eq!(detail.job.organization_id, Some(a));
        assert_eq!(detail.attempts.len(), 1);
        assert_eq!(detail.logs.len(), 1);
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn cancel_and_requeue_refuse_another_organizations_job_as_not_found(pool: PgPool) {
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let job = job_of(&pool, a).await;

    let err = cancel_job(&pool, job, TenantScope::Organization(b))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.not_found");
    let err = cancel_job(&pool, job, TenantScope::Global)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.not_found");
    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, JobStatus::Pending);

    cancel_job(&pool, job, TenantScope::Organization(a))
        .await
        .unwrap();
    let err = requeue_job(&pool, job, TenantScope::Organization(b))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.not_found");
    requeue_job(&pool, job, TenantScope::Organization(a))
        .await
        .unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_runs_steps_are_listed_only_in_its_scope_and_never_belong_to_another_organization(
    pool: PgPool,
) {
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    define(&pool, "tenant.step", DefinitionOpts::default()).await;
    let meta = json!({});
    let payload = json!({});
    let run = WorkflowDagBuilder::new("tenant.flow", &meta)
        .organization_id(a)
        .job("first", "tenant.step", &payload)
        .unwrap()
        .build()
        .unwrap();
    let run_id = enqueue_workflow_run(&pool, &run).await.unwrap().id;
    assert!(
        list_workflow_steps(&pool, run_id, TenantScope::Organization(b))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        list_workflow_steps(&pool, run_id, TenantScope::Organization(a))
            .await
            .unwrap()
            .len(),
        1
    );

    let foreign_step = WorkflowStepEnqueueBuilder::new(
        StepKey::new("foreign"),
        JobType::new("tenant.step"),
        &payload,
    )
    .organization_id(b)
    .build();
    let err = WorkflowRunEnqueueBuilder::new(WorkflowType::new("tenant.flow"), &meta)
        .organization_id(a)
        .step(foreign_step.clone())
        .build()
        .unwrap_err();
    assert_eq!(err.code(), "workflow.step_organization_mismatch");

    let err = append_workflow_steps(
        &pool,
        &WorkflowAppend {
            workflow_run_id: run_id,
            organization_id: Some(a),
            mutation_key: "add-foreign",
            steps: vec![foreign_step],
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "workflow.step_organization_mismatch");
    let owners: Vec<Option<Uuid>> =
        sqlx::query_scalar("SELECT DISTINCT organization_id FROM runledger.job_queue")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(owners, [Some(a)]);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn idempotency_keys_are_scoped_by_organization_and_job_type(pool: PgPool) {
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    define(&pool, "tenant.job", DefinitionOpts::default()).await;
    define(&pool, "tenant.other", DefinitionOpts::default()).await;
    let (one, two) = (json!({ "n": 1 }), json!({ "n": 2 }));
    let keyed = |job_type, payload, org: Option<Uuid>| {
        let request = JobEnqueue::new(job_type, payload).idempotency_key("invoice-7");
        match org {
            Some(org) => request.organization_id(org),
            None => request,
        }
    };

    let of_a = enqueue_job(&pool, &keyed("tenant.job", &one, Some(a)))
        .await
        .unwrap();
    // Another organization, no organization, another type: the same key is free for each.
    let of_b = enqueue_job(&pool, &keyed("tenant.job", &two, Some(b)))
        .await
        .unwrap();
    let global = enqueue_job(&pool, &keyed("tenant.job", &two, None))
        .await
        .unwrap();
    let other_type = enqueue_job(&pool, &keyed("tenant.other", &two, Some(a)))
        .await
        .unwrap();
    assert!(of_b.created && global.created && other_type.created);
    let ids = [of_a.id, of_b.id, global.id, other_type.id];
    assert_eq!(
        ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
        4
    );

    // A conflict names only the caller's own job.
    let err = enqueue_job(&pool, &keyed("tenant.job", &two, Some(a)))
        .await
        .unwrap_err();
    match err {
        runledger_engine::postgres::Error::IdempotencyConflict {
            existing_job_id, ..
        } => assert_eq!(existing_job_id, of_a.id),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let again = enqueue_job(&pool, &keyed("tenant.job", &two, Some(b)))
        .await
        .unwrap();
    assert_eq!((again.id, again.created), (of_b.id, false));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn workflow_idempotency_keys_are_scoped_by_organization_and_workflow_type(pool: PgPool) {
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    define(&pool, "tenant.step", DefinitionOpts::default()).await;
    let meta = json!({});
    let (one, two) = (json!({ "n": 1 }), json!({ "n": 2 }));
    let run = |workflow_type, org, payload| {
        WorkflowDagBuilder::new(workflow_type, &meta)
            .organization_id(org)
            .idempotency_key("order-9")
            .job("only", "tenant.step", payload)
            .unwrap()
            .build()
            .unwrap()
    };
    let of_a = enqueue_workflow_run(&pool, &run("tenant.flow", a, &one))
        .await
        .unwrap();
    let of_b = enqueue_workflow_run(&pool, &run("tenant.flow", b, &two))
        .await
        .unwrap();
    let other_type = enqueue_workflow_run(&pool, &run("tenant.other_flow", a, &two))
        .await
        .unwrap();
    assert!(of_b.created && other_type.created);
    assert_ne!(of_a.id, of_b.id);
    match enqueue_workflow_run(&pool, &run("tenant.flow", a, &two))
        .await
        .unwrap_err()
    {
        runledger_engine::postgres::Error::WorkflowIdempotencyConflict {
            existing_run_id, ..
        } => assert_eq!(existing_run_id, of_a.id),
        other => panic!("expected a conflict, got {other:?}"),
    }
}
