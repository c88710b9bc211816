//! Typed jobs: enqueue (in a transaction, in batches, with options), outputs, errors, and bad
//! payloads.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use runledger::engine::postgres::jobs::{JobEnqueue, TenantScope, enqueue_job};
use runledger::prelude::*;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use runledger::testing::{DrainOptions, drain, drain_with, prepare};

use crate::support::{eventually, job_state, start_worker};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) words: usize,
    pub(crate) longest: String,
}

#[job(name = "it.summarize", max_attempts = 3, timeout = "30s", priority = 5)]
pub(crate) async fn summarize(text: String) -> Result<Summary, JobError> {
    let longest = text
        .split_whitespace()
        .max_by_key(|w| w.len())
        .unwrap_or_default()
        .to_owned();
    Ok(Summary {
        words: text.split_whitespace().count(),
        longest,
    })
}

#[job(name = "it.add")]
pub(crate) async fn add(a: i64, b: i64) -> Result<i64, JobError> {
    Ok(a + b)
}

#[job(name = "it.refuse", max_attempts = 5)]
async fn refuse(reason: String) -> Result<(), JobError> {
    Err(JobError::terminal(reason).with_code("it.refused"))
}

static FLAKY_CALLS: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, thiserror::Error)]
#[error("upstream unavailable")]
struct Upstream;

