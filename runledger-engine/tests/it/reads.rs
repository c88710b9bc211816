//! Read APIs: one job, job lists with keyset pagination, attempts, events and dead letters.

use std::collections::HashSet;

use runledger_engine::core::jobs::{
    JobAttemptOutcome, JobEventType, JobFailureKind, JobId, JobStatus,
};
use runledger_engine::postgres::jobs::{
    ClaimRequest, DeadLetterListFilter, JobEnqueue, JobListFilter, TenantScope, cancel_job,
    claim_jobs, complete_job_success, enqueue_job, get_job_by_id, list_dead_letters,
    list_job_attempts, list_job_events, list_jobs, requeue_job,
};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    DefinitionOpts, LONG_LEASE, WORKER, claim, claim_one, dead_letter, define, fail_retryable,
    insert_job, make_due, one_job,
};

fn ids(jobs: &[runledger_engine::postgres::jobs::JobRecord]) -> Vec<JobId> {
    jobs.iter().map(|job| job.id).collect()
}

/// Enqueues `count` jobs of `job_type` one by one; returns their ids, oldest first.
async fn enqueue_many(pool: &PgPool, job_type: &str, count: usize) -> Vec<JobId> {
    let mut ids = Vec::new();
    for n in 0..count {
        ids.push(insert_job(pool, job_type, json!({"n": n})).await);
    }
    ids
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn get_job_by_id_returns_the_stored_job(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({"to": "ada@example.com"});
    let organization = Uuid::now_v7();
    let enqueued = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &payload)
            .organization_id(organization)
            .idempotency_key("reads:1"),
    )
    .await
    .unwrap();

    let record = get_job_by_id(&pool, enqueued.id, TenantScope::Admin)
        .await
        .unwrap()
        .expect("job exists");

    assert_eq!(record.id, enqueued.id);
    assert_eq!(record.job_type, "emails.send");
    assert_eq!(record.payload, payload);
    assert_eq!(record.status, JobStatus::Pending);
    assert_eq!(record.organization_id, Some(organization));
    assert_eq!(record.idempotency_key.as_deref(), Some("reads:1"));
    assert_eq!(record.max_attempts, 3);
    assert_eq!(record.progress, None);
    assert_eq!(record.output, None);
    assert_eq!(record.workflow_run_id, None);
    assert!(record.created_at <= record.updated_at);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn get_job_by_id_of_an_unknown_id_is_none(pool: PgPool) {
    one_job(&pool).await;

    let record = get_job_by_id(&pool, JobId::new_v7(), TenantScope::Admin)
        .await
        .unwrap();

    assert_eq!(record, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_jobs_filters_by_status_and_job_type_newest_first(pool: PgPool) {
    define(&pool, "a.one", DefinitionOpts::default()).await;
    define(&pool, "b.two", DefinitionOpts::default()).await;
    let a = enqueue_many(&pool, "a.one", 3).await;
    let b = enqueue_many(&pool, "b.two", 2).await;
    let only_a = vec!["a.one".to_owned()];
    let leased = claim_jobs(
        &pool,
        &ClaimRequest::new(WORKER, 1, LONG_LEASE).job_types(&only_a),
    )
    .await
    .unwrap();
    assert_eq!(leased[0].id, a[0]);

    let page = list_jobs(&pool, &JobListFilter::new().status(JobStatus::Leased))
        .await
        .unwrap();
    assert_eq!(ids(&page.jobs), vec![a[0]]);
    assert_eq!(page.next_cursor, None);

    let page = list_jobs(&pool, &JobListFilter::new().status(JobStatus::Pending))
        .await
        .unwrap();
    assert_eq!(ids(&page.jobs), vec![b[1], b[0], a[2], a[1]]);

    let page = list_jobs(&pool, &JobListFilter::new().job_type("b.two"))
        .await
        .unwrap();
    assert_eq!(ids(&page.jobs), vec![b[1], b[0]]);

    let page = list_jobs(
        &pool,
        &JobListFilter::new()
            .status(JobStatus::Pending)
            .job_type("a.one"),
    )
    .await
    .unwrap();
    assert_eq!(ids(&page.jobs), vec![a[2], a[1]]);

    let page = list_jobs(
        &pool,
        &JobListFilter::new()
            .status(JobStatus::Succeeded)
            .job_type("a.one"),
    )
    .await
    .unwrap();
    assert!(page.jobs.is_empty());
    assert_eq!(page.next_cursor, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_jobs_filters_by_organization(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({});
    let organization = Uuid::now_v7();
    let theirs = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &payload).organization_id(organization),
    )
    .await
    .unwrap()
    .id;
    insert_job(&pool, "emails.send", json!({})).await;

    let page = list_jobs(&pool, &JobListFilter::new().organization_id(organization))
        .await
        .unwrap();

    assert_eq!(ids(&page.jobs), vec![theirs]);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_jobs_pages_with_a_keyset_cursor_without_overlap(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let enqueued = enqueue_many(&pool, "test.job", 7).await;
    let newest_first: Vec<JobId> = enqueued.iter().rev().copied().collect();

    let mut filter = JobListFilter::new().limit(3);
    let mut pages = Vec::new();
    loop {
        let page = list_jobs(&pool, &filter).await.unwrap();
        pages.push(ids(&page.jobs));
        match page.next_cursor {
            Some(cursor) => {
                assert_eq!(Some(&cursor), page.jobs.last().map(|job| &job.id));
                filter = filter.after(cursor);
            }
            None => break,
        }
        assert!(pages.len() < 10, "pagination does not terminate");
    }

    assert_eq!(
        pages,
        vec![
            newest_first[0..3].to_vec(),
            newest_first[3..6].to_vec(),
            newest_first[6..7].to_vec(),
        ]
    );
    let seen: HashSet<JobId> = pages.iter().flatten().copied().collect();
    assert_eq!(seen.len(), 7, "no job on two pages");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_page_that_ends_exactly_at_the_last_job_has_no_cursor(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let enqueued = enqueue_many(&pool, "test.job", 6).await;

    let first = list_jobs(&pool, &JobListFilter::new().limit(3))
        .await
        .unwrap();
    let cursor = first.next_cursor.expect("more jobs follow");
    let second = list_jobs(&pool, &JobListFilter::new().limit(3).after(cursor))
        .await
        .unwrap();

    assert_eq!(
        ids(&second.jobs),
        vec![enqueued[2], enqueued[1], enqueued[0]]
    );
    assert_eq!(second.next_cursor, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_jobs_with_limit_zero_uses_a_page_of_100(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let payloads: Vec<serde_json::Value> = (0..101).map(|n| json!({"n": n})).collect();
    let requests: Vec<JobEnqueue<'_>> = payloads
        .iter()
        .map(|payload| JobEnqueue::new("test.job", payload))
        .collect();
    runledger_engine::postgres::jobs::enqueue_jobs(&pool, &requests)
        .await
        .unwrap();

    let page = list_jobs(&pool, &JobListFilter::new()).await.unwrap();

    assert_eq!(page.jobs.len(), 100);
    assert!(page.next_cursor.is_some());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_job_attempts_returns_every_attempt_in_order(pool: PgPool) {
    let job_id = one_job(&pool).await;
    for _ in 0..2 {
        let claimed = claim_one(&pool).await;
        fail_retryable(&pool, &claimed).await;
        make_due(&pool, job_id).await;
    }
    let last = claim(&pool, "worker-b", 1).await.remove(0);
    complete_job_success(&pool, &last.lease(), None)
        .await
        .unwrap();

    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();

    assert_eq!(
        attempts.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(
        attempts.iter().map(|a| a.outcome).collect::<Vec<_>>(),
        vec![
            JobAttemptOutcome::Failed,
            JobAttemptOutcome::Failed,
            JobAttemptOutcome::Succeeded
        ]
    );
    assert_eq!(
        attempts.iter().map(|a| a.failure_kind).collect::<Vec<_>>(),
        vec![
            Some(JobFailureKind::Retryable),
            Some(JobFailureKind::Retryable),
            None
        ]
    );
    assert_eq!(attempts[2].worker_id, "worker-b");
    assert!(attempts.iter().all(|a| a.job_id == job_id));
    assert!(
        attempts
            .windows(2)
            .all(|w| w[0].leased_at <= w[1].leased_at)
    );
    assert!(
        list_job_attempts(&pool, JobId::new_v7(), TenantScope::Admin)
            .await
            .unwrap()
            .is_empty()
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_job_events_returns_the_history_in_order(pool: PgPool) {
    define(
        &pool,
        "test.job",
        DefinitionOpts {
            max_attempts: 2,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let job_id = insert_job(&pool, "test.job", json!({})).await;
    for _ in 0..2 {
        let claimed = claim_one(&pool).await;
        fail_retryable(&pool, &claimed).await;
        make_due(&pool, job_id).await;
    }
    requeue_job(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    cancel_job(&pool, job_id, TenantScope::Admin).await.unwrap();

    let events = list_job_events(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();

    assert_eq!(
        events.iter().map(|e| e.event_type).collect::<Vec<_>>(),
        vec![
            JobEventType::RetryScheduled,
            JobEventType::DeadLettered,
            JobEventType::Requeued,
            JobEventType::Canceled
        ]
    );
    assert_eq!(
        events.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        vec![Some(1), Some(2), Some(2), Some(2)]
    );
    assert_eq!(
        events
            .iter()
            .map(|e| e.worker_id.as_deref())
            .collect::<Vec<_>>(),
        vec![Some(WORKER), Some(WORKER), None, None]
    );
    assert!(events.windows(2).all(|w| w[0].id < w[1].id));
    assert!(events.iter().all(|e| e.job_id == job_id));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_dead_letters_filters_by_job_type_newest_first(pool: PgPool) {
    define(&pool, "a.one", DefinitionOpts::default()).await;
    define(&pool, "b.two", DefinitionOpts::default()).await;
    let a = enqueue_many(&pool, "a.one", 2).await;
    let b = enqueue_many(&pool, "b.two", 1).await;
    for claimed in claim(&pool, WORKER, 3).await {
        dead_letter(&pool, &claimed).await;
    }

    let only_a = list_dead_letters(&pool, &DeadLetterListFilter::new().job_type("a.one"))
        .await
        .unwrap();
    assert_eq!(only_a.len(), 2);
    assert!(only_a.iter().all(|d| d.job_type == "a.one"));
    assert_eq!(
        only_a.iter().map(|d| d.job_id).collect::<HashSet<_>>(),
        a.iter().copied().collect::<HashSet<_>>()
    );
    assert!(only_a[0].id > only_a[1].id, "newest first");

    let only_b = list_dead_letters(&pool, &DeadLetterListFilter::new().job_type("b.two"))
        .await
        .unwrap();
    assert_eq!(
        only_b.iter().map(|d| d.job_id).collect::<Vec<_>>(),
        vec![b[0]]
    );
    assert_eq!(only_b[0].payload, json!({"n": 0}));

    let all = list_dead_letters(&pool, &DeadLetterListFilter::new())
        .await
        .unwrap();
    assert_eq!(all.len(), 3);
    let older = list_dead_letters(&pool, &DeadLetterListFilter::new().before_id(all[0].id))
        .await
        .unwrap();
    assert_eq!(
        older.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![all[1].id, all[2].id]
    );
    let none = list_dead_letters(&pool, &DeadLetterListFilter::new().job_type("c.three"))
        .await
        .unwrap();
    assert!(none.is_empty());
}
