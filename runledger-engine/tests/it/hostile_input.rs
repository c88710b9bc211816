//! One bad value harms no other job: outputs, payloads, failure messages and log lines that
//! PostgreSQL cannot store (or a worker cannot decode) are refused with a validation code at
//! the door, or isolated and failed with their own code, while the rest of the batch commits.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use runledger_engine::core::jobs::limits::MAX_JSON_DEPTH;
use runledger_engine::core::jobs::{JobCompletion, JobFailure, JobLogLevel, JobLogLine, JobStatus};
use runledger_engine::postgres::jobs::{
    DeadLetterListFilter, JobDefinitionUpsert, JobEnqueue, JobFailureDisposition, JobListFilter,
    JobLogListFilter, TenantScope, append_job_logs, complete_job_failure, enqueue_job,
    get_job_definition, list_dead_letters, list_job_logs, list_jobs, upsert_job_definition,
};
use runledger_engine::postgres::{Error, ErrorCategory};
use runledger_engine::runtime::observer::JobLifecycleObservers;
use runledger_engine::runtime::registry::JobRegistry;
use runledger_engine::runtime::worker::{WorkerConfig, WorkerLoop};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{
    DefinitionOpts, claim, claim_one, count_status, define, fast_config, handler, insert_job, job,
    one_job,
};

/// JSON with arrays nested `depth` levels deep.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!("bottom"), |inner, _| json!([inner]))
}

