//! Claiming jobs and the lease protocol around a running attempt: heartbeats, the running mark
//! and progress.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use runledger_engine::core::jobs::{
    JobAttemptOutcome, JobContinuation, JobFailure, JobId, JobProgressUpdate, JobStatus,
};
use runledger_engine::postgres::ErrorCategory;
use runledger_engine::postgres::jobs::{
    ClaimRequest, JobContinued, JobEnqueue, JobLease, TenantScope, claim_jobs,
    complete_job_success, complete_jobs_success, continue_jobs, enqueue_job, enqueue_jobs,
    heartbeat_job, heartbeat_jobs, list_job_attempts, mark_job_running, mark_jobs_running,
    set_job_definition_enabled, update_job_progress,
};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    DefinitionOpts, LONG_LEASE, WORKER, claim, claim_one, count_status, define, expire_lease,
    insert_job, job, one_job, successes_of,
};

/// Seconds until the job's lease expires, by the database clock.
async fn lease_seconds_left(pool: &PgPool, job_id: JobId) -> f64 {
    sqlx::query_scalar(
        "SELECT extract(epoch FROM lease_expires_at - now())::float8
         FROM runledger.job_queue WHERE id = $1",
    )
    .bind(job_id.0)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn four_concurrent_workers_claim_2000_jobs_each_exactly_once(pool: PgPool) {
    define(&pool, "bulk.job", DefinitionOpts::default()).await;
    let payloads: Vec<Value> = (0..2000).map(|n| json!({"n": n})).collect();
    let requests: Vec<JobEnqueue<'_>> = payloads
        .iter()
        .map(|payload| JobEnqueue::new("bulk.job", payload))
        .collect();
    let enqueued: HashSet<JobId> = enqueue_jobs(&pool, &requests)
        .await
        .unwrap()
        .into_iter()
        .map(|job| job.id)
        .collect();
    assert_eq!(enqueued.len(), 2000);

    let workers: Vec<_> = (0..4)
        .map(|n| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let worker = format!("worker-{n}");
                let mut claimed = Vec::new();
                loop {
                    let batch = claim_jobs(&pool, &ClaimRequest::new(&worker, 25, LONG_LEASE))
                        .await
                        .unwrap();
                    if batch.is_empty() {
                        break;
                    }
                    assert!(batch.len() <= 25);
                    // Finish the batch, as a worker would, so each attempt gets its row.
                    let successes = successes_of(&batch);
                    let completed = complete_jobs_success(&pool, &worker, &successes)
                        .await
                        .unwrap();
                    assert_eq!(completed.len(), batch.len());
                    claimed.extend(batch.into_iter().map(|job| (job.id, job.worker_id)));
                }
                claimed
            })
        })
        .collect();
    let mut claimed: Vec<(JobId, String)> = Vec::new();
    for worker in workers {
        claimed.extend(worker.await.unwrap());
    }

    assert_eq!(claimed.len(), 2000, "every job claimed, none twice");
    let distinct: HashSet<JobId> = claimed.iter().map(|(id, _)| *id).collect();
    assert_eq!(distinct.len(), 2000, "no job claimed twice");
    assert_eq!(distinct, enqueued);

    // The rows agree: every job ran exactly one attempt, held by the worker that claimed it.
    let attempts: HashMap<Uuid, (String, i32, String)> =
        sqlx::query_as::<_, (Uuid, String, i32, String)>(
            "SELECT job_id, worker_id, attempt, outcome FROM runledger.job_attempt_history",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, worker, attempt, outcome)| (id, (worker, attempt, outcome)))
        .collect();
    let attempt_rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runledger.job_attempt_history")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(attempt_rows, 2000, "exactly one attempt row per job");
    for (id, worker) in &claimed {
        let (holder, attempt, outcome) = &attempts[&id.0];
        assert_eq!(holder, worker);
        assert_eq!(*attempt, 1);
        assert_eq!(outcome, "SUCCEEDED");
    }
    assert_eq!(count_status(&pool, "SUCCEEDED").await, 2000);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn claim_takes_higher_priority_first_then_the_earliest_run_time(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let payload = json!({});
    let now = Utc::now();
    let enqueue_at = async |priority: i32, minutes_ago: i64| {
        enqueue_job(
            &pool,
            &JobEnqueue::new("test.job", &payload)
                .priority(priority)
                .run_at(now - chrono::Duration::minutes(minutes_ago)),
        )
        .await
        .unwrap()
        .id
    };
    let low_oldest = enqueue_at(-1, 20).await;
    let normal = enqueue_at(0, 10).await;
    let high_recent = enqueue_at(5, 1).await;
    let high_older = enqueue_at(5, 5).await;
    let expected = vec![high_older, high_recent, normal, low_oldest];

    // One at a time, as a worker with a single free slot would.
    let mut one_by_one = Vec::new();
    for _ in 0..4 {
        one_by_one.push(claim_one(&pool).await.id);
    }
    assert_eq!(one_by_one, expected);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_batch_claim_returns_jobs_in_claim_order(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let payload = json!({});
    let now = Utc::now();
    let mut ids = Vec::new();
    for (priority, minutes_ago) in [(0, 10), (9, 1), (9, 3), (-5, 30)] {
        let enqueued = enqueue_job(
            &pool,
            &JobEnqueue::new("test.job", &payload)
                .priority(priority)
                .run_at(now - chrono::Duration::minutes(minutes_ago)),
        )
        .await
        .unwrap();
        ids.push(enqueued.id);
    }

    let claimed: Vec<JobId> = claim(&pool, WORKER, 10)
        .await
        .into_iter()
        .map(|job| job.id)
        .collect();

    assert_eq!(claimed, vec![ids[2], ids[1], ids[0], ids[3]]);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn claim_with_job_types_only_takes_jobs_of_those_types(pool: PgPool) {
    for job_type in ["a.one", "b.two", "c.three"] {
        define(&pool, job_type, DefinitionOpts::default()).await;
        insert_job(&pool, job_type, json!({})).await;
        insert_job(&pool, job_type, json!({})).await;
    }
    let wanted = vec!["a.one".to_owned(), "c.three".to_owned()];

    let claimed = claim_jobs(
        &pool,
        &ClaimRequest::new(WORKER, 10, LONG_LEASE).job_types(&wanted),
    )
    .await
    .unwrap();

    assert_eq!(claimed.len(), 4);
    assert!(claimed.iter().all(|job| wanted.contains(&job.job_type)));
    let left: Vec<String> = sqlx::query_scalar(
        "SELECT job_type FROM runledger.job_queue WHERE status = 'PENDING' ORDER BY job_type",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(left, vec!["b.two".to_owned(), "b.two".to_owned()]);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn claim_with_an_empty_type_list_claims_nothing(pool: PgPool) {
    one_job(&pool).await;
    let none: Vec<String> = Vec::new();

    let claimed = claim_jobs(
        &pool,
        &ClaimRequest::new(WORKER, 10, LONG_LEASE).job_types(&none),
    )
    .await
    .unwrap();

    assert!(claimed.is_empty());
    assert_eq!(count_status(&pool, "PENDING").await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn claim_never_takes_more_than_the_limit(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    for n in 0..10 {
        insert_job(&pool, "test.job", json!({"n": n})).await;
    }

    assert_eq!(claim(&pool, WORKER, 3).await.len(), 3);
    assert_eq!(count_status(&pool, "LEASED").await, 3);
    assert_eq!(count_status(&pool, "PENDING").await, 7);

    assert_eq!(claim(&pool, "worker-b", 100).await.len(), 7);
    assert_eq!(count_status(&pool, "PENDING").await, 0);
    assert!(claim(&pool, "worker-c", 100).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn claim_with_limit_zero_or_below_claims_nothing(pool: PgPool) {
    one_job(&pool).await;

    assert!(claim(&pool, WORKER, 0).await.is_empty());
    assert!(claim(&pool, WORKER, -5).await.is_empty());

    assert_eq!(count_status(&pool, "PENDING").await, 1);
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger.job_attempts")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(attempts, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn claim_with_a_blank_or_oversized_worker_id_is_a_validation_error(pool: PgPool) {
    one_job(&pool).await;
    let oversized = "w".repeat(256);

    for worker in ["", "   ", oversized.as_str()] {
        let err = claim_jobs(&pool, &ClaimRequest::new(worker, 10, LONG_LEASE))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "job.invalid_worker_id");
        assert_eq!(err.category(), ErrorCategory::Validation);
    }
    assert_eq!(count_status(&pool, "PENDING").await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn claim_starts_attempt_one_whose_row_is_written_when_it_ends(pool: PgPool) {
    let job_id = one_job(&pool).await;

    let claimed = claim_one(&pool).await;

    assert_eq!(claimed.id, job_id);
    assert_eq!(claimed.attempt, 1);
    assert_eq!(claimed.attempt_number, 1);
    // The attempt in progress lives on the job row.
    let record = job(&pool, job_id).await;
    assert_eq!(record.attempt, 1);
    assert!(record.leased_at.is_some());
    assert_eq!(record.started_at, None);
    assert!(
        list_job_attempts(&pool, job_id, TenantScope::Admin)
            .await
            .unwrap()
            .is_empty()
    );

    complete_job_success(&pool, &claimed.lease(), None)
        .await
        .unwrap();

    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1);
    let attempt = &attempts[0];
    assert_eq!(attempt.attempt, 1);
    assert_eq!(attempt.worker_id, WORKER);
    assert_eq!(attempt.outcome, JobAttemptOutcome::Succeeded);
    assert_eq!(attempt.failure_kind, None);
    assert_eq!(Some(attempt.leased_at), record.leased_at);
    // Never marked running: its completion records the lease time as its start.
    assert_eq!(attempt.started_at, Some(attempt.leased_at));
    assert!(attempt.finished_at >= attempt.leased_at);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_claimed_job_is_leased_to_the_worker_until_its_lease_expires(pool: PgPool) {
    define(
        &pool,
        "test.job",
        DefinitionOpts {
            max_attempts: 4,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let organization = Uuid::now_v7();
    let payload = json!({"n": 1});
    let job_id = enqueue_job(
        &pool,
        &JobEnqueue::new("test.job", &payload)
            .organization_id(organization)
            .timeout_seconds(17),
    )
    .await
    .unwrap()
    .id;

    let claimed = claim_jobs(
        &pool,
        &ClaimRequest::new(WORKER, 1, Duration::from_secs(120)),
    )
    .await
    .unwrap()
    .remove(0);

    assert_eq!(claimed.job_type, "test.job");
    assert_eq!(claimed.payload, payload);
    assert_eq!(claimed.organization_id, Some(organization));
    assert_eq!(claimed.max_attempts, 4);
    assert_eq!(claimed.timeout_seconds, 17);
    assert_eq!(claimed.worker_id, WORKER);
    assert_eq!(claimed.workflow_run_id, None);
    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::Leased);
    assert_eq!(record.worker_id.as_deref(), Some(WORKER));
    assert_eq!(record.lease_expires_at, Some(claimed.lease_expires_at));
    assert_eq!(record.attempt, 1);
    assert_eq!(record.attempts_used, 1);
    let left = lease_seconds_left(&pool, job_id).await;
    assert!(
        (110.0..=120.0).contains(&left),
        "lease is the requested 120 s, {left} s left"
    );
    // A leased job is not claimable by anyone else.
    assert!(claim(&pool, "worker-b", 10).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn heartbeat_renews_only_the_calling_workers_current_leases(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    for n in 0..3 {
        insert_job(&pool, "test.job", json!({"n": n})).await;
    }
    let short = Duration::from_secs(30);
    let mine = claim_jobs(&pool, &ClaimRequest::new(WORKER, 2, short))
        .await
        .unwrap();
    let theirs = claim_jobs(&pool, &ClaimRequest::new("worker-b", 1, short))
        .await
        .unwrap()
        .remove(0);
    let (current, stale) = (&mine[0], &mine[1]);

    let renewed = heartbeat_jobs(
        &pool,
        WORKER,
        &[
            (current.id, current.attempt),
            // A lease this worker holds, presented with an attempt that is not current.
            (stale.id, stale.attempt + 1),
            // Another worker's lease.
            (theirs.id, theirs.attempt),
        ],
        Duration::from_secs(600),
    )
    .await
    .unwrap();

    assert_eq!(renewed, vec![current.id]);
    let left = lease_seconds_left(&pool, current.id).await;
    assert!(left > 500.0, "renewed lease runs 600 s, {left} s left");
    assert_eq!(
        job(&pool, stale.id).await.lease_expires_at,
        Some(stale.lease_expires_at)
    );
    assert_eq!(
        job(&pool, theirs.id).await.lease_expires_at,
        Some(theirs.lease_expires_at)
    );
    assert_eq!(
        job(&pool, theirs.id).await.worker_id.as_deref(),
        Some("worker-b")
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn heartbeat_on_an_expired_lease_is_refused_and_does_not_revive_it(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    expire_lease(&pool, claimed.id).await;

    let err = heartbeat_job(&pool, &claimed.lease(), LONG_LEASE)
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.lease_owner_mismatch");
    assert_eq!(err.category(), ErrorCategory::Conflict);
    assert!(lease_seconds_left(&pool, claimed.id).await < 0.0);
    let renewed = heartbeat_jobs(&pool, WORKER, &[(claimed.id, claimed.attempt)], LONG_LEASE)
        .await
        .unwrap();
    assert!(renewed.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn mark_job_running_records_when_the_handler_started_once(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;

    mark_job_running(&pool, &claimed.lease()).await.unwrap();
    let started = job(&pool, claimed.id).await.started_at;
    assert!(started.is_some());

    // Marking again keeps the first start time.
    mark_job_running(&pool, &claimed.lease()).await.unwrap();
    assert_eq!(job(&pool, claimed.id).await.started_at, started);

    // The finished attempt's row keeps it.
    complete_job_success(&pool, &claimed.lease(), None)
        .await
        .unwrap();
    assert_eq!(
        list_job_attempts(&pool, claimed.id, TenantScope::Admin)
            .await
            .unwrap()[0]
            .started_at,
        started
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn mark_job_running_by_another_worker_is_refused(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    let foreign = JobLease {
        job_id: claimed.id,
        attempt: claimed.attempt,
        worker_id: "worker-b",
    };

    let err = mark_job_running(&pool, &foreign).await.unwrap_err();

    assert_eq!(err.code(), "job.lease_owner_mismatch");
    assert_eq!(job(&pool, claimed.id).await.started_at, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn update_job_progress_stores_the_latest_progress_as_json(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;

    update_job_progress(
        &pool,
        &claimed.lease(),
        &JobProgressUpdate::new()
            .stage("crawling")
            .completed(3)
            .total(10),
    )
    .await
    .unwrap();
    assert_eq!(
        job(&pool, claimed.id).await.progress,
        Some(json!({"stage": "crawling", "completed": 3, "total": 10}))
    );

    // The next update replaces the previous one.
    update_job_progress(
        &pool,
        &claimed.lease(),
        &JobProgressUpdate::new().message("almost there"),
    )
    .await
    .unwrap();
    assert_eq!(
        job(&pool, claimed.id).await.progress,
        Some(json!({"message": "almost there"}))
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn progress_from_a_lost_lease_is_refused_and_not_stored(pool: PgPool) {
    one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    expire_lease(&pool, claimed.id).await;

    let err = update_job_progress(
        &pool,
        &claimed.lease(),
        &JobProgressUpdate::new().stage("late"),
    )
    .await
    .unwrap_err();

    assert_eq!(err.code(), "job.lease_owner_mismatch");
    assert_eq!(job(&pool, claimed.id).await.progress, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn jobs_already_queued_still_run_and_retry_after_their_type_is_disabled(pool: PgPool) {
    let job_id = one_job(&pool).await;
    set_job_definition_enabled(&pool, "test.job", false)
        .await
        .unwrap();

    let claimed = claim_one(&pool).await;
    assert_eq!(claimed.id, job_id);
    let disposition = runledger_engine::postgres::jobs::complete_job_failure(
        &pool,
        &claimed.lease(),
        &JobFailure::retryable("upstream.down", "try later"),
    )
    .await
    .unwrap();

    assert!(matches!(
        disposition,
        runledger_engine::postgres::jobs::JobFailureDisposition::RetryScheduled { .. }
    ));
    assert_eq!(job(&pool, job_id).await.status, JobStatus::Pending);
}

/// `synchronous_commit` as the connection sees it now.
async fn synchronous_commit(conn: &mut sqlx::PgConnection) -> String {
    sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(conn)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_unflushed_claim_relaxes_only_its_own_transaction_and_a_default_claim_nothing(
    pool: PgPool,
) {
    one_job(&pool).await;
    one_job(&pool).await;
    let mut tx = pool.begin().await.unwrap();

    let plain = claim_jobs(&mut *tx, &ClaimRequest::new(WORKER, 1, LONG_LEASE))
        .await
        .unwrap();
    assert_eq!(plain.len(), 1);
    assert_eq!(synchronous_commit(&mut tx).await, "on");

    let unflushed = claim_jobs(
        &mut *tx,
        &ClaimRequest::new(WORKER, 1, LONG_LEASE).unflushed_commit(),
    )
    .await
    .unwrap();
    assert_eq!(unflushed.len(), 1);
    assert_eq!(synchronous_commit(&mut tx).await, "off");
    tx.commit().await.unwrap();

    // The setting ends with the transaction; the leases it committed hold.
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(synchronous_commit(&mut conn).await, "on");
    assert_eq!(count_status(&pool, "LEASED").await, 2);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_claim_on_a_pool_claims_in_order_and_leaves_no_setting_behind(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    for n in 0..5 {
        insert_job(&pool, "test.job", json!({"n": n})).await;
    }

    let claimed = claim_jobs(
        &pool,
        &ClaimRequest::new(WORKER, 3, LONG_LEASE).unflushed_commit(),
    )
    .await
    .unwrap();

    let order: Vec<i64> = claimed
        .iter()
        .map(|job| job.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(order, vec![0, 1, 2]);
    assert_eq!(count_status(&pool, "LEASED").await, 3);
    // Its planner settings ended with the claim, and its relaxed commit with its transaction.
    let mut conn = pool.acquire().await.unwrap();
    let settings: (String, String, String) = sqlx::query_as(
        "SELECT current_setting('enable_sort'), current_setting('jit'),
                current_setting('synchronous_commit')",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(settings.0, "on");
    assert_eq!(settings.1, "on");
    assert_eq!(settings.2, "on");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn fenced_batch_writes_read_only_their_own_rows_whatever_the_statistics_say(pool: PgPool) {
    define(&pool, "bulk.job", DefinitionOpts::default()).await;
    crate::support::enqueue_many(&pool, "bulk.job", 2_000).await;
    // Statistics taken while every job was pending: no row has a worker id, so a planner free
    // to choose takes the lease filter to match one row and reads the whole table for it.
    sqlx::query("ANALYZE runledger.job_queue")
        .execute(&pool)
        .await
        .unwrap();
    let claimed = claim(&pool, WORKER, 200).await;
    let leases: Vec<(JobId, i32)> = claimed.iter().map(|job| (job.id, job.attempt)).collect();
    let (to_continue, to_complete) = claimed.split_at(100);
    let continuations: Vec<JobContinued> = to_continue
        .iter()
        .map(|job| JobContinued::new(job.id, job.attempt, JobContinuation::now()))
        .collect();
    let successes = successes_of(to_complete);

    // A new connection: its first executions of each statement are the ones planned for their
    // parameters.
    let mut tx = pool.begin().await.unwrap();
    let marked = mark_jobs_running(&mut *tx, WORKER, &leases).await.unwrap();
    let renewed = heartbeat_jobs(&mut *tx, WORKER, &leases, LONG_LEASE)
        .await
        .unwrap();
    let continued = continue_jobs(&mut *tx, WORKER, &continuations)
        .await
        .unwrap();
    let completed = complete_jobs_success(&mut *tx, WORKER, &successes)
        .await
        .unwrap();
    let table_scans: i64 = sqlx::query_scalar(
        "SELECT seq_scan FROM pg_stat_xact_user_tables
         WHERE schemaname = 'runledger' AND relname = 'job_queue'",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(
        (
            marked.len(),
            renewed.len(),
            continued.len(),
            completed.len()
        ),
        (200, 200, 100, 100)
    );
    assert_eq!(
        table_scans, 0,
        "a fenced batch write read the whole job table"
    );
    assert_eq!(count_status(&pool, "SUCCEEDED").await, 100);
    assert_eq!(count_status(&pool, "PENDING").await, 1_900);
}
