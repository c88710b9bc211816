//! A worker never stalls silently and never leaves tasks behind: a pool too small to make
//! progress is refused up front, and dropping a Supervisor or finishing its shutdown (even one
//! that missed its deadline) stops every task it started.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use runledger_engine::core::jobs::JobCompletion;
use runledger_engine::postgres::open_connections;
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use runledger_engine::runtime::observer::{JobLifecycleObserver, JobSucceededEvent};
use runledger_engine::runtime::supervisor::connections_used;
use runledger_engine::runtime::worker::WorkerConfig;
use serde_json::json;
use sqlx::PgPool;

use crate::support::{fast_config, handler, insert_job, pool_of, wait_for_status};

const WAIT: Duration = Duration::from_secs(30);

fn quick_catalog() -> JobCatalog {
    JobCatalog::new().job(
        "quick",
        handler("quick", |_, _| async { Ok(JobCompletion::success()) }),
    )
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_pool_of_one_connection_is_refused_before_anything_starts(pool: PgPool) {
    let catalog = quick_catalog();
    let one = pool_of(&pool, 1).await;
    let err = Supervisor::builder(&one, fast_config("w-one"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap_err();
    assert_eq!(err.code(), "config.pool_too_small");
    assert!(err.to_string().contains("at least 2"), "{err}");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_smallest_accepted_pool_drains_the_queue(pool: PgPool) {
    let catalog = quick_catalog();
    catalog.sync_definitions(&pool).await.unwrap();
    for n in 0..300 {
        insert_job(&pool, "quick", json!({ "n": n })).await;
    }
    let two = pool_of(&pool, 2).await;
    let supervisor = Supervisor::builder(&two, fast_config("w-two"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 300, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
}

/// Tasks alive on this test's runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Waits until no more tasks are alive than `baseline`, failing after a deadline.
async fn wait_until_tasks_end(baseline: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while alive_tasks() > baseline {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} task(s) outlived the runtime that started them",
            alive_tasks() - baseline
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Quiet;

impl JobLifecycleObserver for Quiet {
    fn on_job_succeeded(&self, _: &JobSucceededEvent) {}
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn dropping_a_supervisor_stops_every_task_it_started(pool: PgPool) {
    let catalog = quick_catalog();
    catalog.sync_definitions(&pool).await.unwrap();
    insert_job(&pool, "quick", json!({})).await;
    let baseline = alive_tasks();
    let supervisor = Supervisor::builder(&pool, fast_config("w-dropped"))
        .unwrap()
        .with_catalog(&catalog)
        .with_job_lifecycle_observer(Quiet)
        .build()
        .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 1, WAIT).await;
    assert!(alive_tasks() > baseline);

    drop(supervisor);
    wait_until_tasks_end(baseline).await;
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_shutdown_that_misses_its_deadline_still_stops_every_task(pool: PgPool) {
    // A handler that blocks its thread between awaits, as careless code does: it cannot be
    // dropped in the middle of a block, so the worker misses even the hard stop's grace and
    // its loop is aborted.
    let started = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&started);
    let catalog = JobCatalog::new().job(
        "stuck",
        handler("stuck", move |_, _| {
            let flag = Arc::clone(&flag);
            async move {
                flag.store(true, Ordering::SeqCst);
                loop {
                    std::thread::sleep(Duration::from_millis(800));
                    tokio::task::yield_now().await;
                }
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    insert_job(&pool, "stuck", json!({})).await;
    // A pool of its own, sized for its loops: the handler blocks the runtime's only thread,
    // and the test's pool (5 connections) would leave its loops waiting for one another.
    let config = fast_config("w-stuck");
    let workers = pool_of(&pool, connections_used(&config)).await;
    let baseline = alive_tasks();
    let supervisor = Supervisor::builder(&workers, config)
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    // Shut down only once the handler runs: a leased status alone does not say so.
    let deadline = tokio::time::Instant::now() + WAIT;
    while !started.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the handler never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let err = supervisor
        .shutdown_with_timeout(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "runtime.shutdown_deadline_exceeded");
    // Nothing keeps running (in particular no LISTEN task retrying against a closed pool).
    wait_until_tasks_end(baseline).await;
    workers.close().await;
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_loops_connections_are_opened_before_they_start_and_left_idle(pool: PgPool) {
    let wanted =
        WorkerConfig::from_jobs_config(&fast_config("open-connections")).connections_used();
    let roomy = pool_of(&pool, wanted + 4).await;
    let small = pool_of(&pool, wanted - 2).await;
    let shared = pool_of(&pool, wanted).await;
    // The application holds two of the shared pool's connections throughout.
    let held = (
        shared.acquire().await.unwrap(),
        shared.acquire().await.unwrap(),
    );

    open_connections(&roomy, wanted).await;
    open_connections(&small, wanted).await;
    open_connections(&shared, wanted).await;

    // As many as the loops hold at once, never more than the pool has room for, all given back
    // (a dropped connection returns to its pool from a task of its own).
    for (pool, size, idle) in [
        (&roomy, wanted, wanted),
        (&small, wanted - 2, wanted - 2),
        (&shared, wanted, wanted - 2),
    ] {
        assert_eq!(pool.size(), size);
        let returned = tokio::time::timeout(WAIT, async {
            while pool.num_idle() < idle as usize {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        assert!(
            returned.await.is_ok(),
            "the opened connections stayed taken"
        );
    }
    drop(held);
}
