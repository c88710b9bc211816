//! The handler's context under a worker: shared state, the attempt's cancellation token and
//! progress stored on the job.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use runledger::JobProgressUpdate;
use runledger::engine::core::jobs::JobId;
use runledger::engine::postgres::jobs::{TenantScope, get_job_by_id};
use runledger::prelude::*;
use sqlx::PgPool;
use tokio::sync::Notify;

use crate::support::{eventually, job_state, worker_builder};

/// Application state a worker shares with its handlers.
struct Greeter {
    greeting: String,
}

#[job(name = "it.context.greet")]
async fn greet(ctx: JobContext, name: String) -> Result<String, JobError> {
    let greeter = ctx.data::<Greeter>()?;
    Ok(format!("{}, {name}", greeter.greeting))
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn worker_data_reaches_every_handler_by_type(pool: PgPool) {
    let worker = worker_builder(&pool)
        .data(Greeter {
            greeting: "welcome".to_owned(),
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let job = Greet { name: "ada".into() }.enqueue(&pool).await.unwrap();
    let output = eventually("the greeting", || async {
        job.output(&pool).await.unwrap()
    })
    .await;
    assert_eq!(output, "welcome, ada");
    worker.shutdown().await.unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_handler_whose_data_was_not_given_dead_letters_with_data_missing(pool: PgPool) {
    let worker = worker_builder(&pool)
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let job = Greet { name: "ada".into() }.enqueue(&pool).await.unwrap();
    let state = eventually("the job to dead-letter", || async {
        let state = job_state(&pool, job.id()).await;
        (state.0 == "DEAD_LETTERED").then_some(state)
    })
    .await;
    assert_eq!(state.1.as_deref(), Some("job.data_missing"));
    let record = get_job_by_id(&pool, job.id(), TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert!(
        record
            .last_error_message
            .unwrap_or_default()
            .contains("Greeter"),
        "the message names the missing type"
    );
    worker.shutdown().await.unwrap();
}

/// Jobs whose cancellation token fired, as seen by the task each handler spawned.
fn canceled() -> &'static Mutex<HashSet<JobId>> {
    static CANCELED: OnceLock<Mutex<HashSet<JobId>>> = OnceLock::new();
    CANCELED.get_or_init(Default::default)
}

#[job(name = "it.context.stuck", timeout = "1s", max_attempts = 1)]
async fn stuck(ctx: JobContext) -> Result<(), JobError> {
    // Work started beyond the handler's own future stops when the attempt is abandoned.
    let (token, job_id) = (ctx.cancellation_token(), ctx.job_id());
    tokio::spawn(async move {
        token.cancelled().await;
        canceled().lock().unwrap().insert(job_id);
    });
    std::future::pending().await
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_handler_past_its_timeout_sees_its_cancellation_token_fire(pool: PgPool) {
    let worker = worker_builder(&pool)
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let job = Stuck {}.enqueue(&pool).await.unwrap();
    let state = eventually("the job to time out", || async {
        let state = job_state(&pool, job.id()).await;
        (state.0 == "DEAD_LETTERED").then_some(state)
    })
    .await;
    assert_eq!(state.1.as_deref(), Some("job.timeout"));
    eventually("the spawned task to see the cancellation", || async {
        canceled().lock().unwrap().contains(&job.id()).then_some(())
    })
    .await;
    worker.shutdown().await.unwrap();
}

/// Lets the importer finish once the test has seen its progress.
fn release() -> &'static Notify {
    static RELEASE: OnceLock<Notify> = OnceLock::new();
    RELEASE.get_or_init(Notify::new)
}

#[job(name = "it.context.import")]
async fn import(ctx: JobContext, rows: u64) -> Result<u64, JobError> {
    ctx.progress(
        JobProgressUpdate::new()
            .stage("import")
            .completed(rows / 2)
            .total(rows),
    )
    .await?;
    release().notified().await;
    Ok(rows)
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn progress_reported_by_a_running_handler_is_stored_on_the_job_row(pool: PgPool) {
    let worker = worker_builder(&pool)
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let job = Import { rows: 10 }.enqueue(&pool).await.unwrap();
    let record = eventually("the progress to be stored", || async {
        let record = get_job_by_id(&pool, job.id(), TenantScope::Admin)
            .await
            .unwrap()
            .unwrap();
        record.progress.is_some().then_some(record)
    })
    .await;
    assert_eq!(record.status.as_str(), "LEASED", "stored while it runs");
    assert_eq!(
        record.progress,
        Some(serde_json::json!({"stage": "import", "completed": 5, "total": 10}))
    );
    release().notify_one();
    let output = eventually("the import", || async { job.output(&pool).await.unwrap() }).await;
    assert_eq!(output, 10);
    worker.shutdown().await.unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn draining_through_a_worker_gives_handlers_its_data(pool: PgPool) {
    use runledger::testing::{DrainOptions, drain_worker};

    let worker = worker_builder(&pool)
        .data(Greeter {
            greeting: "hello".to_owned(),
        })
        .build()
        .unwrap();
    runledger::testing::prepare(&pool).await.unwrap();
    let job = Greet { name: "bob".into() }.enqueue(&pool).await.unwrap();
    let report = drain_worker(&worker, DrainOptions::new()).await.unwrap();
    assert_eq!(report.succeeded(), 1);
    assert_eq!(
        job.output(&pool).await.unwrap().as_deref(),
        Some("hello, bob")
    );
}
