//! Completing attempts: success, lease fencing, retries with backoff, and dead-lettering.

use std::collections::HashSet;

use chrono::Utc;
use runledger_engine::core::jobs::{
    JobAttemptOutcome, JobEventType, JobFailure, JobFailureKind, JobId, JobStatus,
};
use runledger_engine::postgres::jobs::{
    DeadLetterListFilter, JobFailureDisposition, JobLease, JobSuccess, MAX_ERROR_MESSAGE_CHARS,
    TenantScope, complete_job_failure, complete_job_success, complete_jobs_success,
    list_dead_letters, list_job_attempts, list_job_events,
};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{
    DefinitionOpts, WORKER, claim, claim_one, count_rows, define, event_types, expire_lease,
    fail_retryable, insert_job, job, make_due, one_job,
};

/// The retry delay the last failure scheduled, in seconds: `next_run_at` minus the time of the
/// failing statement (`updated_at` is written with the same `now()`).
async fn scheduled_delay_secs(pool: &PgPool, job_id: JobId) -> f64 {
    sqlx::query_scalar(
        "SELECT extract(epoch FROM next_run_at - updated_at)::float8
         FROM runledger.job_queue WHERE id = $1",
    )
    .bind(job_id.0)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn retry_at(disposition: JobFailureDisposition) -> chrono::DateTime<Utc> {
    match disposition {
        JobFailureDisposition::RetryScheduled { next_run_at } => next_run_at,
        other => panic!("expected a retry, got {other:?}"),
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn success_stores_the_output_and_closes_the_attempt(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    let leased_at = job(&pool, claimed.id).await.leased_at.unwrap();
    let output = json!({"sent": true, "message_id": "m-1"});

    complete_job_success(&pool, &claimed.lease(), Some(&output))
        .await
        .unwrap();

    let record = job(&pool, claimed.id).await;
    assert_eq!(record.status, JobStatus::Succeeded);
    assert_eq!(record.output, Some(output));
    // The job keeps the worker that ran it; its lease is gone.
    assert_eq!(record.worker_id.as_deref(), Some(WORKER));
    assert_eq!(record.lease_expires_at, None);
    assert!(record.finished_at.is_some());
    let attempts = list_job_attempts(&pool, claimed.id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].attempt, 1);
    assert_eq!(attempts[0].worker_id, WORKER);
    assert_eq!(attempts[0].outcome, JobAttemptOutcome::Succeeded);
    assert_eq!(attempts[0].failure_kind, None);
    assert_eq!(attempts[0].leased_at, leased_at);
    assert!(attempts[0].finished_at >= leased_at);
    // The attempt is the job row itself: no attempt row was written.
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger.job_attempts")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
    // A succeeded job is not claimable again.
    assert!(claim(&pool, WORKER, 10).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn success_without_output_leaves_output_null(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;

    complete_job_success(&pool, &claimed.lease(), None)
        .await
        .unwrap();

    let record = job(&pool, claimed.id).await;
    assert_eq!(record.status, JobStatus::Succeeded);
    assert_eq!(record.output, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn reporting_success_twice_is_refused_the_second_time(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    complete_job_success(&pool, &claimed.lease(), Some(&json!({"n": 1})))
        .await
        .unwrap();

    let err = complete_job_success(&pool, &claimed.lease(), Some(&json!({"n": 2})))
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.lease_owner_mismatch");
    assert_eq!(job(&pool, claimed.id).await.output, Some(json!({"n": 1})));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn batch_success_completes_current_leases_and_skips_an_expired_one(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    for n in 0..5 {
        insert_job(&pool, "test.job", json!({"n": n})).await;
    }
    let claimed = claim(&pool, WORKER, 5).await;
    assert_eq!(claimed.len(), 5);
    let expired = claimed[2].id;
    expire_lease(&pool, expired).await;
    let successes: Vec<JobSuccess> = claimed
        .iter()
        .enumerate()
        .map(|(n, job)| JobSuccess {
            job_id: job.id,
            attempt: job.attempt,
            output: Some(json!({"done": n})),
            progress: None,
        })
        .collect();

    let completed = complete_jobs_success(&pool, WORKER, &successes)
        .await
        .unwrap();

    let completed: HashSet<JobId> = completed.into_iter().collect();
    let expected: HashSet<JobId> = claimed
        .iter()
        .map(|job| job.id)
        .filter(|id| *id != expired)
        .collect();
    assert_eq!(completed, expected);
    for (n, claimed_job) in claimed.iter().enumerate() {
        let record = job(&pool, claimed_job.id).await;
        if claimed_job.id == expired {
            assert_eq!(record.status, JobStatus::Leased);
            assert_eq!(record.output, None);
            assert_eq!(record.worker_id.as_deref(), Some(WORKER));
            assert!(
                list_job_attempts(&pool, expired, TenantScope::Admin)
                    .await
                    .unwrap()
                    .is_empty()
            );
        } else {
            assert_eq!(record.status, JobStatus::Succeeded);
            assert_eq!(record.output, Some(json!({"done": n})));
        }
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn batch_success_of_nothing_completes_nothing(pool: PgPool) {
    let completed = complete_jobs_success(&pool, WORKER, &[]).await.unwrap();

    assert!(completed.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn late_success_after_lease_expiry_is_refused_and_changes_nothing(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    expire_lease(&pool, claimed.id).await;
    let before = job(&pool, claimed.id).await;

    let err = complete_job_success(&pool, &claimed.lease(), Some(&json!({"late": true})))
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.lease_owner_mismatch");
    let after = job(&pool, claimed.id).await;
    assert_eq!(after.status, JobStatus::Leased);
    assert_eq!(after.output, None);
    assert_eq!(after.finished_at, None);
    assert_eq!(after, before, "the row is untouched");
    assert!(
        list_job_attempts(&pool, claimed.id, TenantScope::Admin)
            .await
            .unwrap()
            .is_empty(),
        "no attempt was closed"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn completion_by_another_worker_or_a_stale_attempt_is_refused(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    let other_worker = JobLease {
        job_id: claimed.id,
        attempt: claimed.attempt,
        worker_id: "worker-b",
    };
    let stale_attempt = JobLease {
        job_id: claimed.id,
        attempt: claimed.attempt - 1,
        worker_id: WORKER,
    };

    for lease in [other_worker, stale_attempt] {
        let err = complete_job_success(&pool, &lease, Some(&json!({})))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "job.lease_owner_mismatch");
        let err = complete_job_failure(&pool, &lease, &JobFailure::terminal("x", "y"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "job.lease_owner_mismatch");
    }

    let record = job(&pool, claimed.id).await;
    assert_eq!(record.status, JobStatus::Leased);
    assert_eq!(record.worker_id.as_deref(), Some(WORKER));
    assert_eq!(record.output, None);
    assert_eq!(record.last_error_code, None);
    assert_eq!(count_rows(&pool, "job_dead_letters", claimed.id).await, 0);
    // The real holder can still complete it.
    complete_job_success(&pool, &claimed.lease(), None)
        .await
        .unwrap();
    assert_eq!(job(&pool, claimed.id).await.status, JobStatus::Succeeded);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn late_failure_after_lease_expiry_is_refused_and_changes_nothing(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    expire_lease(&pool, claimed.id).await;
    let before = job(&pool, claimed.id).await;

    let err = complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::retryable("upstream.down", "late"),
    )
    .await
    .unwrap_err();

    assert_eq!(err.code(), "job.lease_owner_mismatch");
    assert_eq!(job(&pool, claimed.id).await, before);
    assert!(event_types(&pool, claimed.id).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn retryable_failure_puts_the_job_back_to_pending_with_a_recorded_attempt(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;

    let disposition = complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::retryable("upstream.down", "503 from upstream"),
    )
    .await
    .unwrap();

    let next_run_at = retry_at(disposition);
    let record = job(&pool, claimed.id).await;
    assert_eq!(record.status, JobStatus::Pending);
    assert_eq!(record.next_run_at, next_run_at);
    assert!(next_run_at > Utc::now(), "not due again at once");
    assert_eq!(record.worker_id, None);
    assert_eq!(record.lease_expires_at, None);
    assert_eq!(record.finished_at, None);
    assert_eq!(record.last_error_code.as_deref(), Some("upstream.down"));
    assert_eq!(
        record.last_error_message.as_deref(),
        Some("503 from upstream")
    );
    let attempts = list_job_attempts(&pool, claimed.id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts[0].outcome, JobAttemptOutcome::Failed);
    assert_eq!(attempts[0].failure_kind, Some(JobFailureKind::Retryable));
    assert_eq!(attempts[0].error_code.as_deref(), Some("upstream.down"));
    assert_eq!(
        attempts[0].error_message.as_deref(),
        Some("503 from upstream")
    );
    let events = list_job_events(&pool, claimed.id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, JobEventType::RetryScheduled);
    assert_eq!(events[0].attempt, Some(1));
    assert_eq!(events[0].worker_id.as_deref(), Some(WORKER));
    assert_eq!(events[0].details["failure_kind"], "RETRYABLE");
    assert_eq!(events[0].details["error_code"], "upstream.down");
    // Not claimable before its retry time.
    assert!(claim(&pool, WORKER, 10).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn retry_delays_grow_exponentially_with_jitter_and_stop_at_the_cap(pool: PgPool) {
    define(
        &pool,
        "test.job",
        DefinitionOpts {
            max_attempts: 10,
            retry_base_delay_ms: 1_000,
            retry_max_delay_ms: 4_000,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let job_id = insert_job(&pool, "test.job", json!({})).await;

    let mut delays = Vec::new();
    for attempt in 1..=6 {
        let claimed = claim_one(&pool).await;
        assert_eq!(claimed.id, job_id);
        assert_eq!(claimed.attempt_number, attempt);
        let next_run_at = retry_at(fail_retryable(&pool, &claimed).await);
        assert_eq!(job(&pool, job_id).await.next_run_at, next_run_at);

        let delay = scheduled_delay_secs(&pool, job_id).await;
        // Equal jitter: uniform in [d / 2, d] with d = min(cap, base * 2^(attempt - 1)), here
        // with base 1 s and cap 4 s.
        let full = 2f64.powi(attempt - 1).min(4.0);
        assert!(
            delay >= full / 2.0 - 0.001 && delay <= full + 0.001,
            "attempt {attempt}: delay {delay} s outside [{}, {full}]",
            full / 2.0
        );
        delays.push(delay);
        make_due(&pool, job_id).await;
    }

    // Attempts 1..3 double the window, so the delays never shrink...
    assert!(
        delays[0] <= delays[1] && delays[1] <= delays[2],
        "{delays:?}"
    );
    // ...and from attempt 3 on the window is capped at 4 s.
    assert!(delays[3..].iter().all(|d| *d <= 4.001), "{delays:?}");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_retry_not_before_hint_later_than_the_policy_wins(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    let hint = Utc::now() + chrono::Duration::hours(1);

    let next_run_at = retry_at(
        complete_job_failure(
            &pool,
            &claimed.lease(),
            &JobFailure::retryable("rate.limited", "429").with_retry_not_before(hint),
        )
        .await
        .unwrap(),
    );

    assert!((next_run_at - hint).num_microseconds().unwrap().abs() <= 1);
    let record = job(&pool, claimed.id).await;
    assert_eq!(record.next_run_at, next_run_at);
    assert_eq!(record.status, JobStatus::Pending);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_retry_not_before_hint_earlier_than_the_policy_does_not_shorten_it(pool: PgPool) {
    define(
        &pool,
        "test.job",
        DefinitionOpts {
            retry_base_delay_ms: 60_000,
            retry_max_delay_ms: 60_000,
            ..DefinitionOpts::default()
        },
    )
    .await;
    insert_job(&pool, "test.job", json!({})).await;
    let claimed = claim_one(&pool).await;
    let hint = Utc::now() + chrono::Duration::seconds(1);

    complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::retryable("rate.limited", "429").with_retry_not_before(hint),
    )
    .await
    .unwrap();

    let delay = scheduled_delay_secs(&pool, claimed.id).await;
    assert!(
        (29.999..=60.001).contains(&delay),
        "policy delay of 30..60 s kept, got {delay} s"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn terminal_failure_dead_letters_at_once_keeping_payload_and_error(pool: PgPool) {
    define(
        &pool,
        "emails.send",
        DefinitionOpts {
            max_attempts: 5,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let payload = json!({"to": "nobody@invalid"});
    let job_id = insert_job(&pool, "emails.send", payload.clone()).await;
    let claimed = claim_one(&pool).await;

    let disposition = complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::terminal("email.invalid_address", "no such mailbox"),
    )
    .await
    .unwrap();

    assert_eq!(disposition, JobFailureDisposition::DeadLettered);
    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::DeadLettered);
    assert!(record.finished_at.is_some());
    assert_eq!(record.worker_id, None);
    assert_eq!(
        record.last_error_code.as_deref(),
        Some("email.invalid_address")
    );
    let dead = list_dead_letters(&pool, &DeadLetterListFilter::new().job_id(job_id))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, payload);
    assert_eq!(dead[0].job_type, "emails.send");
    assert_eq!(dead[0].attempt, 1);
    assert_eq!(dead[0].failure_kind, JobFailureKind::Terminal);
    assert_eq!(dead[0].error_code.as_deref(), Some("email.invalid_address"));
    assert_eq!(dead[0].error_message.as_deref(), Some("no such mailbox"));
    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts[0].failure_kind, Some(JobFailureKind::Terminal));
    assert_eq!(
        event_types(&pool, job_id).await,
        vec![JobEventType::DeadLettered]
    );
    assert!(claim(&pool, WORKER, 10).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_panicked_attempt_is_dead_lettered_at_once(pool: PgPool) {
    let job_id = one_job(&pool).await;
    let claimed = claim_one(&pool).await;

    let disposition = complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::new(
            JobFailureKind::Panicked,
            "handler.panicked",
            "index out of bounds",
        ),
    )
    .await
    .unwrap();

    assert_eq!(disposition, JobFailureDisposition::DeadLettered);
    assert_eq!(job(&pool, job_id).await.status, JobStatus::DeadLettered);
    let dead = list_dead_letters(&pool, &DeadLetterListFilter::new().job_id(job_id))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].failure_kind, JobFailureKind::Panicked);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_timed_out_attempt_is_retried(pool: PgPool) {
    let job_id = one_job(&pool).await;
    let claimed = claim_one(&pool).await;

    let disposition = complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::new(JobFailureKind::Timeout, "job.timeout", "ran past 300 s"),
    )
    .await
    .unwrap();

    retry_at(disposition);
    assert_eq!(job(&pool, job_id).await.status, JobStatus::Pending);
    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts[0].failure_kind, Some(JobFailureKind::Timeout));
    assert_eq!(count_rows(&pool, "job_dead_letters", job_id).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn retryable_failures_dead_letter_the_job_after_max_attempts(pool: PgPool) {
    define(
        &pool,
        "test.job",
        DefinitionOpts {
            max_attempts: 3,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let payload = json!({"url": "https://example.com"});
    let job_id = insert_job(&pool, "test.job", payload.clone()).await;

    let mut dispositions = Vec::new();
    for _ in 0..3 {
        let claimed = claim_one(&pool).await;
        dispositions.push(fail_retryable(&pool, &claimed).await);
        make_due(&pool, job_id).await;
    }

    assert!(matches!(
        dispositions[0],
        JobFailureDisposition::RetryScheduled { .. }
    ));
    assert!(matches!(
        dispositions[1],
        JobFailureDisposition::RetryScheduled { .. }
    ));
    assert_eq!(dispositions[2], JobFailureDisposition::DeadLettered);
    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::DeadLettered);
    assert_eq!(record.attempts_used, 3);
    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 3);
    assert!(
        attempts
            .iter()
            .all(|a| a.outcome == JobAttemptOutcome::Failed
                && a.failure_kind == Some(JobFailureKind::Retryable))
    );
    assert_eq!(
        event_types(&pool, job_id).await,
        vec![
            JobEventType::RetryScheduled,
            JobEventType::RetryScheduled,
            JobEventType::DeadLettered
        ]
    );
    let dead = list_dead_letters(&pool, &DeadLetterListFilter::new().job_id(job_id))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, payload);
    assert_eq!(dead[0].attempt, 3);
    assert_eq!(dead[0].failure_kind, JobFailureKind::Retryable);
    // make_due does not revive a dead-lettered job.
    assert!(claim(&pool, WORKER, 10).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_failure_message_longer_than_4000_characters_is_truncated(pool: PgPool) {
    let job_id = one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    // Multi-byte characters: the limit counts characters, not bytes.
    let message = "ab€".repeat(2_000);
    let expected: String = message.chars().take(MAX_ERROR_MESSAGE_CHARS).collect();
    assert_eq!(MAX_ERROR_MESSAGE_CHARS, 4_000);

    complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::terminal("huge.error", message.as_str()),
    )
    .await
    .unwrap();

    let record = job(&pool, job_id).await;
    assert_eq!(
        record.last_error_message.as_deref(),
        Some(expected.as_str())
    );
    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(
        attempts[0].error_message.as_deref(),
        Some(expected.as_str())
    );
    let dead = list_dead_letters(&pool, &DeadLetterListFilter::new().job_id(job_id))
        .await
        .unwrap();
    assert_eq!(dead[0].error_message.as_deref(), Some(expected.as_str()));
    assert_eq!(expected.chars().count(), 4_000);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_success_batch_planned_on_an_empty_table_reads_only_its_own_rows(pool: PgPool) {
    use sqlx::Connection;

    const BACKLOG: usize = 5_000;
    const BATCH: i64 = 50;
    define(&pool, "test.job", DefinitionOpts::default()).await;
    // Statistics of the empty table, as autovacuum leaves them on a quiet queue. A connection
    // keeps the plan it made for its first batch: this one made it from them.
    sqlx::query("ANALYZE runledger.job_queue")
        .execute(&pool)
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let nothing = JobSuccess {
        job_id: JobId(uuid::Uuid::now_v7()),
        attempt: 1,
        output: None,
        progress: None,
    };
    let done = complete_jobs_success(&mut *conn, WORKER, &[nothing])
        .await
        .unwrap();
    assert!(done.is_empty());

    crate::support::enqueue_many(&pool, "test.job", BACKLOG).await;
    let claimed = claim(&pool, WORKER, BATCH).await;
    let mut tx = conn.begin().await.unwrap();
    let before = crate::support::rows_read(&mut tx, "job_queue").await;
    let done = complete_jobs_success(&mut *tx, WORKER, &crate::support::successes_of(&claimed))
        .await
        .unwrap();
    let fetched = crate::support::rows_read(&mut tx, "job_queue").await - before;
    tx.commit().await.unwrap();
    assert_eq!(done.len(), BATCH as usize);
    // The batch's own rows, not the backlog's.
    assert!(
        fetched <= 2 * BATCH,
        "a batch of {BATCH} fetched {fetched} job rows"
    );
}