#[job(name = "it.flaky", max_attempts = 3)]
async fn flaky(ctx: JobContext) -> Result<u32, Upstream> {
    FLAKY_CALLS.fetch_add(1, Ordering::SeqCst);
    if ctx.attempt() < 2 {
        Err(Upstream)
    } else {
        Ok(ctx.attempt() as u32)
    }
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn typed_job_enqueued_in_a_rolled_back_transaction_leaves_nothing(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let job = Add { a: 1, b: 2 }.enqueue(&mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    let found =
        runledger::engine::postgres::jobs::get_job_by_id(&pool, job.id(), TenantScope::Admin)
            .await
            .unwrap();
    assert!(found.is_none(), "the rolled-back job must not exist");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 0);

    let mut tx = pool.begin().await.unwrap();
    let job = Add { a: 1, b: 2 }.enqueue(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(job.status(&pool).await.unwrap().as_str(), "PENDING");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn typed_outputs_are_stored_and_read_back_typed(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let job = Summarize {
        text: "durable jobs on postgres".into(),
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let sum = Add { a: 40, b: 2 }.enqueue(&pool).await.unwrap();
    assert_eq!(job.output(&pool).await.unwrap(), None, "not run yet");
    assert_eq!(drain(&pool).await.unwrap().succeeded(), 2);
    assert_eq!(
        job.output(&pool).await.unwrap().unwrap(),
        Summary {
            words: 4,
            longest: "postgres".into()
        }
    );
    assert_eq!(sum.output(&pool).await.unwrap(), Some(42));
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn job_attribute_values_become_the_definition(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let definition = runledger::engine::postgres::jobs::get_job_definition(&pool, "it.summarize")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(definition.max_attempts, 3);
    assert_eq!(definition.timeout_seconds, 30);
    assert_eq!(definition.priority, 5);
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn enqueue_options_and_batches(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let org = uuid::Uuid::now_v7();
    let options = EnqueueOptions::new()
        .idempotency_key("add:1")
        .delay(Duration::from_secs(3600))
        .priority(9)
        .organization(org);
    let first = Add { a: 1, b: 1 }
        .enqueue_with(&pool, options.clone())
        .await
        .unwrap();
    let again = Add { a: 1, b: 1 }
        .enqueue_with(&pool, options.clone())
        .await
        .unwrap();
    assert_eq!(first.id(), again.id());
    assert!(first.was_created() && !again.was_created());
    let conflict = Add { a: 2, b: 2 }
        .enqueue_with(&pool, options)
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), "job.idempotency_conflict");

    let record =
        runledger::engine::postgres::jobs::get_job_by_id(&pool, first.id(), TenantScope::Admin)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(record.priority, 9);
    assert_eq!(record.organization_id, Some(org));
    assert!(record.next_run_at > chrono::Utc::now() + chrono::Duration::minutes(59));

    let batch = runledger::enqueue_batch(&pool, (0..50).map(|n| Add { a: n, b: n }))
        .await
        .unwrap();
    assert_eq!(batch.len(), 50);
    let count: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue WHERE job_type = 'it.add'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(count, 51);
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn job_errors_retry_or_dead_letter_with_their_codes(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let refused = Refuse {
        reason: "no such mailbox".into(),
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let flaky = Flaky {}.enqueue(&pool).await.unwrap();
    // The first pass dead-letters `refused` and schedules a retry of `flaky`; its backoff is
    // skipped, so the retry runs without waiting.
    let hour = std::time::Duration::from_secs(3_600);
    let report = drain_with(&pool, DrainOptions::new().include_delayed_for(hour))
        .await
        .unwrap();
    assert_eq!(report.passes, 2);
    assert_eq!(
        (report.dead_lettered(), report.retried(), report.succeeded()),
        (1, 1, 1)
    );
    let refused_state = job_state(&pool, refused.id()).await;
    assert_eq!(refused_state.0, "DEAD_LETTERED");
    assert_eq!(refused_state.1.as_deref(), Some("it.refused"));
    let attempts: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runledger.job_attempts WHERE job_id = $1")
            .bind(refused.id().0)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(attempts, 1, "a terminal error is not retried");

    // The `?`-converted error is retryable: the second attempt succeeds.
    assert_eq!(flaky.output(&pool).await.unwrap(), Some(2));
    let codes: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT error_code FROM runledger.job_attempt_history WHERE job_id = $1 ORDER BY attempt",
    )
    .bind(flaky.id().0)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(codes, vec![Some("job.handler_error".to_owned()), None]);
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_payload_that_no_longer_deserializes_is_dead_lettered_and_the_worker_keeps_running(
    pool: PgPool,
) {
    let worker = start_worker(&pool).await;
    // An old producer's payload: `b` is missing and `a` is a string.
    let stale = serde_json::json!({"a": "one"});
    let bad = enqueue_job(&pool, &JobEnqueue::new("it.add", &stale))
        .await
        .unwrap();
    let good = Add { a: 2, b: 3 }.enqueue(&pool).await.unwrap();

    let (status, code) = eventually("the bad job to end", || async {
        let state = job_state(&pool, bad.id).await;
        (state.0 != "PENDING" && state.0 != "LEASED").then_some(state)
    })
    .await;
    assert_eq!(status, "DEAD_LETTERED");
    assert_eq!(code.as_deref(), Some("job.payload_invalid"));
    let kept: serde_json::Value =
        sqlx::query_scalar("SELECT payload FROM runledger.job_dead_letters WHERE job_id = $1")
            .bind(bad.id.0)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(kept, stale, "the dead letter keeps the payload");

    assert_eq!(
        eventually("the good job", || async {
            good.output(&pool).await.unwrap()
        })
        .await,
        5
    );
    let later = Add { a: 10, b: 10 }.enqueue(&pool).await.unwrap();
    assert_eq!(
        eventually("a later job", || async {
            later.output(&pool).await.unwrap()
        })
        .await,
        20
    );
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_job_fn_stays_callable_directly() {
    let summary = summarize("a bb ccc".into()).await.unwrap();
    assert_eq!(summary.words, 3);
    assert_eq!(
        flaky(JobContext::for_tests("it.flaky"))
            .await
            .unwrap_err()
            .to_string(),
        "upstream unavailable"
    );
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn every_job_in_the_binary_is_in_the_workers_catalog_with_its_definition(pool: PgPool) {
    let worker = Worker::builder(&pool).build().unwrap();
    let job_types = worker.catalog().job_types();
    for name in ["it.add", "it.summarize", "it.refuse", "it.flaky"] {
        assert!(
            job_types.iter().any(|t| t == name),
            "{name} missing from {job_types:?}"
        );
    }
    let definitions = worker.catalog().definitions().unwrap();
    let summarize = definitions
        .iter()
        .find(|d| d.job_type.as_str() == "it.summarize")
        .unwrap();
    assert_eq!((summarize.max_attempts, summarize.timeout_seconds), (3, 30));
    assert_eq!(summarize.priority, 5);
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_job_handle_sees_only_its_own_organizations_job(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let (tenant, intruder) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let job = Add { a: 2, b: 3 }
        .enqueue_with(&pool, EnqueueOptions::new().organization(tenant))
        .await
        .unwrap();
    assert_eq!(job.status(&pool).await.unwrap().as_str(), "PENDING");

    for scope in [Some(intruder), None] {
        let foreign = runledger::JobHandle::<Add>::from_id(job.id(), scope);
        assert_eq!(
            foreign.status(&pool).await.unwrap_err().code(),
            "job.not_found"
        );
        assert_eq!(
            foreign.output(&pool).await.unwrap_err().code(),
            "job.not_found"
        );
    }
    let own = runledger::JobHandle::<Add>::from_id(job.id(), Some(tenant));
    assert_eq!(own.status(&pool).await.unwrap().as_str(), "PENDING");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_typed_payload_postgres_would_refuse_gets_a_validation_code(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let err = Summarize {
        text: "a NUL \u{0} inside".into(),
    }
    .enqueue(&pool)
    .await
    .unwrap_err();
    assert_eq!(err.code(), "job.invalid_payload");
    let err = Add { a: 1, b: 2 }
        .enqueue_with(
            &pool,
            EnqueueOptions::new().run_at(chrono::DateTime::<chrono::Utc>::MIN_UTC),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.invalid_run_at");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 0);
}
