//! Operator transitions (cancel, requeue) and the lease reaper.

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use runledger_engine::core::jobs::{
    JobAttemptOutcome, JobEventType, JobFailureKind, JobId, JobStatus, WorkflowRunId,
    WorkflowStepId,
};
use runledger_engine::postgres::ErrorCategory;
use runledger_engine::postgres::jobs::{
    DeadLetterListFilter, JOB_QUEUE_CHANNEL, JobFailureDisposition, TenantScope, cancel_job,
    complete_job_success, heartbeat_job, list_dead_letters, list_job_attempts, list_job_events,
    mark_job_running, reap_expired_leases, requeue_job,
};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::support::{
    DefinitionOpts, LONG_LEASE, WORKER, attach_to_workflow, claim, claim_one, count_rows,
    dead_letter, define, event_types, expire_lease, fail_retryable, insert_job, job, make_due,
    one_job,
};

/// The delay the reaper scheduled, in seconds (`updated_at` is the reaping statement's `now()`).
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

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn cancel_of_a_pending_job_cancels_it_and_records_an_event(pool: PgPool) {
    let job_id = one_job(&pool).await;

    cancel_job(&pool, job_id, TenantScope::Admin).await.unwrap();

    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::Canceled);
    assert!(record.finished_at.is_some());
    let events = list_job_events(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, JobEventType::Canceled);
    assert_eq!(events[0].details["previous_status"], "PENDING");
    assert_eq!(
        count_rows(&pool, "job_attempts", job_id).await,
        0,
        "no attempt ran"
    );
    assert!(claim(&pool, WORKER, 10).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn cancel_of_a_leased_job_closes_the_attempt_and_fences_out_the_worker(pool: PgPool) {
    let job_id = one_job(&pool).await;
    let claimed = claim_one(&pool).await;

    cancel_job(&pool, job_id, TenantScope::Admin).await.unwrap();

    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::Canceled);
    assert_eq!(record.worker_id, None);
    assert_eq!(record.lease_expires_at, None);
    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].attempt, 1);
    assert_eq!(attempts[0].worker_id, WORKER);
    assert_eq!(attempts[0].outcome, JobAttemptOutcome::Canceled);
    assert_eq!(attempts[0].failure_kind, None);
    let events = list_job_events(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(events[0].event_type, JobEventType::Canceled);
    assert_eq!(events[0].details["previous_status"], "LEASED");

    // The worker, still running the handler, reports back and is refused.
    let err = heartbeat_job(&pool, &claimed.lease(), LONG_LEASE)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.lease_owner_mismatch");
    let err = complete_job_success(&pool, &claimed.lease(), Some(&json!({"late": true})))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.lease_owner_mismatch");
    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::Canceled);
    assert_eq!(record.output, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn cancel_of_a_finished_job_is_an_invalid_state(pool: PgPool) {
    let job_id = one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    complete_job_success(&pool, &claimed.lease(), None)
        .await
        .unwrap();

    let err = cancel_job(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.cancel_invalid_state");
    assert_eq!(err.category(), ErrorCategory::Conflict);
    assert_eq!(job(&pool, job_id).await.status, JobStatus::Succeeded);
    assert!(event_types(&pool, job_id).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn cancel_of_an_already_canceled_job_is_an_invalid_state(pool: PgPool) {
    let job_id = one_job(&pool).await;
    cancel_job(&pool, job_id, TenantScope::Admin).await.unwrap();

    let err = cancel_job(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.cancel_invalid_state");
    assert_eq!(
        event_types(&pool, job_id).await,
        vec![JobEventType::Canceled]
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn cancel_or_requeue_of_an_unknown_job_is_not_found(pool: PgPool) {
    let unknown = JobId::new_v7();

    let err = cancel_job(&pool, unknown, TenantScope::Admin)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.not_found");
    assert_eq!(err.category(), ErrorCategory::NotFound);

    let err = requeue_job(&pool, unknown, TenantScope::Admin)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.not_found");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn requeue_of_a_dead_lettered_job_gives_it_a_fresh_allowance_of_attempts(pool: PgPool) {
    define(
        &pool,
        "test.job",
        DefinitionOpts {
            max_attempts: 2,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let job_id = insert_job(&pool, "test.job", json!({"n": 1})).await;
    for _ in 0..2 {
        let claimed = claim_one(&pool).await;
        fail_retryable(&pool, &claimed).await;
        make_due(&pool, job_id).await;
    }
    assert_eq!(job(&pool, job_id).await.status, JobStatus::DeadLettered);

    requeue_job(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();

    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::Pending);
    assert_eq!(record.attempts_used, 0);
    assert_eq!(record.attempt, 2, "the lifetime attempt counter is kept");
    assert_eq!(record.finished_at, None);
    assert!(record.next_run_at <= Utc::now(), "due at once");
    let events = list_job_events(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    let requeued = events.last().unwrap();
    assert_eq!(requeued.event_type, JobEventType::Requeued);
    assert_eq!(requeued.details["previous_status"], "DEAD_LETTERED");
    // History is kept.
    assert_eq!(count_rows(&pool, "job_dead_letters", job_id).await, 1);
    assert_eq!(count_rows(&pool, "job_attempts", job_id).await, 2);

    let claimed = claim_one(&pool).await;
    assert_eq!(claimed.id, job_id);
    assert_eq!(claimed.attempt_number, 1);
    assert_eq!(claimed.attempt, 3);
    assert_eq!(claimed.max_attempts, 2);
    // A retryable failure is retried again instead of dead-lettering at once.
    assert!(matches!(
        fail_retryable(&pool, &claimed).await,
        JobFailureDisposition::RetryScheduled { .. }
    ));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn requeue_of_a_canceled_job_makes_it_claimable_again(pool: PgPool) {
    let job_id = one_job(&pool).await;
    cancel_job(&pool, job_id, TenantScope::Admin).await.unwrap();

    requeue_job(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();

    assert_eq!(job(&pool, job_id).await.status, JobStatus::Pending);
    let events = list_job_events(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(
        events.iter().map(|e| e.event_type).collect::<Vec<_>>(),
        vec![JobEventType::Canceled, JobEventType::Requeued]
    );
    assert_eq!(events[1].details["previous_status"], "CANCELED");
    let claimed = claim_one(&pool).await;
    assert_eq!(claimed.id, job_id);
    assert_eq!(claimed.attempt_number, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn requeue_wakes_workers_on_the_job_queue_channel(pool: PgPool) {
    let job_id = one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    dead_letter(&pool, &claimed).await;
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen(JOB_QUEUE_CHANNEL).await.unwrap();

    requeue_job(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();

    let notification = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("no notification within 5 seconds")
        .unwrap();
    assert_eq!(notification.payload(), "test.job");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn requeue_of_a_job_that_is_not_dead_lettered_or_canceled_is_an_invalid_state(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    let pending = insert_job(&pool, "test.job", json!({"n": 1})).await;

    let err = requeue_job(&pool, pending, TenantScope::Admin)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.requeue_invalid_state");
    assert_eq!(err.category(), ErrorCategory::Conflict);
    assert_eq!(job(&pool, pending).await.status, JobStatus::Pending);

    let claimed = claim_one(&pool).await;
    let err = requeue_job(&pool, claimed.id, TenantScope::Admin)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.requeue_invalid_state");
    assert_eq!(job(&pool, claimed.id).await.status, JobStatus::Leased);

    complete_job_success(&pool, &claimed.lease(), None)
        .await
        .unwrap();
    let err = requeue_job(&pool, claimed.id, TenantScope::Admin)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.requeue_invalid_state");
    assert_eq!(job(&pool, claimed.id).await.status, JobStatus::Succeeded);
    assert!(event_types(&pool, pending).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn requeue_of_a_workflow_step_job_is_refused(pool: PgPool) {
    let job_id = one_job(&pool).await;
    let (run_id, step_id) = attach_to_workflow(&pool, job_id).await;
    let claimed = claim_one(&pool).await;
    assert_eq!(claimed.workflow_run_id, Some(WorkflowRunId(run_id)));
    assert_eq!(claimed.workflow_step_id, Some(WorkflowStepId(step_id)));
    dead_letter(&pool, &claimed).await;

    let err = requeue_job(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.workflow_requeue_not_supported");
    assert_eq!(job(&pool, job_id).await.status, JobStatus::DeadLettered);
    assert_eq!(
        event_types(&pool, job_id).await,
        vec![JobEventType::DeadLettered]
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn cancel_of_a_workflow_step_job_is_refused(pool: PgPool) {
    let job_id = one_job(&pool).await;
    attach_to_workflow(&pool, job_id).await;

    let err = cancel_job(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap_err();

    assert_eq!(err.code(), "job.workflow_cancel_not_supported");
    assert_eq!(job(&pool, job_id).await.status, JobStatus::Pending);
    assert!(event_types(&pool, job_id).await.is_empty());
}

/// A run's jobs are found through its steps, also a job whose id is not its step's (as for a
/// step released before step jobs took their steps' ids): the job list filters and searches
/// by run, and a run's cancellation ends it.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_runs_jobs_are_found_through_its_steps_whatever_their_ids(pool: PgPool) {
    use runledger_engine::postgres::jobs::{
        JobListFilter, WorkflowRunHandleScope, cancel_workflow_run, count_jobs, list_jobs,
    };

    let job_id = one_job(&pool).await;
    let other = one_job(&pool).await;
    let (run_id, step_id) = attach_to_workflow(&pool, job_id).await;
    assert_ne!(job_id.0, step_id, "the job keeps an id of its own");
    let run = WorkflowRunId(run_id);

    let by_run = JobListFilter::new().workflow_run_id(run);
    let listed = list_jobs(&pool, &by_run).await.unwrap();
    assert_eq!(
        listed.jobs.iter().map(|job| job.id).collect::<Vec<_>>(),
        vec![job_id]
    );
    assert_eq!(count_jobs(&pool, &by_run, None).await.unwrap(), 1);
    let searched = JobListFilter::new().search(run_id.to_string());
    let found = list_jobs(&pool, &searched).await.unwrap();
    assert_eq!(
        found.jobs.iter().map(|job| job.id).collect::<Vec<_>>(),
        vec![job_id]
    );
    assert_eq!(count_jobs(&pool, &searched, None).await.unwrap(), 1);

    cancel_workflow_run(&pool, run, WorkflowRunHandleScope::Admin)
        .await
        .unwrap();
    assert_eq!(job(&pool, job_id).await.status, JobStatus::Canceled);
    assert_eq!(job(&pool, other).await.status, JobStatus::Pending);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn reaper_retries_an_expired_lease_that_has_attempts_left(pool: PgPool) {
    let job_id = one_job(&pool).await;
    let claimed = claim_one(&pool).await;
    expire_lease(&pool, job_id).await;

    let reaped = reap_expired_leases(&pool, 10, Duration::from_secs(30))
        .await
        .unwrap();

    assert_eq!(reaped.len(), 1);
    let lease = &reaped[0];
    assert_eq!(lease.job_id, job_id);
    assert_eq!(lease.job_type, "test.job");
    assert_eq!(lease.attempt, 1);
    assert_eq!(lease.worker_id, WORKER);
    assert!(!lease.started);
    assert_eq!(lease.status, JobStatus::Pending);
    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::Pending);
    assert_eq!(record.next_run_at, lease.next_run_at);
    assert_eq!(record.worker_id, None);
    assert_eq!(record.lease_expires_at, None);
    assert_eq!(record.finished_at, None);
    assert_eq!(record.last_error_code.as_deref(), Some("job.lease_expired"));
    let delay = scheduled_delay_secs(&pool, job_id).await;
    assert!((delay - 30.0).abs() < 0.001, "retry delay {delay} s");
    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts[0].outcome, JobAttemptOutcome::Failed);
    assert_eq!(attempts[0].failure_kind, Some(JobFailureKind::LeaseExpired));
    assert_eq!(attempts[0].error_code.as_deref(), Some("job.lease_expired"));
    assert_eq!(attempts[0].worker_id, WORKER);
    let events = list_job_events(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    let expired = events
        .iter()
        .find(|e| e.event_type == JobEventType::LeaseExpired)
        .expect("a LEASE_EXPIRED event");
    assert_eq!(expired.worker_id.as_deref(), Some(WORKER));
    assert_eq!(expired.attempt, Some(1));
    assert!(
        events
            .iter()
            .any(|e| e.event_type == JobEventType::RetryScheduled)
    );
    assert_eq!(count_rows(&pool, "job_dead_letters", job_id).await, 0);

    // The old worker's late report is refused; the retry runs as attempt 2.
    let err = complete_job_success(&pool, &claimed.lease(), None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.lease_owner_mismatch");
    make_due(&pool, job_id).await;
    let retry = claim_one(&pool).await;
    assert_eq!(retry.id, job_id);
    assert_eq!(retry.attempt_number, 2);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn reaper_dead_letters_an_expired_lease_on_the_last_attempt(pool: PgPool) {
    define(
        &pool,
        "test.job",
        DefinitionOpts {
            max_attempts: 1,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let payload = json!({"n": 7});
    let job_id = insert_job(&pool, "test.job", payload.clone()).await;
    claim_one(&pool).await;
    expire_lease(&pool, job_id).await;

    let reaped = reap_expired_leases(&pool, 10, Duration::from_secs(30))
        .await
        .unwrap();

    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].status, JobStatus::DeadLettered);
    let record = job(&pool, job_id).await;
    assert_eq!(record.status, JobStatus::DeadLettered);
    assert!(record.finished_at.is_some());
    assert_eq!(record.worker_id, None);
    let attempts = list_job_attempts(&pool, job_id, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts[0].failure_kind, Some(JobFailureKind::LeaseExpired));
    let dead = list_dead_letters(&pool, &DeadLetterListFilter::new().job_id(job_id))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].failure_kind, JobFailureKind::LeaseExpired);
    assert_eq!(dead[0].payload, payload);
    assert_eq!(dead[0].attempt, 1);
    let types = event_types(&pool, job_id).await;
    assert!(types.contains(&JobEventType::LeaseExpired));
    assert!(types.contains(&JobEventType::DeadLettered));
    assert!(!types.contains(&JobEventType::RetryScheduled));
    assert!(claim(&pool, WORKER, 10).await.is_empty());
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn reaper_takes_back_at_most_limit_leases_per_call(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    for n in 0..5 {
        insert_job(&pool, "test.job", json!({"n": n})).await;
    }
    for claimed in claim(&pool, WORKER, 5).await {
        expire_lease(&pool, claimed.id).await;
    }

    let mut batches = Vec::new();
    for _ in 0..4 {
        batches.push(reap_expired_leases(&pool, 2, Duration::ZERO).await.unwrap());
    }

    let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![2, 2, 1, 0]);
    let reaped: HashSet<JobId> = batches.iter().flatten().map(|r| r.job_id).collect();
    assert_eq!(reaped.len(), 5, "each lease reaped once");
    let leased: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue WHERE status = 'LEASED'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(leased, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn reaper_leaves_unexpired_leases_alone(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    insert_job(&pool, "test.job", json!({"n": 1})).await;
    insert_job(&pool, "test.job", json!({"n": 2})).await;
    let claimed = claim(&pool, WORKER, 2).await;
    let (expired, live) = (&claimed[0], &claimed[1]);
    expire_lease(&pool, expired.id).await;

    let reaped = reap_expired_leases(&pool, 10, Duration::ZERO)
        .await
        .unwrap();

    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].job_id, expired.id);
    let record = job(&pool, live.id).await;
    assert_eq!(record.status, JobStatus::Leased);
    assert_eq!(record.worker_id.as_deref(), Some(WORKER));
    assert_eq!(record.lease_expires_at, Some(live.lease_expires_at));
    // The live lease's holder can still finish normally.
    complete_job_success(&pool, &live.lease(), None)
        .await
        .unwrap();
    assert!(
        reap_expired_leases(&pool, 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn reaped_lease_reports_whether_the_handler_had_started(pool: PgPool) {
    define(&pool, "test.job", DefinitionOpts::default()).await;
    insert_job(&pool, "test.job", json!({"n": 1})).await;
    insert_job(&pool, "test.job", json!({"n": 2})).await;
    let claimed = claim(&pool, WORKER, 2).await;
    let (running, idle) = (&claimed[0], &claimed[1]);
    mark_job_running(&pool, &running.lease()).await.unwrap();
    expire_lease(&pool, running.id).await;
    expire_lease(&pool, idle.id).await;

    let reaped = reap_expired_leases(&pool, 10, Duration::ZERO)
        .await
        .unwrap();

    assert_eq!(reaped.len(), 2);
    let started_of = |id: JobId| reaped.iter().find(|r| r.job_id == id).unwrap().started;
    assert!(started_of(running.id));
    assert!(!started_of(idle.id));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn waiting_jobs_due_by_a_time_run_now_and_wake_workers(pool: PgPool) {
    use runledger_engine::postgres::jobs::{JobEnqueue, enqueue_job, run_waiting_jobs_now};

    define(&pool, "test.job", DefinitionOpts::default()).await;
    let payload = json!({});
    let in_one_hour = Utc::now() + chrono::TimeDelta::hours(1);
    let in_three_hours = Utc::now() + chrono::TimeDelta::hours(3);
    let soon = enqueue_job(
        &pool,
        &JobEnqueue::new("test.job", &payload).run_at(in_one_hour),
    )
    .await
    .unwrap();
    let later = enqueue_job(
        &pool,
        &JobEnqueue::new("test.job", &payload).run_at(in_three_hours),
    )
    .await
    .unwrap();
    assert!(claim(&pool, WORKER, 10).await.is_empty(), "both wait");
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen(JOB_QUEUE_CHANNEL).await.unwrap();

    let types = vec!["test.job".to_owned(), "other.job".to_owned()];
    let moved = run_waiting_jobs_now(&pool, Utc::now() + chrono::TimeDelta::hours(2), &types)
        .await
        .unwrap();

    assert_eq!(moved, 1);
    let claimed = claim(&pool, WORKER, 10).await;
    assert_eq!(
        claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![soon.id]
    );
    assert_eq!(job(&pool, later.id).await.status, JobStatus::Pending);
    let notification = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("no notification within 5 seconds")
        .unwrap();
    assert_eq!(notification.payload(), "test.job");
}
