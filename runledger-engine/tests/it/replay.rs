//! Replay of succeeded direct jobs (with lineage) and compare-and-requeue of failed ones.

use runledger_engine::core::jobs::{JobId, JobStatus};
use runledger_engine::postgres::jobs::{
    JobEnqueue, JobReplay, JobRequeueExpectation, JobRequeueOutcome, TenantScope, enqueue_job,
    list_job_replays, replay_job, requeue_job, requeue_job_if,
};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{
    DefinitionOpts, attach_to_workflow, claim_one, count_jobs, dead_letter, define, job, one_job,
};

/// A `test.job` job that ran and succeeded.
async fn succeeded_job(pool: &PgPool) -> JobId {
    let id = one_job(pool).await;
    let claimed = claim_one(pool).await;
    runledger_engine::postgres::jobs::complete_job_success(
        pool,
        &claimed.lease(),
        Some(&json!({"rows": 3})),
    )
    .await
    .unwrap();
    id
}

/// A `test.job` job that was dead-lettered in its first run.
async fn dead_lettered_job(pool: &PgPool) -> JobId {
    let id = one_job(pool).await;
    dead_letter(pool, &claim_one(pool).await).await;
    id
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn replaying_a_succeeded_job_creates_a_new_job_with_its_lineage(pool: PgPool) {
    let source = succeeded_job(&pool).await;
    let user = uuid::Uuid::now_v7();
    let replayed = replay_job(
        &pool,
        &JobReplay::new(source, "fix-42", "the exporter dropped rows").requested_by_user_id(user),
    )
    .await
    .unwrap();
    assert!(replayed.created);
    assert_ne!(replayed.job_id, source);

    let original = job(&pool, source).await;
    let copy = job(&pool, replayed.job_id).await;
    assert_eq!(copy.status, JobStatus::Pending);
    assert_eq!(copy.job_type, original.job_type);
    assert_eq!(copy.payload, original.payload);
    assert_eq!(
        (copy.priority, copy.max_attempts, copy.timeout_seconds),
        (
            original.priority,
            original.max_attempts,
            original.timeout_seconds
        )
    );
    assert_eq!(copy.created_by_user_id, Some(user));
    assert_eq!(
        original.status,
        JobStatus::Succeeded,
        "the source is untouched"
    );
    assert_eq!(original.output, Some(json!({"rows": 3})));

    for id in [source, replayed.job_id] {
        let lineage = list_job_replays(&pool, id, TenantScope::Admin)
            .await
            .unwrap();
        assert_eq!(lineage.len(), 1, "both jobs show the lineage");
        assert_eq!(
            (lineage[0].source_job_id, lineage[0].replay_job_id),
            (source, replayed.job_id)
        );
        assert_eq!(lineage[0].reason, "the exporter dropped rows");
        assert_eq!(lineage[0].requested_by_user_id, Some(user));
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn replay_is_idempotent_on_its_key_and_a_reused_key_conflicts(pool: PgPool) {
    let source = succeeded_job(&pool).await;
    let request = JobReplay::new(source, "fix-42", "exporter bug");
    let first = replay_job(&pool, &request).await.unwrap();
    let again = replay_job(&pool, &request).await.unwrap();
    assert_eq!((again.job_id, again.created), (first.job_id, false));
    assert_eq!(count_jobs(&pool).await, 2);

    let other_reason = replay_job(&pool, &JobReplay::new(source, "fix-42", "another bug"))
        .await
        .unwrap_err();
    assert_eq!(other_reason.code(), "job.replay_idempotency_conflict");

    let other_source = succeeded_job(&pool).await;
    let other_job = replay_job(
        &pool,
        &JobReplay::new(other_source, "fix-42", "exporter bug"),
    )
    .await
    .unwrap_err();
    assert_eq!(other_job.code(), "job.replay_idempotency_conflict");
    assert_eq!(count_jobs(&pool).await, 3, "refused replays create nothing");

    // Inside the caller's transaction, a rollback takes the replay back with it.
    let mut tx = pool.begin().await.unwrap();
    replay_job(&mut *tx, &JobReplay::new(source, "fix-43", "exporter bug"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(count_jobs(&pool).await, 3);
    assert_eq!(
        list_job_replays(&pool, source, TenantScope::Admin)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn only_a_succeeded_direct_job_in_scope_replays(pool: PgPool) {
    let source = succeeded_job(&pool).await;
    for (key, reason, code) in [
        (" ", "why", "job.invalid_replay_key"),
        ("r-4", "", "job.invalid_replay_reason"),
        ("r\u{0}5", "why", "job.invalid_replay_key"),
    ] {
        let err = replay_job(&pool, &JobReplay::new(source, key, reason))
            .await
            .unwrap_err();
        assert_eq!(err.code(), code);
    }

    let step = succeeded_job(&pool).await;
    attach_to_workflow(&pool, step).await;
    let err = replay_job(&pool, &JobReplay::new(step, "r-2", "why"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.workflow_replay_not_supported");

    let pending = one_job(&pool).await;
    let err = replay_job(&pool, &JobReplay::new(pending, "r-1", "why"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.replay_invalid_state");

    define(&pool, "tenant.job", DefinitionOpts::default()).await;
    let payload = json!({});
    let tenant_job = enqueue_job(
        &pool,
        &JobEnqueue::new("tenant.job", &payload).organization_id(uuid::Uuid::now_v7()),
    )
    .await
    .unwrap()
    .id;
    let err = replay_job(&pool, &JobReplay::new(tenant_job, "r-3", "why"))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        "job.not_found",
        "another organization's job is not found"
    );
    assert_eq!(
        count_jobs(&pool).await,
        4,
        "no refused replay created a job"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn requeue_if_requeues_only_while_the_observed_state_holds(pool: PgPool) {
    let id = dead_lettered_job(&pool).await;
    let seen = JobRequeueExpectation::from(&job(&pool, id).await);
    assert_eq!(seen, JobRequeueExpectation::new(JobStatus::DeadLettered, 1));

    // Two operators act on the same failure: one requeue happens.
    let first = requeue_job_if(&pool, id, TenantScope::Admin, seen)
        .await
        .unwrap();
    assert_eq!(first, JobRequeueOutcome::Requeued { run_number: 2 });
    let second = requeue_job_if(&pool, id, TenantScope::Admin, seen)
        .await
        .unwrap();
    assert_eq!(
        second,
        JobRequeueOutcome::ExpectationMismatch {
            status: JobStatus::Pending,
            run_number: 2
        }
    );

    // The new run fails again: the stale view (run 1) still cannot requeue it.
    dead_letter(&pool, &claim_one(&pool).await).await;
    let stale = requeue_job_if(&pool, id, TenantScope::Admin, seen)
        .await
        .unwrap();
    assert_eq!(
        stale,
        JobRequeueOutcome::ExpectationMismatch {
            status: JobStatus::DeadLettered,
            run_number: 2
        }
    );
    let current = JobRequeueExpectation::from(&job(&pool, id).await);
    assert_eq!(
        requeue_job_if(&pool, id, TenantScope::Admin, current)
            .await
            .unwrap(),
        JobRequeueOutcome::Requeued { run_number: 3 }
    );
    let requeued = job(&pool, id).await;
    assert_eq!(requeued.status, JobStatus::Pending);
    assert_eq!(
        requeued.attempts_used, 0,
        "each run has a fresh attempt budget"
    );

    // The unconditional requeue also starts a new run.
    dead_letter(&pool, &claim_one(&pool).await).await;
    requeue_job(&pool, id, TenantScope::Admin).await.unwrap();
    assert_eq!(job(&pool, id).await.run_number, 4);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn requeue_if_refuses_workflow_jobs_and_states_it_cannot_requeue(pool: PgPool) {
    let step = dead_lettered_job(&pool).await;
    attach_to_workflow(&pool, step).await;
    let seen = JobRequeueExpectation::from(&job(&pool, step).await);
    let err = requeue_job_if(&pool, step, TenantScope::Admin, seen)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.workflow_requeue_not_supported");

    let pending = one_job(&pool).await;
    let seen = JobRequeueExpectation::from(&job(&pool, pending).await);
    let err = requeue_job_if(&pool, pending, TenantScope::Admin, seen)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.requeue_invalid_state");

    let missing = JobId::new_v7();
    let err = requeue_job_if(&pool, missing, TenantScope::Admin, seen)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.not_found");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_replay_lineage_is_deleted_with_either_of_its_jobs(pool: PgPool) {
    let lineage = |pool: PgPool| async move {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM runledger.job_replays")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let delete = |pool: PgPool, id: JobId| async move {
        sqlx::query("DELETE FROM runledger.job_queue WHERE id = $1")
            .bind(id.0)
            .execute(&pool)
            .await
            .unwrap();
    };
    let source = succeeded_job(&pool).await;
    let first = replay_job(&pool, &JobReplay::new(source, "r-1", "first"))
        .await
        .unwrap();
    let second = replay_job(&pool, &JobReplay::new(first.job_id, "r-2", "second")).await;
    // A replay is pending, so only the source's lineage exists; delete the replay first.
    assert!(second.is_err());
    assert_eq!(lineage(pool.clone()).await, 1);
    delete(pool.clone(), first.job_id).await;
    assert_eq!(lineage(pool.clone()).await, 0);

    let again = replay_job(&pool, &JobReplay::new(source, "r-3", "again"))
        .await
        .unwrap();
    assert!(again.created);
    assert_eq!(lineage(pool.clone()).await, 1);
    delete(pool.clone(), source).await;
    assert_eq!(lineage(pool.clone()).await, 0);
}
