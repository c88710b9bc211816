//! Enqueue: defaults and overrides, validation, batches, idempotency keys, transactions and the
//! wake-up notification.

use std::collections::{HashMap, HashSet};

use chrono::Utc;
use runledger_engine::core::jobs::{JobId, JobStatus};
use runledger_engine::postgres::ErrorCategory;
use runledger_engine::postgres::jobs::{
    GATED_JOB_CHANNEL, JOB_QUEUE_CHANNEL, JobDefinitionUpsert, JobEnqueue, TenantScope,
    enqueue_job, enqueue_jobs, get_job_by_id, upsert_job_definition,
};
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use uuid::Uuid;

use crate::support::{
    DefinitionOpts, WORKER, claim, count_jobs, count_status, define, insert_job, job, make_due,
    next_notification, next_notification_payload,
};

async fn jobs_with_key(pool: &PgPool, key: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue WHERE idempotency_key = $1")
        .bind(key)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_without_overrides_takes_priority_attempts_and_timeout_from_the_definition(
    pool: PgPool,
) {
    upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("emails.send")
            .priority(7)
            .max_attempts(4)
            .timeout_seconds(45),
    )
    .await
    .unwrap();
    let payload = json!({"to": "ada@example.com"});

    let enqueued = enqueue_job(&pool, &JobEnqueue::new("emails.send", &payload))
        .await
        .unwrap();

    assert!(enqueued.created);
    assert_eq!(enqueued.status, JobStatus::Pending);
    let record = job(&pool, enqueued.id).await;
    assert_eq!(record.job_type, "emails.send");
    assert_eq!(record.payload, payload);
    assert_eq!(record.status, JobStatus::Pending);
    assert_eq!(record.priority, 7);
    assert_eq!(record.max_attempts, 4);
    assert_eq!(record.timeout_seconds, 45);
    assert_eq!(record.attempt, 0);
    assert_eq!(record.attempts_used, 0);
    assert!(record.next_run_at <= Utc::now(), "due immediately");
    assert_eq!(record.idempotency_key, None);
    assert_eq!(record.worker_id, None);
    assert_eq!(record.finished_at, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_overrides_replace_the_definition_defaults(pool: PgPool) {
    upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("emails.send")
            .priority(7)
            .max_attempts(4)
            .timeout_seconds(45),
    )
    .await
    .unwrap();
    let payload = json!({"to": "ada@example.com"});
    let organization = Uuid::now_v7();
    let user = Uuid::now_v7();

    let enqueued = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &payload)
            .priority(-3)
            .max_attempts(9)
            .timeout_seconds(12)
            .organization_id(organization)
            .created_by_user_id(user),
    )
    .await
    .unwrap();

    let record = job(&pool, enqueued.id).await;
    assert_eq!(record.priority, -3);
    assert_eq!(record.max_attempts, 9);
    assert_eq!(record.timeout_seconds, 12);
    assert_eq!(record.organization_id, Some(organization));
    assert_eq!(record.created_by_user_id, Some(user));
}

