//! The error types handlers return in practice, each a retryable failure with the error's
//! text. (The compile-time side, and what does not convert, is in ui-tests.)

use std::time::Duration;

use runledger::prelude::*;
use runledger::testing::{DrainOptions, drain_with, prepare};
use sqlx::PgPool;

#[job(name = "it.errors.boxed", max_attempts = 1)]
async fn boxed() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    Err("upstream timed out".into())
}

#[job(name = "it.errors.text", max_attempts = 1)]
async fn text(quota: u32) -> Result<(), String> {
    Err(format!("quota of {quota} exceeded"))
}

type IoResult<T> = std::result::Result<T, std::io::Error>;

#[job(name = "it.errors.alias", max_attempts = 1)]
async fn alias() -> IoResult<u8> {
    Err(std::io::Error::other("disk full"))
}

#[job(name = "it.errors.retried", max_attempts = 2)]
async fn retried(ctx: JobContext) -> Result<u32, String> {
    if ctx.attempt() == 1 {
        return Err("first attempt refused".to_owned());
    }
    Ok(ctx.attempt() as u32)
}

/// The (failure kind, code, message) of the job's first attempt.
async fn first_failure(
    pool: &PgPool,
    id: runledger::engine::core::jobs::JobId,
) -> (String, String, String) {
    sqlx::query_as::<_, (String, String, String)>(
        "SELECT failure_kind, error_code, error_message FROM runledger.job_attempts
         WHERE job_id = $1 ORDER BY attempt LIMIT 1",
    )
    .bind(id.0)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn boxed_errors_strings_and_result_aliases_fail_retryably_with_their_text(pool: PgPool) {
    prepare(&pool).await.unwrap();
    let boxed = Boxed {}.enqueue(&pool).await.unwrap();
    let text = Text { quota: 10 }.enqueue(&pool).await.unwrap();
    let alias = Alias {}.enqueue(&pool).await.unwrap();
    let retried = Retried {}.enqueue(&pool).await.unwrap();

    // Retryable: the second attempt runs once its backoff is skipped, and succeeds.
    let hour = Duration::from_secs(3_600);
    let report = drain_with(&pool, DrainOptions::new().include_delayed_for(hour))
        .await
        .unwrap();
    assert_eq!((report.dead_lettered(), report.retried()), (3, 1));
    for (id, message) in [
        (boxed.id(), "upstream timed out"),
        (text.id(), "quota of 10 exceeded"),
        (alias.id(), "disk full"),
    ] {
        let (kind, code, stored) = first_failure(&pool, id).await;
        assert_eq!(kind, "RETRYABLE", "{message}");
        assert_eq!(code, "job.handler_error");
        assert_eq!(stored, message);
    }
    assert_eq!(retried.output(&pool).await.unwrap(), Some(2));
}

#[cfg(feature = "anyhow")]
#[job(name = "it.errors.anyhow", max_attempts = 1)]
async fn with_anyhow() -> anyhow::Result<u32> {
    let parsed: u32 = "x"
        .parse()
        .map_err(|e| anyhow::Error::new(e).context("reading the count"))?;
    Ok(parsed)
}

#[cfg(feature = "anyhow")]
#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn anyhow_errors_fail_retryably_with_their_context_chain(pool: PgPool) {
    use runledger::testing::{DrainOutcome, drain};

    prepare(&pool).await.unwrap();
    let job = WithAnyhow {}.enqueue(&pool).await.unwrap();
    let report = drain(&pool).await.unwrap();
    let runs = report.runs_of::<WithAnyhow>();
    let [run] = runs.as_slice() else {
        panic!("one run expected: {runs:?}");
    };
    assert!(
        matches!(&run.outcome, DrainOutcome::DeadLettered { code, message, .. }
            if code == "job.handler_error"
                && message == "reading the count: invalid digit found in string"),
        "{:?}",
        run.outcome
    );
    let (kind, ..) = first_failure(&pool, job.id()).await;
    assert_eq!(kind, "RETRYABLE", "the last attempt of a retryable failure");
}
