//! Cancellation against completion and release: a run's cancellation and the completion of its
//! step jobs wait for each other (no deadlock, no lost release), and appends and external
//! completions refuse to queue behind an in-flight cancellation.

use runledger_engine::core::jobs::{
    JobType, StepKey, WorkflowRunEnqueueBuilder, WorkflowRunId, WorkflowStepEnqueueBuilder,
    WorkflowStepStatus, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    CompleteExternalWorkflowStepInput, TenantScope, WorkflowAppend, cancel_workflow_run,
    complete_external_workflow_step, complete_jobs_success, enqueue_workflow_run,
};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::support::{DefinitionOpts, claim, define, next_notification_payload, successes_of};

/// Two root job steps `a1` and `a2`, and `b` behind both.
async fn fan_in_run(pool: &PgPool) -> WorkflowRunId {
    let meta = json!({});
    let payload = json!({});
    let step = |key: &'static str| {
        WorkflowStepEnqueueBuilder::new(StepKey::new(key), JobType::new("race.step"), &payload)
    };
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("race.run"), &meta)
        .step(step("a1").build())
        .step(step("a2").build())
        .step(
            step("b")
                .depends_on_success(StepKey::new("a1"))
                .depends_on_success(StepKey::new("a2"))
                .build(),
        )
        .build()
        .unwrap();
    enqueue_workflow_run(pool, &run).await.unwrap().id
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn cancel_and_complete_race_without_deadlock_or_lost_release(pool: PgPool) {
    define(&pool, "race.step", DefinitionOpts::default()).await;
    for round in 0..60 {
        let run = fan_in_run(&pool).await;
        let mut claimed = claim(&pool, "race-worker", 2).await;
        assert_eq!(claimed.len(), 2, "round {round}");
        // The batch names the jobs in descending id order: the statement must still lock them
        // in the order the cancellation does.
        claimed.sort_by_key(|job| std::cmp::Reverse(job.id.0));
        let successes = successes_of(&claimed);
        let complete = {
            let pool = pool.clone();
            tokio::spawn(
                async move { complete_jobs_success(&pool, "race-worker", &successes).await },
            )
        };
        let cancel = {
            let pool = pool.clone();
            tokio::spawn(async move { cancel_workflow_run(&pool, run, TenantScope::Admin).await })
        };
        let completed = complete.await.unwrap().expect("completion must not fail");
        cancel.await.unwrap().expect("cancellation must not fail");

        let steps: Vec<(String, String, Option<uuid::Uuid>)> = sqlx::query_as(
            "SELECT step_key, status, job_id FROM runledger.workflow_steps
             WHERE workflow_run_id = $1 ORDER BY step_key",
        )
        .bind(run.0)
        .fetch_all(&pool)
        .await
        .unwrap();
        let status: String =
            sqlx::query_scalar("SELECT status FROM runledger.workflow_runs WHERE id = $1")
                .bind(run.0)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(status, "CANCELED", "round {round}");
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM runledger.job_queue
             WHERE workflow_run_id = $1 AND status IN ('PENDING', 'LEASED')",
        )
        .bind(run.0)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            open, 0,
            "round {round}: a job of the canceled run is still open"
        );
        let by_key = |key: &str| steps.iter().find(|s| s.0 == key).unwrap();
        // Either the batch committed first (both roots succeeded, `b` was released and then
        // canceled with its job) or the cancellation did (the batch found no lease).
        if completed.len() == 2 {
            assert_eq!(by_key("a1").1, "SUCCEEDED", "round {round}");
            assert_eq!(by_key("a2").1, "SUCCEEDED", "round {round}");
            assert!(
                by_key("b").2.is_some(),
                "round {round}: the release was lost"
            );
            assert_eq!(by_key("b").1, "CANCELED", "round {round}");
        } else {
            assert!(completed.is_empty(), "round {round}: a half-applied batch");
            assert!(steps.iter().all(|s| s.1 == "CANCELED"), "round {round}");
            assert!(by_key("b").2.is_none(), "round {round}");
        }
    }
}

