//! Rules of the original design: isolation levels of release-sensitive operations, schedule
//! cursors after a cron change and a failed fire, panics in the metrics rollups, the narrow
//! payload edit, catalog-validated builders, and the loops' named errors.

use chrono::{DateTime, Utc};
use runledger_engine::core::jobs::{
    JobCompletion, JobFailure, JobFailureKind, JobType, StepKey, WorkflowDagBuilder,
    WorkflowRunEnqueueBuilder, WorkflowRunId, WorkflowStepEnqueueBuilder, WorkflowStepStatus,
    WorkflowType,
};
use runledger_engine::postgres::jobs::{
    CompleteExternalWorkflowStepInput, JobEnqueue, JobPayloadUpdateRejection,
    JobPayloadUuidArrayFieldUpdate, JobReplay, TenantScope, WorkflowAppend, append_workflow_steps,
    cancel_workflow_run, complete_external_workflow_step, complete_job_failure,
    complete_job_success, enqueue_job, enqueue_workflow_run, get_job_metrics, get_job_schedule,
    job_schedule, materialize_due_schedules, record_job_enqueue_intent, replay_job,
    set_job_definition_enabled, update_job_payload_uuid_array_field, upsert_job_schedule,
};
use runledger_engine::runtime::catalog::{JobCatalog, JobCatalogDefinitionOverrides};
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::reaper::{Reaper, ReaperConfig};
use runledger_engine::runtime::scheduler::{Scheduler, SchedulerConfig};
use runledger_engine::runtime::{JobLifecycleObservers, ReaperError, SchedulerError, WorkerError};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    DefinitionOpts, attach_to_workflow, claim_one, define, handler, insert_job, job, one_job,
};

// ---------------------------------------------------------------------------------------------
// Isolation levels
// ---------------------------------------------------------------------------------------------

async fn begin_at(pool: &PgPool, level: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.unwrap();
    let statement = format!("SET TRANSACTION ISOLATION LEVEL {level}");
    sqlx::query(sqlx::AssertSqlSafe(statement))
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// A run waiting on the external step `gate`, its job step `after` behind it.
async fn gated_run(pool: &PgPool) -> WorkflowRunId {
    define(pool, "wf.step", DefinitionOpts::default()).await;
    let meta = json!({});
    let payload = json!({});
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("wf.gated"), &meta)
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("gate")).build())
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("after"),
                JobType::new("wf.step"),
                &payload,
            )
            .depends_on_success(StepKey::new("gate"))
            .build(),
        )
        .build()
        .unwrap();
    enqueue_workflow_run(pool, &run).await.unwrap().id
}

