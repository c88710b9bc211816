//! Handles rebuilt from stored ids check the type they are used as.

use runledger::prelude::*;
use sqlx::PgPool;

use crate::jobs::{Add, Summarize};
use runledger::testing::prepare;

#[job(name = "it.handles.tally")]
async fn tally(n: u32) -> Result<u32, JobError> {
    Ok(n)
}

#[workflow(name = "it.handles.gated")]
struct Gated {
    #[result]
    approval: External<bool>,
}

#[workflow(name = "it.handles.other")]
struct Other {
    #[result]
    approval: External<bool>,
    #[after(approval)]
    tally: Tally,
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_job_handle_of_another_job_type_fails_with_type_mismatch(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let add = Add { a: 1, b: 2 }.enqueue(&pool).await.unwrap();

    let wrong = runledger::JobHandle::<Summarize>::from_id(add.id(), None);
    let err = wrong.status(&pool).await.unwrap_err();
    assert_eq!(err.code(), "job.type_mismatch");
    assert!(err.to_string().contains("`it.add`"), "{err}");
    assert_eq!(
        wrong.output(&pool).await.unwrap_err().code(),
        "job.type_mismatch"
    );

    let right = runledger::JobHandle::<Add>::from_id(add.id(), None);
    assert_eq!(right.status(&pool).await.unwrap().as_str(), "PENDING");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_workflow_handle_of_another_workflow_fails_with_type_mismatch_and_changes_nothing(
    pool: PgPool,
) {
    prepare(&pool).await.unwrap();
    let other = Other {
        approval: External::new(),
        tally: Tally { n: 1 },
    }
    .enqueue(&pool)
    .await
    .unwrap();

    let wrong = WorkflowHandle::<Gated>::from_id(other.id(), None);
    for err in [
        wrong.status(&pool).await.unwrap_err(),
        wrong
            .complete_gate(&pool, Gated::APPROVAL, &true)
            .await
            .unwrap_err(),
        wrong
            .fail_gate(&pool, Gated::APPROVAL, "it.no", "refused")
            .await
            .unwrap_err(),
        wrong.cancel(&pool).await.unwrap_err(),
        wrong
            .result(&pool, Wait::up_to(std::time::Duration::from_secs(1)))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.code(), "workflow.type_mismatch", "{err}");
    }
    // The run of the other type was left alone: its gate still waits.
    assert_eq!(
        other.status(&pool).await.unwrap().as_str(),
        "WAITING_FOR_EXTERNAL"
    );
    let right = WorkflowHandle::<Other>::from_id(other.id(), None);
    right
        .complete_gate(&pool, Other::APPROVAL, &true)
        .await
        .unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_job_handle_explains_what_holds_its_job(pool: PgPool) {
    use runledger::admin::JobHold;

    prepare(&pool).await.unwrap();
    let later = Add { a: 1, b: 1 }
        .enqueue_with(
            &pool,
            EnqueueOptions::new().delay(std::time::Duration::from_secs(3_600)),
        )
        .await
        .unwrap();
    let reasons = |holds: &[JobHold]| -> Vec<String> {
        holds
            .iter()
            .map(|hold| serde_json::to_value(hold).unwrap()["reason"].to_string())
            .collect()
    };
    let explained = later.explain(&pool).await.unwrap();
    assert_eq!(
        reasons(&explained.holds),
        ["\"scheduled\"", "\"no_live_worker\""],
        "nothing runs `it.add` yet"
    );

    let worker = crate::support::start_worker(&pool).await;
    let explained = crate::support::eventually("the worker's presence", || async {
        let explained = later.explain(&pool).await.unwrap();
        (explained.holds.len() == 1).then_some(explained)
    })
    .await;
    assert_eq!(reasons(&explained.holds), ["\"scheduled\""]);
    assert!(!explained.is_claimable());
    worker.shutdown().await.unwrap();

    let wrong = runledger::JobHandle::<Summarize>::from_id(later.id(), None);
    assert_eq!(
        wrong.explain(&pool).await.unwrap_err().code(),
        "job.type_mismatch"
    );
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_run_enqueued_run_first_dates_its_step_jobs_from_its_start(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let run = Other {
        approval: External::new(),
        tally: Tally { n: 1 },
    };
    let plain = run
        .enqueue_with(&pool, WorkflowOptions::new())
        .await
        .unwrap();
    let first = run
        .enqueue_with(&pool, WorkflowOptions::new().run_first())
        .await
        .unwrap();
    for (run, expected) in [(plain.id(), false), (first.id(), true)] {
        let stored: bool =
            sqlx::query_scalar("SELECT run_first FROM runledger.workflow_runs WHERE id = $1")
                .bind(run.0)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(stored, expected);
    }
    // Released later, `tally`'s job is due from its run's start.
    first
        .complete_gate(&pool, Other::APPROVAL, &true)
        .await
        .unwrap();
    let (due, started): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as(
            "SELECT q.next_run_at, w.created_at FROM runledger.job_queue q
             JOIN runledger.workflow_runs w ON w.id = q.workflow_run_id
             WHERE q.workflow_run_id = $1 AND q.workflow_step_key = 'tally'",
        )
        .bind(first.id().0)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(due, started);
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_singleton_enqueue_returns_the_job_that_holds_its_key(pool: PgPool) {
    use runledger::UniqueWhile;

    prepare(&pool).await.unwrap();
    let options = || EnqueueOptions::new().unique("sum:daily", UniqueWhile::Queued);
    let first = Add { a: 1, b: 2 }
        .enqueue_with(&pool, options())
        .await
        .unwrap();
    let second = Add { a: 3, b: 4 }
        .enqueue_with(&pool, options())
        .await
        .unwrap();
    assert!(first.was_created());
    assert!(
        !second.was_created(),
        "the key is held: the first job is returned"
    );
    assert_eq!(second.id(), first.id());

    let both = EnqueueOptions::new()
        .unique("sum:daily", UniqueWhile::Queued)
        .idempotency_key("sum:daily");
    assert_eq!(
        Add { a: 1, b: 2 }
            .enqueue_with(&pool, both)
            .await
            .unwrap_err()
            .code(),
        "job.unique_key_with_idempotency_key"
    );
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn debounced_and_throttled_enqueues_report_their_outcome(pool: PgPool) {
    use runledger::EnqueueOutcome;
    use std::time::Duration;

    prepare(&pool).await.unwrap();
    let window = Duration::from_secs(60);
    let debounce = || EnqueueOptions::new().debounce("sum", window);
    let first = Add { a: 1, b: 0 }
        .enqueue_with(&pool, debounce())
        .await
        .unwrap();
    let second = Add { a: 2, b: 0 }
        .enqueue_with(&pool, debounce())
        .await
        .unwrap();
    assert_eq!(first.outcome(), EnqueueOutcome::Inserted);
    assert_eq!(
        (second.id(), second.outcome()),
        (first.id(), EnqueueOutcome::Replaced)
    );

    let throttle = || EnqueueOptions::new().throttle("alert", window);
    let kept = Add { a: 1, b: 0 }
        .enqueue_with(&pool, throttle())
        .await
        .unwrap();
    let dropped = Add { a: 2, b: 0 }
        .enqueue_with(&pool, throttle())
        .await
        .unwrap();
    assert_eq!(kept.outcome(), EnqueueOutcome::Inserted);
    assert_eq!(
        (dropped.id(), dropped.outcome(), dropped.was_created()),
        (kept.id(), EnqueueOutcome::Dropped, false)
    );
}