/// A transaction holding an uncommitted cancellation of `run` (and so its release lock).
async fn during_cancellation(
    pool: &PgPool,
    run: WorkflowRunId,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.unwrap();
    cancel_workflow_run(&mut *tx, run, TenantScope::Admin)
        .await
        .unwrap();
    tx
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn appends_and_external_completions_meet_an_in_flight_cancellation_with_release_conflict(
    pool: PgPool,
) {
    define(&pool, "race.step", DefinitionOpts::default()).await;
    let meta = json!({});
    let payload = json!({});
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("race.gated"), &meta)
        .step(WorkflowStepEnqueueBuilder::new_external(StepKey::new("gate")).build())
        .build()
        .unwrap();
    let run = enqueue_workflow_run(&pool, &run).await.unwrap().id;
    let gate = CompleteExternalWorkflowStepInput {
        workflow_run_id: run,
        organization_id: None,
        step_key: StepKey::new("gate"),
        terminal_status: WorkflowStepStatus::Succeeded,
        status_reason: None,
        last_error_code: None,
        last_error_message: None,
        output: None,
    };
    let extra = vec![
        WorkflowStepEnqueueBuilder::new(StepKey::new("extra"), JobType::new("race.step"), &payload)
            .build(),
    ];
    let append = WorkflowAppend {
        workflow_run_id: run,
        organization_id: None,
        mutation_key: "append-1",
        steps: extra,
    };

    let cancellation = during_cancellation(&pool, run).await;
    let err = complete_external_workflow_step(&pool, &gate)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workflow.release_conflict", "{err:?}");
    let err = runledger_engine::postgres::jobs::append_workflow_steps(&pool, &append)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workflow.release_conflict", "{err:?}");

    // Rolled back, the cancellation leaves the run as it was, and both calls go through.
    cancellation.rollback().await.unwrap();
    runledger_engine::postgres::jobs::append_workflow_steps(&pool, &append)
        .await
        .unwrap();
    complete_external_workflow_step(&pool, &gate).await.unwrap();
}

/// A cancellation never waits for one of its run's jobs while holding another. Here a
/// completion batch has locked the higher id of the run's two leased jobs (as a plan reading
/// the heap in its order does) when the cancellation starts; the batch then locks the lower
/// id. A cancellation that locked the lower id and waited for the higher deadlocked with it.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_cancellation_holds_no_job_while_it_waits_for_another(pool: PgPool) {
    define(&pool, "race.step", DefinitionOpts::default()).await;
    let run = fan_in_run(&pool).await;
    let mut claimed = claim(&pool, "race-worker", 2).await;
    claimed.sort_by_key(|job| job.id.0);
    let high = claimed[1].id;

    let mut batch = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM runledger.job_queue WHERE id = $1 FOR UPDATE")
        .bind(high.0)
        .execute(&mut *batch)
        .await
        .unwrap();
    let cancel = {
        let pool = pool.clone();
        tokio::spawn(async move { cancel_workflow_run(&pool, run, TenantScope::Admin).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let successes = successes_of(&claimed);
    let completed = complete_jobs_success(&mut *batch, "race-worker", &successes)
        .await
        .expect("the batch must get the lower id");
    assert_eq!(completed.len(), 2);
    batch.commit().await.unwrap();
    cancel
        .await
        .unwrap()
        .expect("the cancellation must not fail");

    let steps: Vec<(String, String)> = sqlx::query_as(
        "SELECT step_key, status FROM runledger.workflow_steps
         WHERE workflow_run_id = $1 ORDER BY step_key",
    )
    .bind(run.0)
    .fetch_all(&pool)
    .await
    .unwrap();
    let expected = [("a1", "SUCCEEDED"), ("a2", "SUCCEEDED"), ("b", "CANCELED")];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(key, status)| (key.to_string(), status.to_string()))
        .collect();
    assert_eq!(steps, expected);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn released_steps_wake_workers_at_enqueue_and_at_their_prerequisites_completion(
    pool: PgPool,
) {
    define(&pool, "race.step", DefinitionOpts::default()).await;
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener
        .listen(runledger_engine::postgres::jobs::JOB_QUEUE_CHANNEL)
        .await
        .unwrap();

    fan_in_run(&pool).await;
    // The two roots are released by the enqueue: one notification for their type.
    assert_eq!(next_notification_payload(&mut listener).await, "race.step");
    let claimed = claim(&pool, "notify-worker", 2).await;
    assert_eq!(claimed.len(), 2);
    complete_jobs_success(&pool, "notify-worker", &successes_of(&claimed))
        .await
        .unwrap();

    // Completing both releases `b`, and its release notifies.
    assert_eq!(next_notification_payload(&mut listener).await, "race.step");
    assert_eq!(claim(&pool, "notify-worker", 2).await.len(), 1);
}
