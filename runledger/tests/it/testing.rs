//! The testing kit itself: test databases, draining, assertions and handler contexts.

use std::time::Duration;

use runledger::engine::core::jobs::WorkflowRunStatus;
use runledger::prelude::*;
use runledger::testing::{
    DrainOptions, DrainOutcome, TestContext, TestDatabase, assert_enqueued,
    assert_workflow_enqueued, drain, drain_with, enqueued, enqueued_workflows,
};
use serde::{Deserialize, Serialize};

// A diamond: split -> (upper, lower) -> join.

#[job(name = "it.kit.split")]
async fn split(text: String) -> Result<Vec<String>, JobError> {
    Ok(text.split_whitespace().map(str::to_owned).collect())
}

#[job(name = "it.kit.upper")]
async fn upper(#[output(Shout::SPLIT)] words: Vec<String>) -> Result<String, JobError> {
    Ok(words.join(" ").to_uppercase())
}

#[job(name = "it.kit.lower")]
async fn lower(#[output(Shout::SPLIT)] words: Vec<String>) -> Result<String, JobError> {
    Ok(words.join(" ").to_lowercase())
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Both {
    upper: String,
    lower: String,
}

#[job(name = "it.kit.join")]
async fn join(
    #[output(Shout::UPPER)] upper: String,
    #[output(Shout::LOWER)] lower: String,
) -> Result<Both, JobError> {
    Ok(Both { upper, lower })
}

#[workflow(name = "it.kit.shout")]
struct Shout {
    split: Split,
    #[after(split)]
    upper: Upper,
    #[after(split)]
    lower: Lower,
    #[after(upper, lower)]
    #[result]
    join: Join,
}

fn shout(text: &str) -> Shout {
    Shout {
        split: Split { text: text.into() },
        upper: Upper {},
        lower: Lower {},
        join: Join {},
    }
}

/// Fails its first attempt and asks for an hour's pause before the next one.
#[job(name = "it.kit.unstable", max_attempts = 3)]
async fn unstable(ctx: JobContext, reference: String) -> Result<String, JobError> {
    if ctx.attempt() == 1 {
        return Err(JobError::retryable("upstream busy")
            .with_code("it.busy")
            .retry_after(Duration::from_secs(3_600)));
    }
    Ok(format!("{reference} on attempt {}", ctx.attempt()))
}

#[job(name = "it.kit.notify")]
async fn notify(user_id: u64, channel: String) -> Result<(), JobError> {
    let _ = (user_id, channel);
    Ok(())
}

#[tokio::test]
async fn a_diamond_workflow_drains_in_dependency_order_to_its_result() {
    let db = TestDatabase::new().await.unwrap();
    let run = shout("Durable Jobs").enqueue(db.pool()).await.unwrap();

    let report = drain(db.pool()).await.unwrap();

    assert_eq!(report.passes, 3, "split, then upper and lower, then join");
    assert_eq!(report.succeeded(), 4);
    let order: Vec<&str> = report.runs.iter().map(|r| r.job_type.as_str()).collect();
    assert_eq!(order[0], "it.kit.split");
    assert_eq!(order[3], "it.kit.join");
    let result = run
        .result(db.pool(), Wait::up_to(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(
        result,
        Both {
            upper: "DURABLE JOBS".into(),
            lower: "durable jobs".into()
        }
    );
    assert!(
        drain(db.pool()).await.unwrap().runs.is_empty(),
        "nothing left"
    );
    db.close().await.unwrap();
}

#[tokio::test]
async fn a_retried_job_is_tested_without_sleeping() {
    let db = TestDatabase::new().await.unwrap();
    let job = Unstable {
        reference: "order-7".into(),
    }
    .enqueue(db.pool())
    .await
    .unwrap();

    // Due work only: the first attempt fails and the retry waits an hour.
    let first = drain(db.pool()).await.unwrap();
    assert!(
        matches!(
            first.runs.as_slice(),
            [run] if run.attempt == 1
                && matches!(&run.outcome, DrainOutcome::Retrying { code, .. } if code == "it.busy")
        ),
        "{first:?}"
    );
    assert_eq!(job.output(db.pool()).await.unwrap(), None);

    // Including work due within two hours runs the retry at once.
    let two_hours = Duration::from_secs(7_200);
    let second = drain_with(
        db.pool(),
        DrainOptions::new().include_delayed_for(two_hours),
    )
    .await
    .unwrap();
    assert_eq!(second.succeeded(), 1);
    assert_eq!(second.runs[0].attempt, 2);
    assert_eq!(
        job.output(db.pool()).await.unwrap().as_deref(),
        Some("order-7 on attempt 2")
    );
}

#[tokio::test]
async fn a_step_handler_is_unit_tested_with_its_outputs_as_arguments() {
    let words = vec!["Mixed".to_owned(), "Case".to_owned()];
    assert_eq!(upper(words).await.unwrap(), "MIXED CASE");
    assert_eq!(
        join("UP".to_owned(), "down".to_owned()).await.unwrap(),
        Both {
            upper: "UP".into(),
            lower: "down".into()
        }
    );
}

/// Reads the worker's shared state.
struct Signature(&'static str);

#[job(name = "it.kit.sign")]
async fn sign(ctx: JobContext, text: String) -> Result<String, JobError> {
    Ok(format!("{text} -- {}", ctx.data::<Signature>()?.0))
}

#[tokio::test]
async fn a_handler_is_unit_tested_with_the_state_a_worker_would_give_it() {
    let ctx = TestContext::for_job::<Sign>()
        .with_data(Signature("ada"))
        .build();
    assert_eq!(ctx.job_type(), "it.kit.sign");
    assert_eq!(sign(ctx, "hi".into()).await.unwrap(), "hi -- ada");

    let err = sign(TestContext::for_job::<Sign>().build(), "hi".into())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.data_missing");
    assert!(err.is_terminal());
}

#[tokio::test]
async fn enqueued_jobs_and_runs_are_read_back_typed_and_asserted() {
    let db = TestDatabase::new().await.unwrap();
    for user_id in [1, 2] {
        Notify {
            user_id,
            channel: "email".into(),
        }
        .enqueue(db.pool())
        .await
        .unwrap();
    }
    let waiting: Vec<u64> = enqueued::<Notify>(db.pool())
        .await
        .unwrap()
        .into_iter()
        .map(|job| job.user_id)
        .collect();
    assert_eq!(waiting, vec![1, 2], "oldest first");
    assert_enqueued::<Notify>(db.pool(), |job| job.user_id == 2 && job.channel == "email").await;

    let run = shout("a b").enqueue(db.pool()).await.unwrap();
    assert_workflow_enqueued::<Shout>(db.pool(), |r| {
        r.id == run.id() && r.status == WorkflowRunStatus::Running
    })
    .await;
    drain(db.pool()).await.unwrap();
    assert!(enqueued::<Notify>(db.pool()).await.unwrap().is_empty());
    let runs = enqueued_workflows::<Shout>(db.pool()).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, WorkflowRunStatus::Succeeded);
}

#[tokio::test]
async fn a_failed_assertion_lists_what_is_enqueued() {
    let db = TestDatabase::new().await.unwrap();
    Notify {
        user_id: 9,
        channel: "sms".into(),
    }
    .enqueue(db.pool())
    .await
    .unwrap();
    let pool = db.pool().clone();
    let outcome = tokio::spawn(async move {
        assert_enqueued::<Notify>(&pool, |job| job.channel == "email").await;
    })
    .await;
    let panic = outcome.expect_err("the assertion must fail").into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("no enqueued `it.kit.notify` job matches"),
        "{message}"
    );
    assert!(message.contains("user_id: 9"), "{message}");
    assert!(
        message.contains("testing.rs"),
        "names the caller: {message}"
    );
}

#[tokio::test]
async fn each_test_database_is_fresh_migrated_and_dropped_afterwards() {
    let first = TestDatabase::new().await.unwrap();
    let second = TestDatabase::new().await.unwrap();
    assert_ne!(first.name(), second.name());
    let applied: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runledger._sqlx_migrations WHERE success")
            .fetch_one(first.pool())
            .await
            .unwrap();
    assert!(applied >= 1, "the migrations are applied");
    let defined: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM runledger.job_definitions WHERE job_type = 'it.kit.notify')",
    )
    .fetch_one(first.pool())
    .await
    .unwrap();
    assert!(defined, "the binary's job definitions are synced");

    let (closed, dropped) = (first.name().to_owned(), second.name().to_owned());
    first.close().await.unwrap();
    drop(second);
    let probe = TestDatabase::new().await.unwrap();
    let remaining: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = ANY($1)")
            .bind(vec![closed, dropped])
            .fetch_one(probe.pool())
            .await
            .unwrap();
    assert_eq!(
        remaining, 0,
        "both the closed and the dropped database are gone"
    );
}