/// A stored job's columns, leaving out those that differ between any two enqueues (its id and
/// timestamps), with whether it was due when enqueued.
async fn stored_request(pool: &PgPool, id: JobId) -> Value {
    sqlx::query_scalar(
        "SELECT to_jsonb(q) - '{id,created_at,updated_at,next_run_at}'::text[]
                || jsonb_build_object('due', q.next_run_at <= q.created_at)
         FROM runledger.job_queue q WHERE q.id = $1",
    )
    .bind(id.as_uuid())
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_job_enqueued_alone_is_stored_as_the_same_request_in_a_batch(pool: PgPool) {
    // One request goes to its own statement (`runledger.enqueue_job`), a batch to the array one.
    let limited = runledger_engine::core::jobs::JobDefaults::new()
        .priority(4)
        .max_attempts(6)
        .timeout_seconds(40)
        .queue("reports")
        .global_concurrency(2);
    upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("reports.render").values(limited),
    )
    .await
    .unwrap();
    define(&pool, "printers.print", DefinitionOpts::default()).await;
    let payload = json!({"report": 7, "pages": [1, 2]});
    let (organization, user) = (Uuid::now_v7(), Uuid::now_v7());
    let requests = [
        JobEnqueue::new("reports.render", &payload),
        JobEnqueue::new("printers.print", &payload)
            .priority(-2)
            .max_attempts(9)
            .timeout_seconds(12)
            .organization_id(organization)
            .created_by_user_id(user)
            .resource_key("printer:lobby"),
        JobEnqueue::new("printers.print", &payload).delay(std::time::Duration::from_secs(3_600)),
    ];

    for request in &requests {
        let alone = enqueue_job(&pool, request).await.unwrap();
        let filler = JobEnqueue::new("printers.print", &payload);
        let batch = enqueue_jobs(&pool, &[request.clone(), filler])
            .await
            .unwrap();
        let (alone, in_batch) = (
            stored_request(&pool, alone.id).await,
            stored_request(&pool, batch[0].id).await,
        );
        assert_eq!(alone, in_batch, "{:?}", request.job_type);
    }
    let gated: Vec<bool> =
        sqlx::query_scalar("SELECT gated FROM runledger.job_queue ORDER BY id LIMIT 4")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        gated,
        [true, true, false, true],
        "a limited type or a resource key gates"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_of_an_undefined_job_type_is_refused_and_inserts_nothing(pool: PgPool) {
    let payload = json!({});

    let err = enqueue_job(&pool, &JobEnqueue::new("nobody.defined.me", &payload))
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.definition_not_found_or_disabled");
    assert_eq!(err.category(), ErrorCategory::Conflict);
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_of_a_disabled_job_type_is_refused_like_an_undefined_one(pool: PgPool) {
    define(
        &pool,
        "emails.legacy",
        DefinitionOpts {
            enabled: false,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let payload = json!({});

    let err = enqueue_job(&pool, &JobEnqueue::new("emails.legacy", &payload))
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.definition_not_found_or_disabled");
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_with_a_blank_job_type_is_a_validation_error(pool: PgPool) {
    let payload = json!({});

    for blank in ["", "   ", "\t\n"] {
        let err = enqueue_job(&pool, &JobEnqueue::new(blank, &payload))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "job.invalid_job_type", "job type {blank:?}");
        assert_eq!(err.category(), ErrorCategory::Validation);
    }
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_with_a_non_positive_max_attempts_override_is_a_validation_error(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({});

    for max_attempts in [0, -1] {
        let err = enqueue_job(
            &pool,
            &JobEnqueue::new("emails.send", &payload).max_attempts(max_attempts),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), "job.invalid_max_attempts");
        assert_eq!(err.category(), ErrorCategory::Validation);
    }
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_with_a_non_positive_timeout_or_blank_key_is_a_validation_error(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({});

    let err = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &payload).timeout_seconds(0),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "job.invalid_timeout");

    let err = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &payload).idempotency_key("  "),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "job.invalid_idempotency_key");
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_job_with_run_at_in_the_future_is_not_claimable_until_then(pool: PgPool) {
    define(&pool, "reports.render", DefinitionOpts::default()).await;
    let payload = json!({"report": 1});
    let run_at = Utc::now() + chrono::Duration::hours(1);

    let enqueued = enqueue_job(
        &pool,
        &JobEnqueue::new("reports.render", &payload).run_at(run_at),
    )
    .await
    .unwrap();

    let record = job(&pool, enqueued.id).await;
    assert_eq!(record.status, JobStatus::Pending);
    let drift = (record.next_run_at - run_at).num_microseconds().unwrap();
    assert!(drift.abs() <= 1, "next_run_at is the requested run_at");
    assert!(claim(&pool, WORKER, 10).await.is_empty());

    // Once the time has come, it is claimed like any other job.
    make_due(&pool, enqueued.id).await;
    let claimed = claim(&pool, WORKER, 10).await;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, enqueued.id);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn batch_enqueue_of_500_jobs_returns_them_in_request_order_all_pending(pool: PgPool) {
    define(&pool, "reports.render", DefinitionOpts::default()).await;
    let payloads: Vec<Value> = (0..500).map(|n| json!({"n": n})).collect();
    let requests: Vec<JobEnqueue<'_>> = payloads
        .iter()
        .map(|payload| JobEnqueue::new("reports.render", payload))
        .collect();

    let enqueued = enqueue_jobs(&pool, &requests).await.unwrap();

    assert_eq!(enqueued.len(), 500);
    assert!(enqueued.iter().all(|job| job.created));
    assert!(enqueued.iter().all(|job| job.status == JobStatus::Pending));
    let distinct: HashSet<JobId> = enqueued.iter().map(|job| job.id).collect();
    assert_eq!(distinct.len(), 500);

    let stored: HashMap<Uuid, (Value, String)> = sqlx::query_as::<_, (Uuid, Value, String)>(
        "SELECT id, payload, status FROM runledger.job_queue",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(id, payload, status)| (id, (payload, status)))
    .collect();
    assert_eq!(stored.len(), 500);
    for (index, job) in enqueued.iter().enumerate() {
        let (payload, status) = &stored[&job.id.0];
        assert_eq!(
            payload,
            &json!({"n": index}),
            "result {index} is request {index}"
        );
        assert_eq!(status, "PENDING");
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn batch_enqueue_with_one_undefined_type_inserts_nothing(pool: PgPool) {
    define(&pool, "reports.render", DefinitionOpts::default()).await;
    let payload = json!({});
    let mut requests: Vec<JobEnqueue<'_>> = (0..10)
        .map(|_| JobEnqueue::new("reports.render", &payload))
        .collect();
    requests[5] = JobEnqueue::new("reports.missing", &payload);

    let err = enqueue_jobs(&pool, &requests).await.unwrap_err();

    assert_eq!(err.code(), "job.definition_not_found_or_disabled");
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_batch_of_interleaved_types_keeps_request_order_and_each_types_defaults(pool: PgPool) {
    // Inserted one type at a time, in one transaction.
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let urgent = runledger_engine::core::jobs::JobDefaults::new()
        .priority(9)
        .queue("reports");
    upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("reports.render").values(urgent),
    )
    .await
    .unwrap();
    let payloads: Vec<Value> = (0..6).map(|n| json!({"n": n})).collect();
    let requests: Vec<JobEnqueue<'_>> = payloads
        .iter()
        .enumerate()
        .map(|(n, payload)| {
            let job_type = if n % 2 == 0 {
                "emails.send"
            } else {
                "reports.render"
            };
            JobEnqueue::new(job_type, payload)
        })
        .collect();
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen(JOB_QUEUE_CHANNEL).await.unwrap();

    let enqueued = enqueue_jobs(&pool, &requests).await.unwrap();

    let ids: Vec<Uuid> = enqueued.iter().map(|job| job.id.0).collect();
    assert!(
        ids.windows(2).all(|pair| pair[0] < pair[1]),
        "ids follow the requests"
    );
    for (n, enqueued_job) in enqueued.iter().enumerate() {
        let (job_type, payload, priority, queue): (String, Value, i32, String) = sqlx::query_as(
            "SELECT job_type, payload, priority, queue FROM runledger.job_queue WHERE id = $1",
        )
        .bind(enqueued_job.id.0)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(payload, json!({"n": n}));
        let expected = if n % 2 == 0 {
            ("emails.send", 0, "default")
        } else {
            ("reports.render", 9, "reports")
        };
        assert_eq!((job_type.as_str(), priority, queue.as_str()), expected);
    }
    let mut woken = [
        next_notification_payload(&mut listener).await,
        next_notification_payload(&mut listener).await,
    ];
    woken.sort();
    assert_eq!(woken, ["emails.send", "reports.render"]);

    // Inside the caller's transaction, a batch that fails leaves the caller's own work intact.
    let mut tx = pool.begin().await.unwrap();
    enqueue_job(&mut *tx, &JobEnqueue::new("emails.send", &payloads[0]))
        .await
        .unwrap();
    let failing = [
        JobEnqueue::new("reports.render", &payloads[1]),
        JobEnqueue::new("reports.missing", &payloads[2]),
    ];
    let err = enqueue_jobs(&mut *tx, &failing).await.unwrap_err();
    assert_eq!(err.code(), "job.definition_not_found_or_disabled");
    tx.commit().await.unwrap();
    assert_eq!(count_jobs(&pool).await, 7);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_empty_batch_enqueues_nothing(pool: PgPool) {
    let enqueued = enqueue_jobs(&pool, &[]).await.unwrap();

    assert!(enqueued.is_empty());
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn keyed_enqueue_retried_with_the_same_request_returns_the_original_job(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({"to": "ada@example.com"});
    let request = JobEnqueue::new("emails.send", &payload)
        .idempotency_key("signup:42:welcome")
        .priority(3);

    let first = enqueue_job(&pool, &request).await.unwrap();
    let retry = enqueue_job(&pool, &request).await.unwrap();

    assert!(first.created);
    assert!(!retry.created);
    assert_eq!(retry.id, first.id);
    assert_eq!(retry.status, JobStatus::Pending);
    assert_eq!(jobs_with_key(&pool, "signup:42:welcome").await, 1);
    assert_eq!(
        job(&pool, first.id).await.idempotency_key.as_deref(),
        Some("signup:42:welcome")
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn keyed_retry_reports_the_current_status_of_the_original_job(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({"to": "ada@example.com"});
    let request = JobEnqueue::new("emails.send", &payload).idempotency_key("k-status");
    let first = enqueue_job(&pool, &request).await.unwrap();
    claim(&pool, WORKER, 1).await;

    let retry = enqueue_job(&pool, &request).await.unwrap();

    assert_eq!(retry.id, first.id);
    assert!(!retry.created);
    assert_eq!(retry.status, JobStatus::Leased);
    assert_eq!(count_jobs(&pool).await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn keyed_retry_with_reordered_payload_keys_is_the_same_request(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let original: Value =
        serde_json::from_str(r#"{"to": "ada@example.com", "meta": {"x": 1, "y": [1, 2]}}"#)
            .unwrap();
    let reordered: Value =
        serde_json::from_str(r#"{"meta": {"y": [1, 2], "x": 1}, "to": "ada@example.com"}"#)
            .unwrap();

    let first = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &original).idempotency_key("k-reorder"),
    )
    .await
    .unwrap();
    let retry = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &reordered).idempotency_key("k-reorder"),
    )
    .await
    .unwrap();

    assert_eq!(retry.id, first.id);
    assert!(!retry.created);
    assert_eq!(jobs_with_key(&pool, "k-reorder").await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn keyed_enqueue_with_a_different_payload_is_an_idempotency_conflict(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let original = json!({"to": "ada@example.com"});
    let different = json!({"to": "grace@example.com"});
    let first = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &original).idempotency_key("k-conflict"),
    )
    .await
    .unwrap();

    let err = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &different).idempotency_key("k-conflict"),
    )
    .await
    .unwrap_err();

    assert_eq!(err.code(), "job.idempotency_conflict");
    match err {
        runledger_engine::postgres::Error::IdempotencyConflict {
            existing_job_id, ..
        } => assert_eq!(existing_job_id, first.id),
        other => panic!("unexpected error {other:?}"),
    }
    assert_eq!(jobs_with_key(&pool, "k-conflict").await, 1);
    assert_eq!(job(&pool, first.id).await.payload, original);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn keyed_enqueue_with_different_settings_under_the_same_key_is_a_conflict(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({"to": "ada@example.com"});
    enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &payload).idempotency_key("k-settings"),
    )
    .await
    .unwrap();

    let err = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &payload)
            .idempotency_key("k-settings")
            .priority(10),
    )
    .await
    .unwrap_err();

    assert_eq!(err.code(), "job.idempotency_conflict");
    assert_eq!(count_jobs(&pool).await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn eight_concurrent_identical_keyed_enqueues_create_exactly_one_job(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;

    let handles: Vec<_> = (0..8)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let payload = json!({"to": "ada@example.com", "user": 42});
                enqueue_job(
                    &pool,
                    &JobEnqueue::new("emails.send", &payload).idempotency_key("k-concurrent"),
                )
                .await
            })
        })
        .collect();
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.unwrap().unwrap());
    }

    assert_eq!(results.len(), 8);
    let ids: HashSet<JobId> = results.iter().map(|job| job.id).collect();
    assert_eq!(ids.len(), 1, "every caller got the same job");
    assert_eq!(
        results.iter().filter(|job| job.created).count(),
        1,
        "exactly one caller created it"
    );
    assert_eq!(jobs_with_key(&pool, "k-concurrent").await, 1);
    assert_eq!(count_jobs(&pool).await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_inside_a_rolled_back_transaction_leaves_no_job(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({"to": "ada@example.com"});

    let mut tx = pool.begin().await.unwrap();
    let enqueued = enqueue_job(&mut *tx, &JobEnqueue::new("emails.send", &payload))
        .await
        .unwrap();
    // Not visible (nor claimable) outside the transaction before it commits.
    assert!(claim(&pool, WORKER, 10).await.is_empty());
    tx.rollback().await.unwrap();

    assert_eq!(
        get_job_by_id(&pool, enqueued.id, TenantScope::Admin)
            .await
            .unwrap(),
        None
    );
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_inside_a_committed_transaction_leaves_one_job(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({"to": "ada@example.com"});

    let mut tx = pool.begin().await.unwrap();
    let enqueued = enqueue_job(&mut *tx, &JobEnqueue::new("emails.send", &payload))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(count_jobs(&pool).await, 1);
    assert_eq!(count_status(&pool, "PENDING").await, 1);
    assert_eq!(job(&pool, enqueued.id).await.payload, payload);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enqueue_notifies_the_job_queue_channel_with_the_job_type(pool: PgPool) {
    assert_eq!(JOB_QUEUE_CHANNEL, "runledger_job_queue");
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen(JOB_QUEUE_CHANNEL).await.unwrap();

    insert_job(&pool, "emails.send", json!({"to": "ada@example.com"})).await;

    assert_eq!(
        next_notification_payload(&mut listener).await,
        "emails.send"
    );
}

/// Defines `printers.print` and `reports.limited` (a global limit of 1), and listens on both
/// wake-up channels.
async fn printers_and_a_limited_type_on_both_channels(pool: &PgPool) -> PgListener {
    define(pool, "printers.print", DefinitionOpts::default()).await;
    let limited = runledger_engine::core::jobs::JobDefaults::new().global_concurrency(1);
    upsert_job_definition(
        pool,
        &JobDefinitionUpsert::new("reports.limited").values(limited),
    )
    .await
    .unwrap();
    let mut listener = PgListener::connect_with(pool).await.unwrap();
    listener
        .listen_all([JOB_QUEUE_CHANNEL, GATED_JOB_CHANNEL])
        .await
        .unwrap();
    listener
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_job_holding_a_resource_key_or_under_a_limit_notifies_the_gated_channel(pool: PgPool) {
    assert_eq!(GATED_JOB_CHANNEL, "runledger_gated_jobs");
    let mut listener = printers_and_a_limited_type_on_both_channels(&pool).await;
    let payload = json!({});

    let keyed = JobEnqueue::new("printers.print", &payload).resource_key("printer:lobby");
    enqueue_job(&pool, &keyed).await.unwrap();
    insert_job(&pool, "printers.print", payload.clone()).await;
    insert_job(&pool, "reports.limited", payload.clone()).await;

    let mut received = Vec::new();
    for _ in 0..3 {
        received.push(next_notification(&mut listener).await);
    }
    assert_eq!(
        received,
        [
            (GATED_JOB_CHANNEL.to_owned(), "printers.print".to_owned()),
            (JOB_QUEUE_CHANNEL.to_owned(), "printers.print".to_owned()),
            (GATED_JOB_CHANNEL.to_owned(), "reports.limited".to_owned()),
        ]
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_batch_notifies_each_types_channels_for_its_due_rows_only(pool: PgPool) {
    define(&pool, "reports.later", DefinitionOpts::default()).await;
    define(&pool, "emails.after", DefinitionOpts::default()).await;
    let mut listener = printers_and_a_limited_type_on_both_channels(&pool).await;
    let payload = json!({});
    let in_an_hour = Utc::now() + chrono::Duration::hours(1);
    let batch = [
        JobEnqueue::new("printers.print", &payload).resource_key("printer:lobby"),
        JobEnqueue::new("reports.later", &payload).run_at(in_an_hour),
        JobEnqueue::new("printers.print", &payload),
        JobEnqueue::new("reports.limited", &payload),
        JobEnqueue::new("reports.later", &payload).run_at(in_an_hour),
        JobEnqueue::new("reports.limited", &payload),
        // Delayed, holding a key: neither channel.
        JobEnqueue::new("printers.print", &payload)
            .resource_key("printer:attic")
            .run_at(in_an_hour),
    ];

    enqueue_jobs(&pool, &batch).await.unwrap();
    insert_job(&pool, "emails.after", payload.clone()).await;

    let mut received = Vec::new();
    loop {
        let notification = next_notification(&mut listener).await;
        if notification.1 == "emails.after" {
            break;
        }
        received.push(notification);
    }
    received.sort();
    assert_eq!(
        received,
        [
            (GATED_JOB_CHANNEL.to_owned(), "printers.print".to_owned()),
            (GATED_JOB_CHANNEL.to_owned(), "reports.limited".to_owned()),
            (JOB_QUEUE_CHANNEL.to_owned(), "printers.print".to_owned()),
        ]
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn keyed_and_batch_enqueues_notify_once_per_job_type(pool: PgPool) {
    define(&pool, "emails.keyed", DefinitionOpts::default()).await;
    define(&pool, "reports.batch", DefinitionOpts::default()).await;
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen(JOB_QUEUE_CHANNEL).await.unwrap();
    let payload = json!({});

    enqueue_job(
        &pool,
        &JobEnqueue::new("emails.keyed", &payload).idempotency_key("keyed-notify"),
    )
    .await
    .unwrap();
    let batch: Vec<JobEnqueue<'_>> = (0..3)
        .map(|_| JobEnqueue::new("reports.batch", &payload))
        .collect();
    enqueue_jobs(&pool, &batch).await.unwrap();
    insert_job(&pool, "emails.keyed", payload.clone()).await;

    // Three rows of one type in one statement are one notification.
    assert_eq!(
        next_notification_payload(&mut listener).await,
        "emails.keyed"
    );
    assert_eq!(
        next_notification_payload(&mut listener).await,
        "reports.batch"
    );
    assert_eq!(
        next_notification_payload(&mut listener).await,
        "emails.keyed"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn delayed_or_rolled_back_enqueues_do_not_notify(pool: PgPool) {
    define(&pool, "reports.later", DefinitionOpts::default()).await;
    define(&pool, "reports.rolled_back", DefinitionOpts::default()).await;
    define(&pool, "reports.now", DefinitionOpts::default()).await;
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen(JOB_QUEUE_CHANNEL).await.unwrap();
    let payload = json!({});

    enqueue_job(
        &pool,
        &JobEnqueue::new("reports.later", &payload).run_at(Utc::now() + chrono::Duration::hours(1)),
    )
    .await
    .unwrap();
    let mut tx = pool.begin().await.unwrap();
    enqueue_job(&mut *tx, &JobEnqueue::new("reports.rolled_back", &payload))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    insert_job(&pool, "reports.now", payload.clone()).await;

    // Notifications arrive in commit order, so the first one must be the due, committed job.
    assert_eq!(
        next_notification_payload(&mut listener).await,
        "reports.now"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn keyed_retry_inside_a_batch_resolves_to_the_original_job(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let keyed = json!({"to": "ada@example.com"});
    let other = json!({"to": "grace@example.com"});
    let original = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &keyed).idempotency_key("k-batch"),
    )
    .await
    .unwrap();

    let results = enqueue_jobs(
        &pool,
        &[
            JobEnqueue::new("emails.send", &other),
            JobEnqueue::new("emails.send", &keyed).idempotency_key("k-batch"),
        ],
    )
    .await
    .unwrap();

    assert!(results[0].created);
    assert_ne!(results[0].id, original.id);
    assert!(!results[1].created);
    assert_eq!(results[1].id, original.id);
    assert_eq!(count_jobs(&pool).await, 2);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn batch_enqueue_that_fails_with_an_idempotency_conflict_inserts_nothing(pool: PgPool) {
    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let original = json!({"to": "ada@example.com"});
    let changed = json!({"to": "grace@example.com"});
    let unkeyed = json!({"to": "linus@example.com"});
    enqueue_job(
        &pool,
        &JobEnqueue::new("emails.send", &original).idempotency_key("k-batch-conflict"),
    )
    .await
    .unwrap();

    let err = enqueue_jobs(
        &pool,
        &[
            JobEnqueue::new("emails.send", &unkeyed),
            JobEnqueue::new("emails.send", &changed).idempotency_key("k-batch-conflict"),
        ],
    )
    .await
    .unwrap_err();

    assert_eq!(err.code(), "job.idempotency_conflict");
    // A failed call must not have enqueued part of the batch: a caller that retries (or
    // gives up) would otherwise run the unkeyed job an unknown number of times.
    assert_eq!(count_jobs(&pool).await, 1, "only the original job exists");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_keyed_retry_reads_only_its_key_however_small_the_table_was_before(pool: PgPool) {
    use sqlx::Connection;

    define(&pool, "emails.send", DefinitionOpts::default()).await;
    let payload = json!({"to": "ada@example.com"});
    let keyed = |key: &'static str| JobEnqueue::new("emails.send", &payload).idempotency_key(key);
    let keys = ["small-0", "small-1", "small-2", "small-3", "small-4"];
    for key in keys {
        enqueue_job(&pool, &keyed(key)).await.unwrap();
    }
    // Statistics of a small table, as autovacuum leaves them on a quiet queue, and retries on
    // one connection past the five executions after which a prepared statement may keep a
    // plan made from them.
    sqlx::query("ANALYZE runledger.job_queue")
        .execute(&pool)
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    for key in keys.iter().cycle().take(8) {
        assert!(!enqueue_job(&mut *conn, &keyed(key)).await.unwrap().created);
    }

    let many: Vec<String> = (0..5_000).map(|n| format!("many-{n}")).collect();
    let requests: Vec<_> = many
        .iter()
        .map(|key| JobEnqueue::new("emails.send", &payload).idempotency_key(key))
        .collect();
    enqueue_jobs(&pool, &requests).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let before = crate::support::rows_read(&mut tx, "job_queue").await;
    let retry = enqueue_job(&mut *tx, &keyed("small-0")).await.unwrap();
    let read = crate::support::rows_read(&mut tx, "job_queue").await - before;
    tx.commit().await.unwrap();
    assert!(!retry.created);
    assert!(read <= 10, "a keyed retry read {read} job rows");
}
