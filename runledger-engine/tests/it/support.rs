//! Factories shared by the integration tests.

use std::time::Duration;

use runledger_engine::core::jobs::JobId;
use runledger_engine::postgres::jobs::{
    ClaimRequest, ClaimedJob, JobDefinition, JobDefinitionUpsert, JobEnqueue, JobSuccess,
    TenantScope, claim_jobs, enqueue_job, enqueue_jobs, upsert_job_definition,
};
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

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

/// A success without output for each claimed job.
pub fn successes_of(claimed: &[ClaimedJob]) -> Vec<JobSuccess> {
    claimed
        .iter()
        .map(|job| JobSuccess {
            job_id: job.id,
            attempt: job.attempt,
            output: None,
            progress: None,
        })
        .collect()
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

/// A handler made from a closure, for runtime tests.
pub struct FnHandler<F> {
    job_type: &'static str,
    run: F,
}

/// Wraps `run` as the handler of `job_type`.
pub fn handler<F, Fut>(job_type: &'static str, run: F) -> FnHandler<F>
where
    F: Fn(runledger_engine::core::jobs::JobContext, Value) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<
            Output = Result<
                runledger_engine::core::jobs::JobCompletion,
                runledger_engine::core::jobs::JobFailure,
            >,
        > + Send
        + 'static,
{
    FnHandler { job_type, run }
}

#[async_trait::async_trait]
impl<F, Fut> runledger_engine::core::jobs::JobHandler for FnHandler<F>
where
    F: Fn(runledger_engine::core::jobs::JobContext, Value) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<
            Output = Result<
                runledger_engine::core::jobs::JobCompletion,
                runledger_engine::core::jobs::JobFailure,
            >,
        > + Send
        + 'static,
{
    fn job_type(&self) -> runledger_engine::core::jobs::JobType<'static> {
        runledger_engine::core::jobs::JobType::new(self.job_type)
    }

    async fn execute(
        &self,
        context: runledger_engine::core::jobs::JobContext,
        payload: Value,
    ) -> Result<runledger_engine::core::jobs::JobCompletion, runledger_engine::core::jobs::JobFailure>
    {
        (self.run)(context, payload).await
    }
}

/// A pool of its own on the test's database allowing `max` connections: the test's pool holds
/// 5, fewer than a Supervisor's loops may hold at once (see `connections_used`).
pub async fn pool_of(pool: &PgPool, max: u32) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max)
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap()
}

/// A config for runtime tests: fast polling, the minimum lease, a fast reaper.
pub fn fast_config(worker_id: &str) -> runledger_engine::runtime::config::JobsConfig {
    runledger_engine::runtime::config::JobsConfig::from_lookup(|name| match name {
        "JOBS_WORKER_ID" => Some(worker_id.to_owned()),
        "JOBS_POLL_INTERVAL_MS" => Some("50".to_owned()),
        "JOBS_LEASE_TTL_SECONDS" => Some("10".to_owned()),
        "JOBS_REAPER_INTERVAL_SECONDS" => Some("1".to_owned()),
        "JOBS_REAPER_RETRY_DELAY_MS" => Some("0".to_owned()),
        _ => None,
    })
    .unwrap()
}

/// Enqueues `count` jobs of `job_type` (payloads `{"n": 0}`, `{"n": 1}`, ...) in one statement.
pub async fn enqueue_many(pool: &PgPool, job_type: &str, count: usize) {
    let payloads: Vec<_> = (0..count).map(|n| json!({ "n": n })).collect();
    let requests: Vec<_> = payloads
        .iter()
        .map(|p| JobEnqueue::new(job_type, p))
        .collect();
    enqueue_jobs(pool, &requests).await.unwrap();
}

