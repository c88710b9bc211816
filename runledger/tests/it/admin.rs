//! Operator operations through `runledger::admin`: on ids and names, in any organization.

use std::time::Duration;

use runledger::admin::{self, JobRequeueExpectation, JobRequeueOutcome};
use runledger::chrono::{TimeDelta, Utc};
use runledger::engine::core::jobs::{JobStatus, WorkflowRunStatus};
use runledger::engine::postgres::jobs::{TenantScope, get_job_by_id};
use runledger::prelude::*;
use runledger::testing::prepare;
use sqlx::PgPool;

use crate::jobs::Add;

#[workflow(name = "it.admin.pair")]
struct Pair {
    first: Add,
    #[after(first)]
    second: Add,
}

async fn status_and_run(
    pool: &PgPool,
    id: runledger::engine::core::jobs::JobId,
) -> (JobStatus, i32) {
    let job = get_job_by_id(pool, id, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    (job.status, job.run_number)
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn an_operator_cancels_a_tenants_job_and_requeues_it_as_a_new_run(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let tenant = uuid::Uuid::now_v7();
    let job = Add { a: 1, b: 2 }
        .enqueue_with(&pool, EnqueueOptions::new().organization(tenant))
        .await
        .unwrap();

    admin::cancel_job(&pool, job.id()).await.unwrap();
    assert_eq!(
        status_and_run(&pool, job.id()).await,
        (JobStatus::Canceled, 1)
    );
    let again = admin::cancel_job(&pool, job.id()).await.unwrap_err();
    assert_eq!(again.code(), "job.cancel_invalid_state");

    admin::requeue_job(&pool, job.id()).await.unwrap();
    assert_eq!(
        status_and_run(&pool, job.id()).await,
        (JobStatus::Pending, 2)
    );

    let stale = JobRequeueExpectation::new(JobStatus::Canceled, 1);
    let outcome = admin::requeue_job_if(&pool, job.id(), stale).await.unwrap();
    assert_eq!(
        outcome,
        JobRequeueOutcome::ExpectationMismatch {
            status: JobStatus::Pending,
            run_number: 2
        }
    );
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_disabled_job_type_refuses_enqueues_until_it_is_enabled_again(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let definition = admin::disable_job_type(&pool, Add::NAME).await.unwrap();
    assert!(!definition.is_enabled);
    let refused = Add { a: 1, b: 1 }.enqueue(&pool).await.unwrap_err();
    assert_eq!(refused.code(), "job.definition_not_found_or_disabled");

    assert!(
        admin::enable_job_type(&pool, Add::NAME)
            .await
            .unwrap()
            .is_enabled
    );
    Add { a: 1, b: 1 }.enqueue(&pool).await.unwrap();

    let unknown = admin::disable_job_type(&pool, "it.admin.nothing")
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), "job_definition.not_found");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_queue_an_operator_paused_and_limited_is_listed_until_resumed(pool: PgPool) {
    prepare(&pool).await.unwrap();
    assert!(
        admin::pause_queue(&pool, "it.admin")
            .await
            .unwrap()
            .is_paused
    );
    let limited = admin::set_queue_global_concurrency(&pool, "it.admin", Some(2))
        .await
        .unwrap();
    assert_eq!(
        (limited.is_paused, limited.global_concurrency),
        (true, Some(2))
    );
    let refused = admin::set_queue_global_concurrency(&pool, "it.admin", Some(0))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "job.invalid_global_concurrency");

    assert!(
        !admin::resume_queue(&pool, "it.admin")
            .await
            .unwrap()
            .is_paused
    );
    let queues = admin::list_queues(&pool).await.unwrap();
    let listed: Vec<_> = queues
        .iter()
        .map(|q| (q.name.as_str(), q.is_paused, q.global_concurrency))
        .collect();
    assert_eq!(listed, vec![("it.admin", false, Some(2))]);
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn delayed_jobs_of_the_named_types_become_due_when_an_operator_runs_them_now(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let delayed = EnqueueOptions::new().delay(Duration::from_secs(3600));
    let job = Add { a: 2, b: 2 }
        .enqueue_with(&pool, delayed.clone())
        .await
        .unwrap();

    let later = Utc::now() + TimeDelta::hours(2);
    assert_eq!(
        admin::run_waiting_jobs_now(&pool, &["it.summarize"], later)
            .await
            .unwrap(),
        0,
        "another type moves nothing"
    );
    assert_eq!(
        admin::run_waiting_jobs_now(&pool, &[Add::NAME], later)
            .await
            .unwrap(),
        1
    );
    let record = get_job_by_id(&pool, job.id(), TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert!(record.next_run_at <= Utc::now(), "due now");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn an_operator_cancels_a_workflow_run_by_its_id(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let run = Pair {
        first: Add { a: 1, b: 2 },
        second: Add { a: 3, b: 4 },
    }
    .enqueue(&pool)
    .await
    .unwrap();

    admin::cancel_workflow_run(&pool, run.id()).await.unwrap();
    assert_eq!(
        run.status(&pool).await.unwrap(),
        WorkflowRunStatus::Canceled
    );
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn an_operator_deactivates_and_activates_a_schedule_by_name(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let off = admin::deactivate_schedule(&pool, "it.tick.every_second")
        .await
        .unwrap();
    assert!(!off.is_active);
    let on = admin::activate_schedule(&pool, "it.tick.every_second")
        .await
        .unwrap();
    assert!(on.is_active);
    let unknown = admin::activate_schedule(&pool, "it.admin.no_schedule")
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), "job_schedule.not_found");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn pruning_by_hand_keeps_finished_jobs_within_their_retention(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let job = Add { a: 5, b: 5 }.enqueue(&pool).await.unwrap();
    admin::cancel_job(&pool, job.id()).await.unwrap();

    let retention = admin::Retention::default();
    let due = admin::count_prunable(&pool, &retention).await.unwrap();
    assert_eq!((due.jobs(), due.runs()), (0, 0));
    let pass = admin::prune(&pool, &retention).await.unwrap();
    assert_eq!((pass.deleted.jobs(), pass.locked_out), (0, false));
    assert_eq!(status_and_run(&pool, job.id()).await.0, JobStatus::Canceled);
}
