//! Execution resource keys: at most one job holding a key runs at a time across all workers.

use std::time::Duration;

use runledger_engine::core::jobs::{
    JobDefaults, JobFailure, JobType, StepKey, WorkflowRunEnqueueBuilder,
    WorkflowStepEnqueueBuilder, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    ClaimRequest, JobEnqueue, TenantScope, cancel_job, claim_jobs, claim_limited_jobs,
    complete_job_failure, complete_job_success, enqueue_job, enqueue_jobs, enqueue_workflow_run,
    reap_expired_leases,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use runledger_engine::runtime::supervisor::connections_used;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::queues::{Spans, max_overlap, timed};
use crate::support::{
    DefinitionOpts, LONG_LEASE, WORKER, define, expire_lease, fast_config, pool_of, wait_for_status,
};

fn keyed<'a>(job_type: &'a str, payload: &'a Value, key: &'a str) -> JobEnqueue<'a> {
    JobEnqueue::new(job_type, payload).resource_key(key)
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn two_jobs_with_one_resource_key_never_overlap_while_jobs_without_keys_run_in_parallel(
    pool: PgPool,
) {
    let keyed_spans = Spans::default();
    let free_spans = Spans::default();
    let catalog = timed(
        JobCatalog::new(),
        "printer.print",
        JobDefaults::new(),
        Duration::from_millis(200),
        &keyed_spans,
    );
    let catalog = timed(
        catalog,
        "thumbnails.make",
        JobDefaults::new(),
        Duration::from_millis(300),
        &free_spans,
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let payloads: Vec<Value> = (0..6).map(|n| json!({ "n": n })).collect();
    let mut requests: Vec<JobEnqueue<'_>> = payloads
        .iter()
        .map(|p| keyed("printer.print", p, "printer:lobby"))
        .collect();
    requests.extend(
        payloads
            .iter()
            .map(|p| JobEnqueue::new("thumbnails.make", p)),
    );
    enqueue_jobs(&pool, &requests).await.unwrap();

    // Two Supervisors hold more connections at once than the test's pool has.
    let workers = pool_of(&pool, 2 * connections_used(&fast_config("keys"))).await;
    let supervisors: Vec<_> = ["keys-a", "keys-b"]
        .into_iter()
        .map(|worker| {
            Supervisor::builder(&workers, fast_config(worker))
                .unwrap()
                .with_catalog(&catalog)
                .build()
                .unwrap()
        })
        .collect();
    wait_for_status(&pool, "SUCCEEDED", 12, Duration::from_secs(60)).await;
    for supervisor in supervisors {
        supervisor
            .shutdown_with_timeout(Duration::from_secs(10))
            .await
            .unwrap();
    }

    let (keyed_spans, free_spans) = (keyed_spans.lock().unwrap(), free_spans.lock().unwrap());
    assert_eq!(keyed_spans.len(), 6);
    eprintln!(
        "one resource key, two supervisors: at most {} keyed jobs at once; jobs without keys: at most {}",
        max_overlap(&keyed_spans),
        max_overlap(&free_spans)
    );
    assert_eq!(
        max_overlap(&keyed_spans),
        1,
        "jobs holding one key never overlap"
    );
    assert!(
        max_overlap(&free_spans) >= 4,
        "jobs without keys run in parallel"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_job_blocked_by_its_key_stays_pending_and_other_keys_are_claimed(pool: PgPool) {
    define(&pool, "printer.print", DefinitionOpts::default()).await;
    let payload = json!({});
    enqueue_jobs(
        &pool,
        &[
            keyed("printer.print", &payload, "printer:lobby"),
            keyed("printer.print", &payload, "printer:lobby"),
            keyed("printer.print", &payload, "printer:annex"),
        ],
    )
    .await
    .unwrap();
    let request = ClaimRequest::new(WORKER, 10, LONG_LEASE);

    assert!(
        claim_jobs(&pool, &request).await.unwrap().is_empty(),
        "keyed jobs are left to the limited claim"
    );
    let claimed = claim_limited_jobs(&pool, &request).await.unwrap();
    let mut keys: Vec<_> = claimed.iter().map(|job| job.resource_key.clone()).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            Some("printer:annex".to_owned()),
            Some("printer:lobby".to_owned())
        ],
        "one job per key"
    );
    assert!(
        claim_limited_jobs(&pool, &request)
            .await
            .unwrap()
            .is_empty()
    );
    let blocked: (String, i32) =
        sqlx::query_as("SELECT status, attempt FROM runledger.job_queue WHERE status = 'PENDING'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        blocked,
        ("PENDING".to_owned(), 0),
        "the blocked job spent no attempt"
    );
}

/// Claims the one claimable job of `printer:lobby`, asserting there is exactly one.
async fn claim_holder(pool: &PgPool) -> runledger_engine::postgres::jobs::ClaimedJob {
    let mut claimed = claim_limited_jobs(pool, &ClaimRequest::new(WORKER, 10, LONG_LEASE))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "exactly one holder of the key");
    claimed.remove(0)
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_key_is_freed_by_success_failure_retry_cancel_and_the_reaper(pool: PgPool) {
    define(
        &pool,
        "printer.print",
        DefinitionOpts {
            retry_base_delay_ms: 1,
            retry_max_delay_ms: 1,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let payload = json!({});
    let requests: Vec<_> = (0..5)
        .map(|_| keyed("printer.print", &payload, "printer:lobby"))
        .collect();
    enqueue_jobs(&pool, &requests).await.unwrap();

    let first = claim_holder(&pool).await;
    complete_job_success(&pool, &first.lease(), None)
        .await
        .unwrap();

    let second = claim_holder(&pool).await;
    complete_job_failure(
        &pool,
        &second.lease(),
        &JobFailure::retryable("t.retry", "again"),
    )
    .await
    .unwrap();

    // Three other jobs wait for the key; the retried one joins them.
    let third = claim_holder(&pool).await;
    complete_job_failure(
        &pool,
        &third.lease(),
        &JobFailure::terminal("t.fatal", "no"),
    )
    .await
    .unwrap();

    let fourth = claim_holder(&pool).await;
    cancel_job(&pool, fourth.id, TenantScope::Global)
        .await
        .unwrap();

    let fifth = claim_holder(&pool).await;
    expire_lease(&pool, fifth.id).await;
    let reaped = reap_expired_leases(&pool, 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(reaped.len(), 1);

    // Every lease end freed the key: the next holder can be claimed each time.
    let sixth = claim_holder(&pool).await;
    assert_eq!(sixth.resource_key.as_deref(), Some("printer:lobby"));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_workflow_steps_job_holds_the_steps_resource_key(pool: PgPool) {
    define(&pool, "printer.print", DefinitionOpts::default()).await;
    let (payload, meta) = (json!({}), json!({}));
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("print.batch"), &meta)
        .step(
            WorkflowStepEnqueueBuilder::new(
                StepKey::new("print"),
                JobType::new("printer.print"),
                &payload,
            )
            .resource_key("printer:lobby")
            .build(),
        )
        .build()
        .unwrap();
    enqueue_workflow_run(&pool, &run).await.unwrap();

    let holder = claim_holder(&pool).await;
    assert_eq!(holder.resource_key.as_deref(), Some("printer:lobby"));
    assert_eq!(holder.workflow_step_key.as_deref(), Some("print"));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_invalid_resource_key_is_refused_and_nothing_is_enqueued(pool: PgPool) {
    define(&pool, "printer.print", DefinitionOpts::default()).await;
    let payload = json!({});
    for key in ["", "  ", "a\0b"] {
        let err = enqueue_job(&pool, &keyed("printer.print", &payload, key))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "job.invalid_resource_key", "{key:?}");
    }
    let long = "k".repeat(256);
    let err = enqueue_job(&pool, &keyed("printer.print", &payload, &long))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.invalid_resource_key");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 0);
}
