//! The error types handlers return in practice, run by a worker: each is a retryable failure
//! with the error's text. (The compile-time side, and what does not convert, is in ui-tests.)

use runledger::prelude::*;
use sqlx::PgPool;

use crate::support::{eventually, start_worker};

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

/// The last attempt's (failure kind, code, message) once the job is dead-lettered.
async fn last_failure(
    pool: &PgPool,
    id: runledger::engine::core::jobs::JobId,
) -> (String, String, String) {
    eventually("the job to be dead-lettered", || async {
        sqlx::query_as::<_, (String, String, String)>(
            "SELECT a.failure_kind, a.error_code, a.error_message
             FROM runledger.job_attempts a JOIN runledger.job_queue q ON q.id = a.job_id
             WHERE a.job_id = $1 AND q.status = 'DEAD_LETTERED'",
        )
        .bind(id.0)
        .fetch_optional(pool)
        .await
        .unwrap()
    })
    .await
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn boxed_errors_strings_and_result_aliases_fail_retryably_with_their_text(pool: PgPool) {
    let worker = start_worker(&pool).await;
    let boxed = Boxed {}.enqueue(&pool).await.unwrap();
    let text = Text { quota: 10 }.enqueue(&pool).await.unwrap();
    let alias = Alias {}.enqueue(&pool).await.unwrap();
    let retried = Retried {}.enqueue(&pool).await.unwrap();

    for (id, message) in [
        (boxed.id(), "upstream timed out"),
        (text.id(), "quota of 10 exceeded"),
        (alias.id(), "disk full"),
    ] {
        let (kind, code, stored) = last_failure(&pool, id).await;
        assert_eq!(kind, "RETRYABLE", "{message}");
        assert_eq!(code, "job.handler_error");
        assert_eq!(stored, message);
    }
    // Retryable: the second attempt runs and succeeds.
    let output = eventually("the retried job to succeed", || async {
        retried.output(&pool).await.unwrap()
    })
    .await;
    assert_eq!(output, 2);
    worker.shutdown().await.unwrap();
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
    let worker = start_worker(&pool).await;
    let job = WithAnyhow {}.enqueue(&pool).await.unwrap();
    let (kind, code, message) = last_failure(&pool, job.id()).await;
    assert_eq!(
        (kind.as_str(), code.as_str()),
        ("RETRYABLE", "job.handler_error")
    );
    assert_eq!(message, "reading the count: invalid digit found in string");
    worker.shutdown().await.unwrap();
}
