//! Factories shared by the integration tests.

use std::time::Duration;

use runledger_engine::core::jobs::JobId;
use runledger_engine::postgres::jobs::{
    ClaimRequest, ClaimedJob, JobDefinition, JobDefinitionUpsert, JobEnqueue, claim_jobs,
    enqueue_job, upsert_job_definition,
};
use serde_json::{Value, json};
use sqlx::PgPool;

/// The worker id most tests claim with.
pub const WORKER: &str = "worker-a";
/// A lease long enough that it never expires during a test.
pub const LONG_LEASE: Duration = Duration::from_secs(300);

/// Settings for [`define`].
pub struct DefinitionOpts {
    pub max_attempts: i32,
    pub retry_base_delay_ms: i64,
    pub retry_max_delay_ms: i64,
    pub priority: i32,
    pub enabled: bool,
}

impl Default for DefinitionOpts {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            retry_base_delay_ms: 1_000,
            retry_max_delay_ms: 60_000,
            priority: 0,
            enabled: true,
        }
    }
}

/// Upserts a definition for `job_type` with `opts`.
pub async fn define(pool: &PgPool, job_type: &str, opts: DefinitionOpts) -> JobDefinition {
    upsert_job_definition(
        pool,
        &JobDefinitionUpsert::new(job_type)
            .max_attempts(opts.max_attempts)
            .retry_delays_ms(opts.retry_base_delay_ms, opts.retry_max_delay_ms)
            .priority(opts.priority)
            .enabled(opts.enabled),
    )
    .await
    .unwrap()
}

/// Defines `job_type` with defaults and enqueues one job with `payload`.
pub async fn insert_job(pool: &PgPool, job_type: &str, payload: Value) -> JobId {
    enqueue_job(pool, &JobEnqueue::new(job_type, &payload))
        .await
        .unwrap()
        .id
}

/// Defines `test.job` and enqueues one job of it; returns its id.
pub async fn one_job(pool: &PgPool) -> JobId {
    define(pool, "test.job", DefinitionOpts::default()).await;
    insert_job(pool, "test.job", json!({"n": 1})).await
}

/// Claims up to `limit` jobs of any type as `worker` with a long lease.
pub async fn claim(pool: &PgPool, worker: &str, limit: i64) -> Vec<ClaimedJob> {
    claim_jobs(pool, &ClaimRequest::new(worker, limit, LONG_LEASE))
        .await
        .unwrap()
}

/// Claims exactly one job as [`WORKER`].
pub async fn claim_one(pool: &PgPool) -> ClaimedJob {
    let mut jobs = claim(pool, WORKER, 1).await;
    assert_eq!(jobs.len(), 1, "expected one claimable job");
    jobs.remove(0)
}

/// Makes a leased job's lease already expired.
pub async fn expire_lease(pool: &PgPool, job_id: JobId) {
    sqlx::query(
        "UPDATE runledger.job_queue SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
    )
    .bind(job_id.0)
    .execute(pool)
    .await
    .unwrap();
}

/// Makes a pending job due now (skips a retry delay).
pub async fn make_due(pool: &PgPool, job_id: JobId) {
    sqlx::query("UPDATE runledger.job_queue SET next_run_at = now() WHERE id = $1")
        .bind(job_id.0)
        .execute(pool)
        .await
        .unwrap();
}

/// Counts rows of a `runledger` table for one job.
pub async fn count_rows(pool: &PgPool, table: &str, job_id: JobId) -> i64 {
    let sql = format!("SELECT count(*) FROM runledger.{table} WHERE job_id = $1");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(job_id.0)
        .fetch_one(pool)
        .await
        .unwrap()
}
