//! Typed durable enqueue intents (`record_intent`), replay and compare-and-requeue through job
//! handles.

use runledger::EnqueueOptions;
use runledger::admin::JobRequeueOutcome;
use runledger::engine::core::jobs::{JobIntentStatus, JobStatus};
use runledger::prelude::*;
use runledger::testing::{drain, prepare};
use sqlx::PgPool;

use crate::jobs::{Add, Summarize, Summary};
use crate::support::{eventually, start_worker};

#[job(name = "it.always_fails", max_attempts = 1)]
async fn always_fails(reason: String) -> Result<(), JobError> {
    Err(JobError::terminal(reason))
}

async fn count(pool: &PgPool, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM runledger.{table}");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_typed_intent_recorded_in_a_rolled_back_transaction_leaves_nothing(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let intent = Add { a: 1, b: 2 }
        .record_intent(&mut *tx, "sum:1")
        .await
        .unwrap();
    assert!(intent.was_created());
    tx.rollback().await.unwrap();

    let err = intent.status(&pool).await.unwrap_err();
    assert_eq!(err.code(), "job.intent_not_found");
    assert_eq!(drain(&pool).await.unwrap().runs.len(), 0);
    assert_eq!(count(&pool, "job_enqueue_intents").await, 0);
    assert_eq!(count(&pool, "job_queue").await, 0);
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_committed_typed_intent_becomes_its_job_and_keeps_its_key(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let intent = Add { a: 20, b: 22 }
        .record_intent(&mut *tx, "sum:42")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        intent.status(&pool).await.unwrap(),
        JobIntentStatus::Pending
    );
    assert!(intent.job(&pool).await.unwrap().is_none());

    let report = drain(&pool).await.unwrap();
    assert_eq!(
        report.succeeded(),
        1,
        "drain promotes intents, then runs them"
    );
    assert_eq!(
        intent.status(&pool).await.unwrap(),
        JobIntentStatus::Promoted
    );
    let job = intent.job(&pool).await.unwrap().expect("promoted");
    assert_eq!(job.output(&pool).await.unwrap(), Some(42));

    let again = Add { a: 20, b: 22 }
        .record_intent(&pool, "sum:42")
        .await
        .unwrap();
    assert_eq!((again.id(), again.was_created()), (intent.id(), false));
    let err = Add { a: 1, b: 1 }
        .record_intent(&pool, "sum:42")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.intent_idempotency_conflict");
    let keyless = Add { a: 1, b: 1 }
        .record_intent_with(&pool, EnqueueOptions::new().priority(3))
        .await
        .unwrap_err();
    assert_eq!(keyless.code(), "job.intent_idempotency_key_required");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_worker_deployed_after_the_intent_promotes_and_runs_it(pool: PgPool) {
    // The producer records the intent before any worker defined the job type.
    let defined: i64 = count(&pool, "job_definitions").await;
    assert_eq!(defined, 0);
    let intent = Summarize {
        text: "an outbox survives deploy order".into(),
    }
    .record_intent(&pool, "summary:1")
    .await
    .unwrap();

    let worker = start_worker(&pool).await;
    let job = eventually("the intent's job", || async {
        intent.job(&pool).await.unwrap()
    })
    .await;
    let output = eventually("the job's output", || async {
        job.output(&pool).await.unwrap()
    })
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        output,
        Summary {
            words: 5,
            longest: "survives".into()
        }
    );
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_job_handle_replays_a_succeeded_job_once_per_key(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let original = Add { a: 2, b: 3 }.enqueue(&pool).await.unwrap();
    drain(&pool).await.unwrap();

    let replay = original
        .replay(&pool, "recount-1", "the adder was fixed")
        .await
        .unwrap();
    assert!(replay.was_created());
    assert_ne!(replay.id(), original.id());
    assert_eq!(replay.status(&pool).await.unwrap(), JobStatus::Pending);
    let same = original
        .replay(&pool, "recount-1", "the adder was fixed")
        .await
        .unwrap();
    assert_eq!((same.id(), same.was_created()), (replay.id(), false));
    let err = original
        .replay(&pool, "recount-1", "another reason")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.replay_idempotency_conflict");

    assert_eq!(drain(&pool).await.unwrap().succeeded(), 1);
    assert_eq!(replay.output(&pool).await.unwrap(), Some(5));
    let not_done = Add { a: 0, b: 0 }.enqueue(&pool).await.unwrap();
    let err = not_done.replay(&pool, "early", "why").await.unwrap_err();
    assert_eq!(err.code(), "job.replay_invalid_state");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_job_handle_requeues_only_the_failure_it_observed(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let job = AlwaysFails {
        reason: "upstream gone".into(),
    }
    .enqueue(&pool)
    .await
    .unwrap();
    drain(&pool).await.unwrap();
    let seen = job.observe(&pool).await.unwrap();
    assert_eq!((seen.status, seen.run_number), (JobStatus::DeadLettered, 1));

    assert_eq!(
        job.requeue_if(&pool, seen).await.unwrap(),
        JobRequeueOutcome::Requeued { run_number: 2 }
    );
    assert_eq!(
        job.requeue_if(&pool, seen).await.unwrap(),
        JobRequeueOutcome::ExpectationMismatch {
            status: JobStatus::Pending,
            run_number: 2
        },
        "a second operator acting on the same failure changes nothing"
    );
    drain(&pool).await.unwrap();
    assert_eq!(job.status(&pool).await.unwrap(), JobStatus::DeadLettered);
}
