//! Crash and connection-loss recovery: nothing is lost, nothing is completed twice.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runledger_engine::core::jobs::{JobCompletion, JobId};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::support::{count_status, enqueue_many, fast_config, handler, wait_for_status};

const CHILD_DATABASE_URL: &str = "RUNLEDGER_CRASH_CHILD_DATABASE_URL";
const CHILD_WORKER: &str = "crash-child";

/// The URL of the test's own database, derived from `DATABASE_URL`.
async fn database_url(pool: &PgPool) -> String {
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL is set for tests");
    let base = base.split('?').next().unwrap_or_default();
    let (server, _) = base
        .rsplit_once('/')
        .expect("DATABASE_URL has a database name");
    format!("{server}/{name}")
}

/// Runs in a child process started by the crash test: a worker whose handlers take long
/// enough that it is holding leases when the parent kills it.
#[tokio::test]
#[ignore = "entry point of the child worker process that `leased_jobs_of_a_worker_killed_with_sigkill_are_recovered` starts and kills"]
async fn crash_test_child_worker() {
    let url = std::env::var(CHILD_DATABASE_URL).expect("started by the crash test");
    let pool = PgPool::connect(&url).await.unwrap();
    let catalog = JobCatalog::new().job(
        "crash.work",
        handler("crash.work", |_, _| async {
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok(JobCompletion::success())
        }),
    );
    let mut config = fast_config(CHILD_WORKER);
    config.max_global_concurrency = 8;
    let _supervisor = Supervisor::builder(&pool, config)
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    std::future::pending::<()>().await;
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn leased_jobs_of_a_worker_killed_with_sigkill_are_recovered(pool: PgPool) {
    let runs: Arc<Mutex<HashMap<JobId, usize>>> = Arc::default();
    let seen = Arc::clone(&runs);
    let catalog = JobCatalog::new().job(
        "crash.work",
        handler("crash.work", move |ctx, _| {
            let seen = Arc::clone(&seen);
            async move {
                *seen.lock().unwrap().entry(ctx.job_id).or_default() += 1;
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    enqueue_many(&pool, "crash.work", 40).await;

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "recovery::crash_test_child_worker",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DATABASE_URL, database_url(&pool).await)
        .spawn()
        .unwrap();
    wait_for_status(&pool, "LEASED", 8, Duration::from_secs(60)).await;
    child.kill().unwrap(); // SIGKILL: no shutdown, no lease release
    child.wait().unwrap();
    let held: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT id FROM runledger.job_queue WHERE status = 'LEASED' AND worker_id = $1",
    )
    .bind(CHILD_WORKER)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(held.len(), 8, "the killed worker held 8 leases");

    let supervisor = Supervisor::builder(&pool, fast_config("rescuer"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 40, Duration::from_secs(90)).await;
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await
        .unwrap();

    assert_eq!(count_status(&pool, "SUCCEEDED").await, 40, "no job lost");
    {
        let runs = runs.lock().unwrap();
        assert_eq!(runs.len(), 40);
        assert!(
            runs.values().all(|&n| n == 1),
            "each job ran once here: {runs:?}"
        );
    }
    let reaped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runledger.job_attempts
         WHERE worker_id = $1 AND failure_kind = 'LEASE_EXPIRED' AND job_id = ANY($2)",
    )
    .bind(CHILD_WORKER)
    .bind(&held)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(reaped, 8, "every lease of the killed worker was reaped");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn killing_the_workers_connections_mid_run_loses_and_duplicates_nothing(pool: PgPool) {
    const JOBS: usize = 1_000;
    let successes: Arc<Mutex<HashMap<JobId, usize>>> = Arc::default();
    let seen = Arc::clone(&successes);
    let catalog = JobCatalog::new().job(
        "conn.work",
        handler("conn.work", move |ctx, _| {
            let seen = Arc::clone(&seen);
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                *seen.lock().unwrap().entry(ctx.job_id).or_default() += 1;
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    enqueue_many(&pool, "conn.work", JOBS).await;

    let victim_options = (*pool.connect_options())
        .clone()
        .application_name("runledger-victim");
    let victim = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(victim_options)
        .await
        .unwrap();
    let mut config = fast_config("victim");
    config.max_global_concurrency = 16;
    config.claim_batch_size = 16;
    let supervisor = Supervisor::builder(&victim, config)
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();

    let mut kills = 0;
    for threshold in [150, 400, 700] {
        wait_for_status(&pool, "SUCCEEDED", threshold, Duration::from_secs(60)).await;
        let killed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE application_name = 'runledger-victim' AND pid <> pg_backend_pid()
             ) AS terminated",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        kills += killed;
    }
    assert!(kills > 0, "the test must actually kill connections");

    let deadline = Instant::now() + Duration::from_secs(120);
    while count_status(&pool, "SUCCEEDED").await < JOBS as i64 {
        assert!(
            Instant::now() < deadline,
            "not every job succeeded after connection loss"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    supervisor
        .shutdown_with_timeout(Duration::from_secs(30))
        .await
        .unwrap();

    let succeeded_attempts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runledger.job_attempt_history WHERE outcome = 'SUCCEEDED'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        succeeded_attempts, JOBS as i64,
        "one recorded success per job"
    );
    let successes = successes.lock().unwrap();
    assert_eq!(successes.len(), JOBS);
    assert!(
        successes.values().all(|&n| n == 1),
        "a handler ran twice: {:?}",
        successes
            .iter()
            .filter(|(_, n)| **n > 1)
            .collect::<Vec<_>>()
    );
}