fn refused(err: &runledger_engine::postgres::Error, level: &str) {
    assert_eq!(
        err.code(),
        "validation.isolation_level_unsupported",
        "{err:?}"
    );
    assert!(err.to_string().contains(level), "{err}");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn release_sensitive_operations_refuse_stricter_isolation_naming_the_level(pool: PgPool) {
    let run = gated_run(&pool).await;
    let source = one_job(&pool).await;
    complete_job_success(&pool, &claim_one(&pool).await.lease(), None)
        .await
        .unwrap();
    let payload = json!({});
    let meta = json!({});
    let keyed = JobEnqueue::new("test.job", &payload).idempotency_key("k-1");

    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let mut tx = begin_at(&pool, level).await;
        refused(&enqueue_job(&mut *tx, &keyed).await.unwrap_err(), level);
        refused(
            &record_job_enqueue_intent(&mut *tx, &keyed)
                .await
                .unwrap_err(),
            level,
        );
        refused(
            &replay_job(
                &mut *tx,
                &JobReplay::new(source, "r-1", "why").scope(TenantScope::Admin),
            )
            .await
            .unwrap_err(),
            level,
        );
        let workflow = WorkflowDagBuilder::new("wf.other", &meta)
            .job("only", "wf.step", &payload)
            .unwrap()
            .build()
            .unwrap();
        refused(
            &enqueue_workflow_run(&mut *tx, &workflow).await.unwrap_err(),
            level,
        );
        let append = WorkflowAppend {
            workflow_run_id: run,
            organization_id: None,
            mutation_key: "more",
            steps: vec![
                WorkflowStepEnqueueBuilder::new(
                    StepKey::new("more"),
                    JobType::new("wf.step"),
                    &payload,
                )
                .build(),
            ],
        };
        refused(
            &append_workflow_steps(&mut *tx, &append).await.unwrap_err(),
            level,
        );
        refused(
            &complete_external_workflow_step(&mut *tx, &gate_done(run))
                .await
                .unwrap_err(),
            level,
        );
        refused(
            &cancel_workflow_run(&mut *tx, run, TenantScope::Admin)
                .await
                .unwrap_err(),
            level,
        );
        // The refusals leave the transaction usable, and an unkeyed enqueue needs no
        // particular isolation.
        enqueue_job(&mut *tx, &JobEnqueue::new("test.job", &payload))
            .await
            .unwrap();
        tx.rollback().await.unwrap();
    }

    // READ UNCOMMITTED runs as READ COMMITTED in PostgreSQL, so it is accepted.
    let mut tx = begin_at(&pool, "READ UNCOMMITTED").await;
    enqueue_job(&mut *tx, &keyed).await.unwrap();
    record_job_enqueue_intent(&mut *tx, &keyed).await.unwrap();
    complete_external_workflow_step(&mut *tx, &gate_done(run))
        .await
        .unwrap();
    cancel_workflow_run(&mut *tx, run, TenantScope::Admin)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

fn gate_done(run: WorkflowRunId) -> CompleteExternalWorkflowStepInput<'static> {
    CompleteExternalWorkflowStepInput {
        workflow_run_id: run,
        organization_id: None,
        step_key: StepKey::new("gate"),
        terminal_status: WorkflowStepStatus::Succeeded,
        status_reason: None,
        last_error_code: None,
        last_error_message: None,
        output: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Schedules
// ---------------------------------------------------------------------------------------------

async fn fired_payloads(pool: &PgPool) -> Vec<Value> {
    sqlx::query_scalar("SELECT payload FROM runledger.job_queue ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_schedule_whose_cron_changes_without_next_fire_at_fires_promptly(pool: PgPool) {
    define(&pool, "reports.refresh", DefinitionOpts::default()).await;
    let yearly = upsert_job_schedule(
        &pool,
        &job_schedule("reports.yearly", "reports.refresh", "0 0 0 1 1 *"),
    )
    .await
    .unwrap();
    assert!(
        yearly.next_fire_at > Utc::now(),
        "a new schedule waits for its cron"
    );
    assert_eq!(materialize_due_schedules(&pool, 10).await.unwrap().fired, 0);

    let before = Utc::now();
    let changed = upsert_job_schedule(
        &pool,
        &job_schedule("reports.yearly", "reports.refresh", "0 0 3 * * *"),
    )
    .await
    .unwrap();
    assert!(
        changed.next_fire_at <= Utc::now()
            && changed.next_fire_at >= before - chrono::Duration::seconds(5),
        "a changed cron without next_fire_at is due now: {}",
        changed.next_fire_at
    );
    assert_eq!(materialize_due_schedules(&pool, 10).await.unwrap().fired, 1);
    let after = get_job_schedule(&pool, "reports.yearly")
        .await
        .unwrap()
        .unwrap();
    assert!(
        after.next_fire_at > Utc::now(),
        "then it follows the new cron"
    );

    // An unchanged cron keeps its cursor.
    let kept = upsert_job_schedule(
        &pool,
        &job_schedule("reports.yearly", "reports.refresh", "0 0 3 * * *"),
    )
    .await
    .unwrap();
    assert_eq!(kept.next_fire_at, after.next_fire_at);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_failed_fire_keeps_its_original_scheduled_for_on_the_retry(pool: PgPool) {
    define(&pool, "reports.refresh", DefinitionOpts::default()).await;
    upsert_job_schedule(
        &pool,
        &job_schedule("reports.hourly", "reports.refresh", "0 0 * * * *"),
    )
    .await
    .unwrap();
    let nominal: DateTime<Utc> = sqlx::query_scalar(
        "UPDATE runledger.job_schedules SET next_fire_at = date_trunc('hour', now()) - interval '1 hour'
         RETURNING next_fire_at",
    )
    .fetch_one(&pool)
    .await
    .unwrap();

    // The fire fails: the definition was disabled behind the schedule's back.
    sqlx::query("UPDATE runledger.job_definitions SET is_enabled = false")
        .execute(&pool)
        .await
        .unwrap();
    let pass = materialize_due_schedules(&pool, 10).await.unwrap();
    assert_eq!(pass.deferred, 1);
    let deferred = get_job_schedule(&pool, "reports.hourly")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        deferred.next_fire_at, nominal,
        "the cursor stays on the failed fire"
    );
    assert_eq!(
        deferred.last_error_code.as_deref(),
        Some("job.definition_not_found_or_disabled")
    );
    assert_eq!(
        materialize_due_schedules(&pool, 10).await.unwrap().due,
        0,
        "not retried before its retry time"
    );

    set_job_definition_enabled(&pool, "reports.refresh", true)
        .await
        .unwrap();
    sqlx::query("UPDATE runledger.job_schedules SET retry_at = now()")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(materialize_due_schedules(&pool, 10).await.unwrap().fired, 1);
    let payloads = fired_payloads(&pool).await;
    assert_eq!(payloads.len(), 1);
    let scheduled_for: DateTime<Utc> =
        serde_json::from_value(payloads[0]["scheduled_for"].clone()).unwrap();
    assert_eq!(
        scheduled_for, nominal,
        "the retry carries the original fire time"
    );
    let recovered = get_job_schedule(&pool, "reports.hourly")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recovered.last_fired_at, Some(nominal));
    assert_eq!(recovered.last_error_code, None);
    assert!(recovered.next_fire_at > Utc::now());
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn metrics_rollups_count_panicked_attempts(pool: PgPool) {
    define(&pool, "risky", DefinitionOpts::default()).await;
    for n in 0..3 {
        insert_job(&pool, "risky", json!({"n": n})).await;
    }
    for kind in [
        JobFailureKind::Panicked,
        JobFailureKind::Panicked,
        JobFailureKind::Retryable,
    ] {
        let claimed = claim_one(&pool).await;
        complete_job_failure(
            &pool,
            &claimed.lease(),
            &JobFailure::new(kind, "job.panicked", "boom"),
        )
        .await
        .unwrap();
    }
    let metrics = get_job_metrics(&pool, None).await.unwrap();
    let risky = metrics.iter().find(|m| m.job_type == "risky").unwrap();
    assert_eq!(risky.panicked_24h, 2);
    let rollup: i64 = sqlx::query_scalar(
        "SELECT panicked_24h FROM runledger.job_metrics_rollup WHERE job_type = 'risky'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(rollup, 2, "the rollup view counts them too");
    let other_tenant = get_job_metrics(&pool, Some(Uuid::now_v7())).await.unwrap();
    assert_eq!(
        other_tenant
            .iter()
            .find(|m| m.job_type == "risky")
            .unwrap()
            .panicked_24h,
        0
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_panicking_handler_shows_in_the_metrics(pool: PgPool) {
    use runledger_engine::runtime::Supervisor;
    let catalog = JobCatalog::new().job(
        "risky",
        handler("risky", |_, _| async {
            if std::hint::black_box(true) {
                panic!("handler bug");
            }
            Ok(JobCompletion::success())
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    insert_job(&pool, "risky", json!({})).await;
    let supervisor = Supervisor::builder(&pool, crate::support::fast_config("w-panic"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    crate::support::wait_for_status(
        &pool,
        "DEAD_LETTERED",
        1,
        std::time::Duration::from_secs(30),
    )
    .await;
    supervisor
        .shutdown_with_timeout(std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let metrics = get_job_metrics(&pool, None).await.unwrap();
    assert_eq!(metrics[0].panicked_24h, 1);
}

// ---------------------------------------------------------------------------------------------
// The payload edit
// ---------------------------------------------------------------------------------------------

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_uuid_array_field_of_a_pending_unclaimed_direct_job_can_be_replaced(pool: PgPool) {
    define(&pool, "mail.batch", DefinitionOpts::default()).await;
    let id = insert_job(
        &pool,
        "mail.batch",
        json!({"subject": "hi", "recipient_ids": []}),
    )
    .await;
    let recipients = [Uuid::now_v7(), Uuid::now_v7()];
    let outcome = update_job_payload_uuid_array_field(
        &pool,
        id,
        TenantScope::Admin,
        "recipient_ids",
        &recipients,
    )
    .await
    .unwrap();
    assert_eq!(outcome, JobPayloadUuidArrayFieldUpdate::Updated);
    assert_eq!(
        job(&pool, id).await.payload,
        json!({"subject": "hi", "recipient_ids": recipients})
    );
    let added = update_job_payload_uuid_array_field(&pool, id, TenantScope::Admin, "cc_ids", &[])
        .await
        .unwrap();
    assert_eq!(
        added,
        JobPayloadUuidArrayFieldUpdate::Updated,
        "a missing field is created"
    );
    assert_eq!(job(&pool, id).await.payload["cc_ids"], json!([]));

    let err = update_job_payload_uuid_array_field(&pool, id, TenantScope::Admin, " ", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.invalid_payload_field");
    assert_eq!(
        update_job_payload_uuid_array_field(&pool, id, TenantScope::Global, "cc_ids", &[])
            .await
            .unwrap(),
        JobPayloadUuidArrayFieldUpdate::Updated,
        "a job without organization is in the global scope"
    );
    assert_eq!(
        update_job_payload_uuid_array_field(
            &pool,
            id,
            TenantScope::Organization(Uuid::now_v7()),
            "cc_ids",
            &[]
        )
        .await
        .unwrap(),
        JobPayloadUuidArrayFieldUpdate::NotFound
    );
    assert_eq!(
        update_job_payload_uuid_array_field(
            &pool,
            runledger_engine::core::jobs::JobId::new_v7(),
            TenantScope::Admin,
            "cc_ids",
            &[]
        )
        .await
        .unwrap(),
        JobPayloadUuidArrayFieldUpdate::NotFound
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_payload_edit_names_why_it_refuses(pool: PgPool) {
    define(&pool, "mail.batch", DefinitionOpts::default()).await;
    let pool_ref = &pool;
    let edit = |id| async move {
        match update_job_payload_uuid_array_field(pool_ref, id, TenantScope::Admin, "ids", &[])
            .await
            .unwrap()
        {
            JobPayloadUuidArrayFieldUpdate::Rejected(reason) => reason,
            other => panic!("expected a rejection, got {other:?}"),
        }
    };
    let payload = json!({"ids": []});
    let keyed = enqueue_job(
        &pool,
        &JobEnqueue::new("mail.batch", &payload).idempotency_key("batch-1"),
    )
    .await
    .unwrap()
    .id;
    assert_eq!(
        edit(keyed).await,
        JobPayloadUpdateRejection::IdempotentRequestSnapshot
    );

    let scalar = insert_job(&pool, "mail.batch", json!([1, 2])).await;
    assert_eq!(
        edit(scalar).await,
        JobPayloadUpdateRejection::PayloadNotAnObject
    );

    // Claimed (leased), then retried (pending again, but an attempt of this run started).
    sqlx::query("DELETE FROM runledger.job_queue WHERE id = ANY($1)")
        .bind(vec![keyed.0, scalar.0])
        .execute(&pool)
        .await
        .unwrap();
    let leased = insert_job(&pool, "mail.batch", json!({"ids": []})).await;
    let claimed = claim_one(&pool).await;
    assert_eq!(
        edit(leased).await,
        JobPayloadUpdateRejection::AlreadyClaimed
    );
    crate::support::fail_retryable(&pool, &claimed).await;
    assert_eq!(
        edit(leased).await,
        JobPayloadUpdateRejection::AlreadyClaimed
    );
    crate::support::make_due(&pool, leased).await;
    complete_job_success(&pool, &claim_one(&pool).await.lease(), None)
        .await
        .unwrap();
    assert_eq!(edit(leased).await, JobPayloadUpdateRejection::Terminal);

    let step = insert_job(&pool, "mail.batch", json!({"ids": []})).await;
    attach_to_workflow(&pool, step).await;
    assert_eq!(edit(step).await, JobPayloadUpdateRejection::WorkflowManaged);
    assert_eq!(
        job(&pool, step).await.payload,
        json!({"ids": []}),
        "nothing changed"
    );
}

// ---------------------------------------------------------------------------------------------
// Catalog-validated builders
// ---------------------------------------------------------------------------------------------

fn noop(job_type: &'static str) -> impl runledger_engine::core::jobs::JobHandler {
    handler(job_type, |_, _| async { Ok(JobCompletion::success()) })
}

#[test]
fn catalog_builders_refuse_unknown_and_disabled_types_before_any_sql() {
    let catalog = JobCatalog::new()
        .job("emails.send", noop("emails.send"))
        .job_with_definition_overrides(
            "emails.legacy",
            noop("emails.legacy"),
            JobCatalogDefinitionOverrides::new().enabled(false),
        );
    let payload = json!({"to": "ada@example.com"});
    let request = catalog.job_enqueue("emails.send", &payload).unwrap();
    assert_eq!(request.job_type.as_str(), "emails.send");
    assert_eq!(request.payload, &payload);
    let step = catalog
        .workflow_step("send", "emails.send", &payload)
        .unwrap()
        .depends_on_success(StepKey::new("draft"))
        .build();
    assert_eq!(step.job_type.as_ref().unwrap().as_str(), "emails.send");

    for build in [
        catalog.job_enqueue("emails.sned", &payload).map(|_| ()),
        catalog
            .workflow_step("s", "emails.sned", &payload)
            .map(|_| ()),
    ] {
        assert_eq!(build.unwrap_err().code(), "catalog.unknown_job_type");
    }
    for build in [
        catalog.job_enqueue("emails.legacy", &payload).map(|_| ()),
        catalog
            .workflow_step("s", "emails.legacy", &payload)
            .map(|_| ()),
    ] {
        assert_eq!(build.unwrap_err().code(), "catalog.job_type_disabled");
    }

    // Catalog-wide defaults disable; a per-job override enables one job again.
    let mostly_off = JobCatalog::new()
        .with_defaults(JobCatalogDefinitionOverrides::new().enabled(false))
        .job("a.off", noop("a.off"))
        .job("a.on", noop("a.on"))
        .definition_overrides("a.on", JobCatalogDefinitionOverrides::new().enabled(true));
    assert_eq!(
        mostly_off
            .job_enqueue("a.off", &payload)
            .unwrap_err()
            .code(),
        "catalog.job_type_disabled"
    );
    assert!(mostly_off.job_enqueue("a.on", &payload).is_ok());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_catalog_request_is_still_refused_when_an_operator_disabled_the_type(pool: PgPool) {
    let catalog = JobCatalog::new().job("emails.send", noop("emails.send"));
    catalog.sync_definitions(&pool).await.unwrap();
    let payload = json!({});
    let request = catalog.job_enqueue("emails.send", &payload).unwrap();
    enqueue_job(&pool, &request).await.unwrap();
    set_job_definition_enabled(&pool, "emails.send", false)
        .await
        .unwrap();
    let err = enqueue_job(&pool, &request).await.unwrap_err();
    assert_eq!(err.code(), "job.definition_not_found_or_disabled");
}

// ---------------------------------------------------------------------------------------------
// Named loop errors
// ---------------------------------------------------------------------------------------------

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn worker_reaper_and_scheduler_passes_fail_with_their_named_errors(pool: PgPool) {
    let config = JobsConfig::default();
    let reaper = Reaper::new(
        pool.clone(),
        ReaperConfig::from_jobs_config(&config),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    let scheduler =
        Scheduler::new(pool.clone(), SchedulerConfig::from_jobs_config(&config)).unwrap();
    let mut registry = runledger_engine::runtime::registry::JobRegistry::new();
    registry.register(noop("seed.worker_pass")).unwrap();
    let worker = runledger_engine::runtime::worker::WorkerLoop::new(
        pool.clone(),
        std::sync::Arc::new(registry),
        runledger_engine::runtime::worker::WorkerConfig::from_jobs_config(&config),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    assert!(reaper.run_once().await.is_ok());
    assert_eq!(worker.run_once().await.unwrap().claimed, 0);
    pool.close().await;
    let ReaperError::Persistence(inner) = reaper.run_once().await.unwrap_err() else {
        panic!("a reaper pass fails with ReaperError::Persistence");
    };
    assert_eq!(inner.code(), "storage.unavailable");
    let err: SchedulerError = scheduler.run_once().await.unwrap_err();
    assert_eq!(err.code(), "storage.unavailable");
    let err: WorkerError = worker.run_once().await.unwrap_err();
    assert_eq!(err.code(), "storage.unavailable");
}