/// A worker whose `echo` handler returns `{"n": n}`, or an output PostgreSQL cannot store
/// (`"nul"`) or a worker could not decode again (`"deep"`) when the payload asks for one.
fn echo_worker(pool: &PgPool, worker_id: &str) -> WorkerLoop {
    let mut registry = JobRegistry::new();
    registry
        .register(handler("echo", |_, payload: Value| async move {
            let output = match payload["bad"].as_str() {
                Some("nul") => json!({ "text": "nul \u{0} inside" }),
                Some("deep") => json!({ "tree": nested(MAX_JSON_DEPTH + 10) }),
                _ => json!({ "n": payload["n"] }),
            };
            Ok(JobCompletion::with_output(output))
        }))
        .unwrap();
    WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config(worker_id)),
        JobLifecycleObservers::new(),
    )
    .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_output_postgres_refuses_fails_only_its_own_job_and_the_batch_commits(pool: PgPool) {
    define(&pool, "echo", DefinitionOpts::default()).await;
    let mut bad = Vec::new();
    for n in 0..100 {
        // Two outputs PostgreSQL cannot store or a worker could not read back, inside the
        // first claimed batch of 64.
        let payload = match n {
            10 => json!({ "bad": "nul" }),
            20 => json!({ "bad": "deep" }),
            _ => json!({ "n": n }),
        };
        let id = insert_job(&pool, "echo", payload).await;
        if n == 10 || n == 20 {
            bad.push(id);
        }
    }
    let worker = echo_worker(&pool, "w-outputs");

    let first = worker.run_once().await.unwrap();
    assert_eq!(first.claimed, 64);
    assert_eq!(
        (first.succeeded, first.failed, first.persist_failed),
        (62, 2, 0)
    );
    let second = worker.run_once().await.unwrap();
    assert_eq!((second.claimed, second.succeeded), (36, 36));

    assert_eq!(count_status(&pool, "SUCCEEDED").await, 98);
    for id in bad {
        let record = job(&pool, id).await;
        assert_eq!(record.status, JobStatus::DeadLettered);
        assert_eq!(
            record.last_error_code.as_deref(),
            Some("job.output_invalid")
        );
        assert_eq!(record.attempt, 1, "the bad job ran once");
    }
    let attempts: i32 = sqlx::query_scalar("SELECT max(attempt) FROM runledger.job_queue")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(attempts, 1, "no innocent job ran twice");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_payload_nested_too_deep_is_refused_at_enqueue(pool: PgPool) {
    define(&pool, "deep", DefinitionOpts::default()).await;
    let payload = nested(MAX_JSON_DEPTH + 1);
    let err = enqueue_job(&pool, &JobEnqueue::new("deep", &payload))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.payload_too_deep");
    assert_eq!(err.category(), ErrorCategory::Validation);
    assert_eq!(crate::support::count_jobs(&pool).await, 0);

    let deepest_allowed = nested(MAX_JSON_DEPTH);
    enqueue_job(&pool, &JobEnqueue::new("deep", &deepest_allowed))
        .await
        .unwrap();
}

/// Stores a job whose payload nests `depth` arrays deep, as a writer bypassing
/// `enqueue_job` (another language, an old version, hand-written SQL) could.
async fn insert_raw_deep_job(pool: &PgPool, job_type: &str, depth: i32) -> uuid::Uuid {
    sqlx::query_scalar(
        "INSERT INTO runledger.job_queue (job_type, payload, max_attempts, timeout_seconds)
         VALUES ($1, (repeat('[', $2) || repeat(']', $2))::jsonb, 3, 60)
         RETURNING id",
    )
    .bind(job_type)
    .bind(depth)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_stored_payload_too_deep_to_decode_is_dead_lettered_by_the_claim_and_the_batch_runs(
    pool: PgPool,
) {
    define(&pool, "deep", DefinitionOpts::default()).await;
    for n in 0..5 {
        insert_job(&pool, "deep", json!({ "n": n })).await;
    }
    let poison = insert_raw_deep_job(&pool, "deep", 200).await;
    for n in 5..10 {
        insert_job(&pool, "deep", json!({ "n": n })).await;
    }

    let claimed = claim(&pool, "w-deep", 64).await;
    assert_eq!(claimed.len(), 10, "every other job of the batch is leased");
    assert!(claimed.iter().all(|job| job.id.0 != poison));

    let poisoned = job(&pool, runledger_engine::core::jobs::JobId(poison)).await;
    assert_eq!(poisoned.status, JobStatus::DeadLettered);
    assert_eq!(poisoned.attempt, 0, "never leased");
    assert_eq!(
        poisoned.last_error_code.as_deref(),
        Some("job.payload_too_deep")
    );
    // Reads show the row with a marker instead of failing.
    assert_eq!(poisoned.payload["unreadable"], "job.payload_too_deep");
    let page = list_jobs(&pool, &JobListFilter::new()).await.unwrap();
    assert_eq!(page.jobs.len(), 11);
    let letters = list_dead_letters(&pool, &DeadLetterListFilter::new())
        .await
        .unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].error_code.as_deref(),
        Some("job.payload_too_deep")
    );
    // The dead letter keeps the stored payload itself.
    let kept: i32 = sqlx::query_scalar(
        "SELECT length(payload::text) FROM runledger.job_dead_letters WHERE job_id = $1",
    )
    .bind(poison)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(kept, 400);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_stored_number_no_worker_can_decode_is_dead_lettered_by_the_claim_and_the_deepest_payload_runs(
    pool: PgPool,
) {
    define(&pool, "odd", DefinitionOpts::default()).await;
    let deepest = insert_job(&pool, "odd", nested(MAX_JSON_DEPTH)).await;
    let huge: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO runledger.job_queue (job_type, payload, max_attempts, timeout_seconds)
         VALUES ('odd', '{\"n\": 1e400}'::jsonb, 3, 60)
         RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    insert_job(&pool, "odd", json!({ "n": 1 })).await;

    let claimed = claim(&pool, "w-odd", 64).await;
    assert_eq!(claimed.len(), 2, "the other jobs of the batch are leased");
    let decoded = claimed.iter().find(|job| job.id == deepest).unwrap();
    assert_eq!(decoded.payload, nested(MAX_JSON_DEPTH));

    let refused = job(&pool, runledger_engine::core::jobs::JobId(huge)).await;
    assert_eq!(refused.status, JobStatus::DeadLettered);
    assert_eq!(refused.attempt, 0, "no handler saw it");
    assert_eq!(
        refused.last_error_code.as_deref(),
        Some("job.payload_unreadable")
    );
    assert!(
        refused
            .last_error_message
            .as_deref()
            .is_some_and(|message| message.contains("number out of range")),
        "{:?}",
        refused.last_error_message
    );
    // Reads show the row with a marker instead of failing.
    assert_eq!(refused.payload["unreadable"], "job.payload_unreadable");
    let letters = list_dead_letters(&pool, &DeadLetterListFilter::new())
        .await
        .unwrap();
    assert_eq!(letters.len(), 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_failure_with_nul_characters_is_recorded_with_them_replaced(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    let failure = JobFailure::retryable("upstream\u{0}code", "message \u{0} with nul")
        .with_retry_not_before(DateTime::<Utc>::MIN_UTC);

    let disposition = complete_job_failure(&pool, &claimed.lease(), &failure)
        .await
        .unwrap();
    assert!(matches!(
        disposition,
        JobFailureDisposition::RetryScheduled { .. }
    ));
    let record = job(&pool, claimed.id).await;
    assert_eq!(record.status, JobStatus::Pending);
    assert_eq!(
        record.last_error_code.as_deref(),
        Some("upstream\u{FFFD}code")
    );
    assert_eq!(
        record.last_error_message.as_deref(),
        Some("message \u{FFFD} with nul")
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_log_line_with_nul_characters_does_not_cost_the_other_lines_of_its_batch(pool: PgPool) {
    let a = one_job(&pool).await;
    let b = insert_job(&pool, "test.job", json!({})).await;
    let lines = vec![
        JobLogLine::new(a, 1, JobLogLevel::Info, "before"),
        JobLogLine::new(b, 1, JobLogLevel::Warn, "nul \u{0} in the message"),
        JobLogLine::new(b, 1, JobLogLevel::Info, "fields")
            .with_fields(json!({ "key\u{0}": "value\u{0}", "deep": nested(300) })),
        JobLogLine::new(a, 1, JobLogLevel::Info, "after"),
    ];
    assert_eq!(append_job_logs(&pool, &lines).await.unwrap(), 4);

    let a_lines = list_job_logs(&pool, a, TenantScope::Admin, &JobLogListFilter::new())
        .await
        .unwrap();
    assert_eq!(
        a_lines
            .iter()
            .map(|l| l.message.as_str())
            .collect::<Vec<_>>(),
        ["before", "after"]
    );
    let b_lines = list_job_logs(&pool, b, TenantScope::Admin, &JobLogListFilter::new())
        .await
        .unwrap();
    assert_eq!(b_lines[0].message, "nul \u{FFFD} in the message");
    assert!(
        b_lines[1].fields["unstorable"]
            .as_str()
            .unwrap()
            .contains("deeper")
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn retry_delays_are_bounded_and_a_huge_stored_cap_still_lets_failures_persist(pool: PgPool) {
    let err = upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("slow.retry").retry_delays_ms(1_000, i64::MAX),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "job_definition.invalid_retry_delay");
    assert_eq!(err.category(), ErrorCategory::Validation);

    // A row written before the bound existed (or by hand) keeps working.
    one_job(&pool).await;
    sqlx::query(
        "UPDATE runledger.job_definitions SET retry_base_delay_ms = $1, retry_max_delay_ms = $1",
    )
    .bind(i64::MAX)
    .execute(&pool)
    .await
    .unwrap();
    let claimed = claim_one(&pool).await;
    let disposition = complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::retryable("test.retryable", "again"),
    )
    .await
    .unwrap();
    let JobFailureDisposition::RetryScheduled { next_run_at } = disposition else {
        panic!("expected a retry, got {disposition:?}");
    };
    assert!(next_run_at <= Utc::now() + chrono::Duration::days(366));
}

/// The code and category of an enqueue of `request`.
async fn refusal(pool: &PgPool, request: &JobEnqueue<'_>) -> (&'static str, ErrorCategory) {
    let err = enqueue_job(pool, request).await.unwrap_err();
    (err.code(), err.category())
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn client_input_postgres_would_refuse_gets_a_validation_code_naming_the_field(pool: PgPool) {
    define(&pool, "input", DefinitionOpts::default()).await;
    let fine = json!({});
    let nul_payload = json!({ "name": "a\u{0}b" });
    let validation = ErrorCategory::Validation;
    assert_eq!(
        refusal(&pool, &JobEnqueue::new("input", &nul_payload)).await,
        ("job.invalid_payload", validation)
    );
    assert_eq!(
        refusal(
            &pool,
            &JobEnqueue::new("input", &fine).idempotency_key("k\u{0}")
        )
        .await,
        ("job.invalid_idempotency_key", validation)
    );
    assert_eq!(
        refusal(&pool, &JobEnqueue::new("in\u{0}put", &fine)).await,
        ("job.invalid_job_type", validation)
    );
    assert_eq!(
        refusal(
            &pool,
            &JobEnqueue::new("input", &fine).run_at(DateTime::<Utc>::MIN_UTC)
        )
        .await,
        ("job.invalid_run_at", validation)
    );
    assert_eq!(
        refusal(
            &pool,
            &JobEnqueue::new("input", &fine).delay(std::time::Duration::MAX)
        )
        .await,
        ("job.invalid_delay", validation)
    );
    let oversize = json!({ "blob": "x".repeat(255 * 1024 * 1024 + 1) });
    assert_eq!(
        refusal(&pool, &JobEnqueue::new("input", &oversize)).await,
        ("job.invalid_payload", validation)
    );
    assert_eq!(crate::support::count_jobs(&pool).await, 0);

    // Whatever no field check catches is still a validation error, not a storage fault.
    let err = get_job_definition(&pool, "no\u{0}such").await.unwrap_err();
    assert_eq!(
        (err.code(), err.category()),
        ("validation.unstorable_value", validation)
    );
    let raw = sqlx::query("SELECT '\"\\u0000\"'::jsonb")
        .execute(&pool)
        .await
        .unwrap_err();
    let err = Error::from(raw);
    assert_eq!(
        (err.code(), err.category()),
        ("validation.unstorable_value", validation)
    );
}