/// Counts jobs in `status`.
pub async fn count_status(pool: &PgPool, status: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue WHERE status = $1")
        .bind(status)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Polls until `count` jobs are in `status`, failing the test after `timeout`.
pub async fn wait_for_status(pool: &PgPool, status: &str, count: i64, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let now = count_status(pool, status).await;
        if now >= count {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {count} {status} jobs (have {now})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a job that must exist.
pub(crate) async fn job(
    pool: &PgPool,
    job_id: JobId,
) -> runledger_engine::postgres::jobs::JobRecord {
    runledger_engine::postgres::jobs::get_job_by_id(pool, job_id, TenantScope::Admin)
        .await
        .unwrap()
        .expect("job exists")
}

/// Counts every row of `runledger.job_queue`.
pub(crate) async fn count_jobs(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Records a retryable failure for `job` and returns what happened to it.
pub(crate) async fn fail_retryable(
    pool: &PgPool,
    job: &ClaimedJob,
) -> runledger_engine::postgres::jobs::JobFailureDisposition {
    runledger_engine::postgres::jobs::complete_job_failure(
        pool,
        &job.lease(),
        &runledger_engine::core::jobs::JobFailure::retryable("test.retryable", "try again"),
    )
    .await
    .unwrap()
}

/// Records a terminal failure for `job`, which dead-letters it at once.
pub(crate) async fn dead_letter(pool: &PgPool, job: &ClaimedJob) {
    let disposition = runledger_engine::postgres::jobs::complete_job_failure(
        pool,
        &job.lease(),
        &runledger_engine::core::jobs::JobFailure::terminal("test.terminal", "gave up"),
    )
    .await
    .unwrap();
    assert_eq!(
        disposition,
        runledger_engine::postgres::jobs::JobFailureDisposition::DeadLettered
    );
}

/// The event types of a job, oldest first.
pub(crate) async fn event_types(
    pool: &PgPool,
    job_id: JobId,
) -> Vec<runledger_engine::core::jobs::JobEventType> {
    runledger_engine::postgres::jobs::list_job_events(pool, job_id, TenantScope::Admin)
        .await
        .unwrap()
        .into_iter()
        .map(|event| event.event_type)
        .collect()
}

/// Makes `job_id` the job of a step in a new workflow run, with plain SQL (as the workflow
/// engine would); returns the run id and the step id.
pub(crate) async fn attach_to_workflow(pool: &PgPool, job_id: JobId) -> (uuid::Uuid, uuid::Uuid) {
    let run_id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO runledger.workflow_runs (workflow_type) VALUES ('test.workflow') RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let step_id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO runledger.workflow_steps (workflow_run_id, step_key, job_type, status, job_id)
         SELECT $1, 'step-a', job_type, 'ENQUEUED', id FROM runledger.job_queue WHERE id = $2
         RETURNING id",
    )
    .bind(run_id)
    .bind(job_id.0)
    .fetch_one(pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE runledger.job_queue SET workflow_run_id = $1, workflow_step_id = $2 WHERE id = $3",
    )
    .bind(run_id)
    .bind(step_id)
    .bind(job_id.0)
    .execute(pool)
    .await
    .unwrap();
    (run_id, step_id)
}

/// The channel and payload of the next notification, failing the test after five seconds
/// without one.
pub async fn next_notification(listener: &mut PgListener) -> (String, String) {
    let notification = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("no notification within 5 seconds")
        .unwrap();
    (
        notification.channel().to_owned(),
        notification.payload().to_owned(),
    )
}

/// The payload of the next notification, which must be on the job queue channel.
pub async fn next_notification_payload(listener: &mut PgListener) -> String {
    let (channel, payload) = next_notification(listener).await;
    assert_eq!(channel, runledger_engine::postgres::jobs::JOB_QUEUE_CHANNEL);
    payload
}

/// Rows of `runledger.<table>` that scans read in the current transaction: fetched through an
/// index or read sequentially.
pub async fn rows_read(conn: &mut sqlx::PgConnection, table: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT idx_tup_fetch + seq_tup_read FROM pg_stat_xact_user_tables
         WHERE schemaname = 'runledger' AND relname = $1",
    )
    .bind(table)
    .fetch_one(conn)
    .await
    .unwrap()
}