#[tokio::test]
async fn a_drain_stops_at_its_pass_bound_and_says_so() {
    let db = TestDatabase::new().await.unwrap();
    Unstable {
        reference: "loop".into(),
    }
    .enqueue(db.pool())
    .await
    .unwrap();
    let err = drain_with(
        db.pool(),
        DrainOptions::new()
            .include_delayed_for(Duration::from_secs(7_200))
            .max_passes(1),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "testing.drain_did_not_settle");
}

/// Where the Docker engine listens, if anywhere: `DOCKER_HOST`, else the default socket.
#[cfg(feature = "testcontainers")]
fn docker_engine() -> Result<String, String> {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.trim().is_empty() => Ok(host),
        _ => {
            let socket = std::path::Path::new("/var/run/docker.sock");
            if socket.exists() {
                Ok(format!("unix://{}", socket.display()))
            } else {
                Err("DOCKER_HOST is unset and /var/run/docker.sock does not exist".to_owned())
            }
        }
    }
}

#[cfg(feature = "testcontainers")]
#[tokio::test]
async fn a_container_database_runs_a_drained_job_where_docker_is_reachable() {
    let engine = match docker_engine() {
        Ok(engine) => engine,
        Err(reason) => {
            eprintln!("NOT RUN: no Docker engine is reachable ({reason}); this test needs one");
            return;
        }
    };
    eprintln!("running against the Docker engine at {engine}");
    let db = TestDatabase::in_container().await.unwrap();
    let run = shout("in a box").enqueue(db.pool()).await.unwrap();
    assert_eq!(drain(db.pool()).await.unwrap().succeeded(), 4);
    let result = run
        .result(db.pool(), Wait::up_to(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(result.upper, "IN A BOX");
    db.close().await.unwrap();
}
