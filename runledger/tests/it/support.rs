//! Shared setup: a fast worker and deadline-bounded waits.

use std::time::{Duration, Instant};

use runledger::engine::postgres::jobs::TenantScope;
use runledger::engine::runtime::config::JobsConfig;
use runledger::{RunningWorker, Worker, WorkerBuilder};
use sqlx::PgPool;

pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// A worker with short poll and reaper intervals (the schema is already migrated by
/// `sqlx::test`; `SchemaMode::Migrate` finds nothing to apply).
pub(crate) async fn start_worker(pool: &PgPool) -> RunningWorker {
    worker_builder(pool).build().unwrap().start().await.unwrap()
}

/// The builder of [`start_worker`]'s worker, for tests that add to it.
pub(crate) fn worker_builder(pool: &PgPool) -> WorkerBuilder {
    let config = JobsConfig::from_lookup(|name| match name {
        "JOBS_POLL_INTERVAL_MS" => Some("50".to_owned()),
        "JOBS_SCHEDULE_POLL_INTERVAL_SECONDS" => Some("1".to_owned()),
        "JOBS_REAPER_INTERVAL_SECONDS" => Some("1".to_owned()),
        _ => None,
    })
    .unwrap();
    Worker::builder(pool)
        .config(config)
        .shutdown_deadline(Duration::from_secs(10))
}

/// Polls `probe` until it returns `Some`, failing after [`WAIT`].
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The status and last error code of a job.
pub(crate) async fn job_state(
    pool: &PgPool,
    id: runledger::engine::core::jobs::JobId,
) -> (String, Option<String>) {
    let record = runledger::engine::postgres::jobs::get_job_by_id(pool, id, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    (record.status.as_str().to_owned(), record.last_error_code)
}
