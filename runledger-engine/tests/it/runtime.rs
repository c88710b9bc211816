//! The Supervisor with real handlers: outcomes, limits, shutdown, observers, recovery.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runledger_engine::core::jobs::{JobCompletion, JobFailure, JobStatus};
use runledger_engine::postgres::jobs::{TenantScope, get_job_by_id, list_job_attempts};
use runledger_engine::runtime::catalog::JobCatalog;
use runledger_engine::runtime::observer::{
    JobFailedEvent, JobLifecycleObserver, JobRunningEvent, JobSucceededEvent,
};
use runledger_engine::runtime::{RuntimeError, Supervisor};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{
    DefinitionOpts, count_status, define, enqueue_many, fast_config, handler, insert_job, job,
    wait_for_status,
};

const WAIT: Duration = Duration::from_secs(30);

fn start(pool: &PgPool, catalog: &JobCatalog, worker: &str) -> Supervisor {
    Supervisor::builder(pool, fast_config(worker))
        .unwrap()
        .with_catalog(catalog)
        .build()
        .unwrap()
}

/// A Supervisor polling once an hour: only notifications bring it jobs in a test's time.
fn start_listening(pool: &PgPool, catalog: &JobCatalog, worker: &str) -> Supervisor {
    let mut config = fast_config(worker);
    config.poll_interval = Duration::from_secs(3_600);
    Supervisor::builder(pool, config)
        .unwrap()
        .with_catalog(catalog)
        .build()
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn supervisor_runs_a_job_to_success_and_stores_its_output(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "math.double",
        handler("math.double", |_, payload| async move {
            let n = payload["n"].as_i64().unwrap_or_default();
            Ok(JobCompletion::with_output(json!({ "doubled": n * 2 })))
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let job = insert_job(&pool, "math.double", json!({"n": 21})).await;

    let supervisor = start(&pool, &catalog, "w-success");
    wait_for_status(&pool, "SUCCEEDED", 1, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, JobStatus::Succeeded);
    assert_eq!(record.output, Some(json!({"doubled": 42})));
    let attempts = list_job_attempts(&pool, job, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].worker_id, "w-success");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn retryable_failure_is_retried_then_succeeds(pool: PgPool) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let catalog = JobCatalog::new().job(
        "flaky",
        handler("flaky", move |ctx, _| {
            let seen = Arc::clone(&seen);
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                if ctx.attempt < 3 {
                    Err(JobFailure::retryable("flaky.again", "not yet"))
                } else {
                    Ok(JobCompletion::success())
                }
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    define(
        &pool,
        "flaky",
        DefinitionOpts {
            max_attempts: 5,
            retry_base_delay_ms: 1,
            retry_max_delay_ms: 1,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let job = insert_job(&pool, "flaky", json!({})).await;

    let supervisor = start(&pool, &catalog, "w-retry");
    wait_for_status(&pool, "SUCCEEDED", 1, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let attempts = list_job_attempts(&pool, job, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[0].error_code.as_deref(), Some("flaky.again"));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn job_failing_every_attempt_is_dead_lettered_after_max_attempts(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "doomed",
        handler("doomed", |_, _| async {
            Err::<JobCompletion, _>(JobFailure::retryable("doomed.fail", "always fails"))
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    define(
        &pool,
        "doomed",
        DefinitionOpts {
            max_attempts: 2,
            retry_base_delay_ms: 1,
            retry_max_delay_ms: 1,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let job = insert_job(&pool, "doomed", json!({"keep": "me"})).await;

    let supervisor = start(&pool, &catalog, "w-dead");
    wait_for_status(&pool, "DEAD_LETTERED", 1, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.attempts_used, 2);
    assert_eq!(record.payload, json!({"keep": "me"}));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn handler_exceeding_its_timeout_fails_with_timeout_and_is_retried(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "slow",
        handler("slow", |ctx, _| async move {
            if ctx.attempt == 1 {
                tokio::time::sleep(Duration::from_secs(600)).await;
            }
            Ok(JobCompletion::success())
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    runledger_engine::postgres::jobs::upsert_job_definition(
        &pool,
        &runledger_engine::postgres::jobs::JobDefinitionUpsert::new("slow")
            .timeout_seconds(1)
            .retry_delays_ms(1, 1),
    )
    .await
    .unwrap();
    let job = insert_job(&pool, "slow", json!({})).await;

    let supervisor = start(&pool, &catalog, "w-timeout");
    wait_for_status(&pool, "SUCCEEDED", 1, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let attempts = list_job_attempts(&pool, job, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        attempts[0].failure_kind,
        Some(runledger_engine::core::jobs::JobFailureKind::Timeout)
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn panicking_job_is_dead_lettered_and_other_jobs_still_run(pool: PgPool) {
    let catalog = JobCatalog::new()
        .job(
            "explode",
            handler("explode", |_, _| async {
                if true {
                    panic!("boom");
                }
                Ok(JobCompletion::success())
            }),
        )
        .job(
            "fine",
            handler("fine", |_, _| async { Ok(JobCompletion::success()) }),
        );
    catalog.sync_definitions(&pool).await.unwrap();
    let bad = insert_job(&pool, "explode", json!({})).await;
    for n in 0..20 {
        insert_job(&pool, "fine", json!({ "n": n })).await;
    }

    let supervisor = start(&pool, &catalog, "w-panic");
    wait_for_status(&pool, "SUCCEEDED", 20, WAIT).await;
    wait_for_status(&pool, "DEAD_LETTERED", 1, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let attempts = list_job_attempts(&pool, bad, TenantScope::Admin)
        .await
        .unwrap();
    assert_eq!(
        attempts[0].failure_kind,
        Some(runledger_engine::core::jobs::JobFailureKind::Panicked)
    );
    assert!(
        attempts[0]
            .error_message
            .as_deref()
            .unwrap_or_default()
            .contains("boom")
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn running_handlers_never_exceed_max_global_concurrency(pool: PgPool) {
    let current = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let (c, p) = (Arc::clone(&current), Arc::clone(&peak));
    let catalog = JobCatalog::new().job(
        "bounded",
        handler("bounded", move |_, _| {
            let (current, peak) = (Arc::clone(&c), Arc::clone(&p));
            async move {
                let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                current.fetch_sub(1, Ordering::SeqCst);
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    enqueue_many(&pool, "bounded", 200).await;
    drain(&pool, &catalog, "w-bounded", 4, 200).await;

    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "peak concurrency {peak} exceeded the limit of 4");
    assert!(
        peak >= 2,
        "expected jobs to run concurrently, peak was {peak}"
    );
}

/// Runs `catalog` on a Supervisor with `concurrency` slots and a claim batch of 16 until
/// `jobs` jobs succeeded.
async fn drain(pool: &PgPool, catalog: &JobCatalog, worker: &str, concurrency: u32, jobs: i64) {
    drain_claiming(pool, catalog, worker, concurrency, 16, jobs).await;
}

/// [`drain`] with a claim batch of `batch`.
async fn drain_claiming(
    pool: &PgPool,
    catalog: &JobCatalog,
    worker: &str,
    concurrency: u32,
    batch: u32,
    jobs: i64,
) {
    let mut config = fast_config(worker);
    config.max_global_concurrency = concurrency;
    config.claim_batch_size = batch;
    let supervisor = Supervisor::builder(pool, config)
        .unwrap()
        .with_catalog(catalog)
        .build()
        .unwrap();
    wait_for_status(pool, "SUCCEEDED", jobs, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn short_handlers_are_claimed_ahead_of_free_slots_and_still_run_within_the_concurrency(
    pool: PgPool,
) {
    let current = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let (c, p) = (Arc::clone(&current), Arc::clone(&peak));
    let catalog = JobCatalog::new().job(
        "short",
        handler("short", move |_, _| {
            let (current, peak) = (Arc::clone(&c), Arc::clone(&p));
            async move {
                let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                current.fetch_sub(1, Ordering::SeqCst);
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    enqueue_many(&pool, "short", 400).await;

    drain(&pool, &catalog, "w-ahead", 4, 400).await;

    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "peak concurrency {peak} exceeded the limit of 4");
    // Some claims took more jobs than the lane has slots, the rest waiting for a slot in
    // memory.
    let largest = largest_claim(&pool).await;
    assert!(
        largest > 4,
        "no claim took more than the 4 free slots (largest {largest})"
    );
}

/// The most jobs one claim leased: the jobs of a claim share its lease time.
async fn largest_claim(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM runledger.job_queue GROUP BY leased_at) c",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn short_handlers_are_claimed_ahead_up_to_four_slots_worth_within_the_batch(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "short_many",
        handler("short_many", |_, _| async {
            tokio::task::yield_now().await;
            Ok(JobCompletion::success())
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    enqueue_many(&pool, "short_many", 600).await;

    // 4 slots and a claim batch of 64: each of the two claim loops aims at 2 free slots, and
    // the lane holds at most 16 jobs (four slots' worth) claimed ahead of its slots.
    drain_claiming(&pool, &catalog, "w-ahead-bound", 4, 64, 600).await;

    let largest = largest_claim(&pool).await;
    // Holding only one slot's worth ahead, no claim took more than 2 + 4 jobs.
    assert!(
        largest > 8,
        "no claim held more than one slot's worth ahead (largest {largest})"
    );
    // A claim reserves at most its loop's 2 slots and the lane's 16 places ahead.
    assert!(
        largest <= 2 + 16,
        "a claim held more than four slots' worth ahead (largest {largest})"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn long_handlers_are_never_claimed_ahead_of_free_slots(pool: PgPool) {
    // How long each job waited between its lease and its handler's start: a job claimed ahead
    // waits for a slot, here for a whole handler's run.
    let waits = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&waits);
    let catalog = JobCatalog::new().job(
        "long",
        handler("long", move |ctx, _| {
            let recorded = Arc::clone(&recorded);
            async move {
                let leased_at = ctx.lease_expires_at.unwrap() - chrono::Duration::seconds(10);
                recorded
                    .lock()
                    .unwrap()
                    .push(chrono::Utc::now() - leased_at);
                tokio::time::sleep(Duration::from_millis(150)).await;
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    enqueue_many(&pool, "long", 8).await;

    drain(&pool, &catalog, "w-no-ahead", 2, 8).await;
    let waits = waits.lock().unwrap();
    assert_eq!(waits.len(), 8);
    let longest = waits.iter().max().unwrap();
    assert!(
        *longest < chrono::Duration::milliseconds(100),
        "a job waited {longest} between its lease and its handler"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn graceful_shutdown_drains_in_flight_jobs_within_the_deadline(pool: PgPool) {
    let started = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&started);
    let catalog = JobCatalog::new().job(
        "drain",
        handler("drain", move |_, _| {
            let seen = Arc::clone(&seen);
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    for n in 0..3 {
        insert_job(&pool, "drain", json!({ "n": n })).await;
    }
    let supervisor = start(&pool, &catalog, "w-drain");
    wait_until(|| started.load(Ordering::SeqCst) == 3).await;

    supervisor
        .shutdown_with_timeout(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(count_status(&pool, "SUCCEEDED").await, 3);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn shutdown_past_the_deadline_aborts_handlers_and_reports_them(pool: PgPool) {
    let started = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (seen, flag) = (Arc::clone(&started), Arc::clone(&cancelled));
    let catalog = JobCatalog::new().job(
        "stuck",
        handler("stuck", move |ctx, _| {
            let seen = Arc::clone(&seen);
            watch_cancellation(&ctx, &flag);
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let job = insert_job(&pool, "stuck", json!({})).await;
    let supervisor = start(&pool, &catalog, "w-stuck");
    wait_until(|| started.load(Ordering::SeqCst) == 1).await;

    let began = Instant::now();
    let err = supervisor
        .shutdown_with_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(began.elapsed() < Duration::from_secs(10));
    match err {
        RuntimeError::ShutdownDeadlineExceeded { aborted_jobs } => {
            assert_eq!(aborted_jobs, vec![job]);
        }
        other => panic!("expected a deadline error, got {other:?}"),
    }
    // The attempt's cancellation token fired for what the handler started beyond its future.
    wait_until(|| cancelled.load(Ordering::SeqCst)).await;
    // The job keeps its lease until it expires; the reaper will hand it out again.
    assert_eq!(count_status(&pool, "LEASED").await, 1);
}

/// Sets `flag` from a task of its own once the attempt's cancellation token fires.
fn watch_cancellation(
    ctx: &runledger_engine::core::jobs::JobContext,
    flag: &Arc<std::sync::atomic::AtomicBool>,
) {
    let (token, flag) = (ctx.cancellation.clone(), Arc::clone(flag));
    tokio::spawn(async move {
        token.cancelled().await;
        flag.store(true, Ordering::SeqCst);
    });
}

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl JobLifecycleObserver for Recorder {
    fn on_job_running(&self, event: &JobRunningEvent) {
        self.0
            .lock()
            .unwrap()
            .push(format!("running {}", event.job.job_type));
    }
    fn on_job_succeeded(&self, event: &JobSucceededEvent) {
        self.0
            .lock()
            .unwrap()
            .push(format!("succeeded {}", event.job.job_type));
    }
    fn on_job_failed(&self, event: &JobFailedEvent) {
        self.0
            .lock()
            .unwrap()
            .push(format!("failed {}", event.job.job_type));
    }
}

struct SharedRecorder(Arc<Recorder>);

impl JobLifecycleObserver for SharedRecorder {
    fn on_job_running(&self, event: &JobRunningEvent) {
        self.0.on_job_running(event);
    }
    fn on_job_succeeded(&self, event: &JobSucceededEvent) {
        self.0.on_job_succeeded(event);
    }
    fn on_job_failed(&self, event: &JobFailedEvent) {
        self.0.on_job_failed(event);
    }
}

struct Panicker;

impl JobLifecycleObserver for Panicker {
    fn on_job_running(&self, _: &JobRunningEvent) {
        panic!("observer bug");
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn observers_see_running_before_the_terminal_event_and_panics_are_isolated(pool: PgPool) {
    let catalog = JobCatalog::new()
        .job(
            "ok",
            handler("ok", |_, _| async { Ok(JobCompletion::success()) }),
        )
        .job(
            "bad",
            handler("bad", |_, _| async {
                Err::<JobCompletion, _>(JobFailure::terminal("bad.input", "rejected"))
            }),
        );
    catalog.sync_definitions(&pool).await.unwrap();
    insert_job(&pool, "ok", json!({})).await;
    insert_job(&pool, "bad", json!({})).await;

    let recorder = Arc::new(Recorder::default());
    let supervisor = Supervisor::builder(&pool, fast_config("w-observed"))
        .unwrap()
        .with_catalog(&catalog)
        .with_job_lifecycle_observer(Panicker)
        .with_job_lifecycle_observer(SharedRecorder(Arc::clone(&recorder)))
        .build()
        .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 1, WAIT).await;
    wait_for_status(&pool, "DEAD_LETTERED", 1, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let events = recorder.0.lock().unwrap().clone();
    for job_type in ["ok", "bad"] {
        let running = events
            .iter()
            .position(|e| e == &format!("running {job_type}"));
        let terminal = events.iter().position(|e| {
            e == &format!("succeeded {job_type}") || e == &format!("failed {job_type}")
        });
        assert!(
            matches!((running, terminal), (Some(r), Some(t)) if r < t),
            "{job_type}: {events:?}"
        );
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn notification_wakes_an_idle_worker_long_before_its_poll_interval(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "wake",
        handler("wake", |_, _| async { Ok(JobCompletion::success()) }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let supervisor = start_listening(&pool, &catalog, "w-listen");
    // Let the worker finish its first (empty) claim and go idle on LISTEN.
    tokio::time::sleep(Duration::from_millis(300)).await;
    insert_job(&pool, "wake", json!({})).await;
    // With an hour-long poll interval only the notification can deliver this job in time.
    wait_for_status(&pool, "SUCCEEDED", 1, Duration::from_secs(20)).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_notification_of_a_job_holding_a_resource_key_wakes_an_idle_worker(pool: PgPool) {
    use runledger_engine::postgres::jobs::{JobEnqueue, enqueue_job};

    let catalog = JobCatalog::new().job(
        "print",
        handler("print", |_, _| async { Ok(JobCompletion::success()) }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let supervisor = start_listening(&pool, &catalog, "w-listen-gated");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let payload = json!({});
    enqueue_job(
        &pool,
        &JobEnqueue::new("print", &payload).resource_key("printer:lobby"),
    )
    .await
    .unwrap();
    // With an hour-long poll interval only the gated channel's notification can deliver it.
    wait_for_status(&pool, "SUCCEEDED", 1, Duration::from_secs(20)).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
}

/// The `application_name` of the connections whose claims [`claim_calls`] counts.
const COUNTED: &str = "runledger-counted-claims";

/// How many times the connections named [`COUNTED`] called `runledger.claim_jobs`, read once
/// they have all closed (a backend's function counts reach the statistics when it exits).
async fn claim_calls(pool: &PgPool) -> i64 {
    let mut last = -1;
    for _ in 0..100 {
        let (open, calls): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name = $1),
                    coalesce((SELECT calls FROM pg_stat_user_functions
                              WHERE schemaname = 'runledger' AND funcname = 'claim_jobs'), 0)",
        )
        .bind(COUNTED)
        .fetch_one(pool)
        .await
        .unwrap();
        if open == 0 && calls == last {
            return calls;
        }
        last = calls;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the counted connections did not close");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_job_picked_up_by_an_idle_worker_costs_no_empty_claim_of_its_own_loop(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "one.by.one",
        handler("one.by.one", |_, _| async { Ok(JobCompletion::success()) }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let options = (*pool.connect_options())
        .clone()
        .application_name(COUNTED)
        .options([("track_functions", "pl")]);
    let counted = sqlx::postgres::PgPoolOptions::new()
        .max_connections(20)
        .connect_with(options)
        .await
        .unwrap();
    let supervisor = start_listening(&counted, &catalog, "w-claims");
    tokio::time::sleep(Duration::from_millis(300)).await;
    const JOBS: i64 = 20;
    for n in 1..=JOBS {
        insert_job(&pool, "one.by.one", json!({ "n": n })).await;
        wait_for_status(&pool, "SUCCEEDED", n, Duration::from_secs(20)).await;
    }
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
    counted.close().await;

    // Per job, the claim that leases it; a few more while the worker starts. The loop for jobs
    // under limits is woken only by their own channel: it used to claim (and find nothing) for
    // every notification, two claims per job, and a claim that came back short used to be
    // followed at once by an empty one, three. The lower bound only shows that the calls were
    // counted at all.
    let claims = claim_calls(&pool).await;
    assert!(
        (JOBS..=JOBS + 8).contains(&claims),
        "{claims} claims for {JOBS} jobs picked up one at a time"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn builder_rejects_an_empty_registry_and_an_invalid_catalog(pool: PgPool) {
    let err = Supervisor::builder(&pool, fast_config("w"))
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(err.code(), "runtime.no_handlers");

    let catalog = JobCatalog::new()
        .job(
            "a",
            handler("a", |_, _| async { Ok(JobCompletion::success()) }),
        )
        .job(
            "a",
            handler("a", |_, _| async { Ok(JobCompletion::success()) }),
        );
    let err = Supervisor::builder(&pool, fast_config("w"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap_err();
    assert_eq!(err.code(), "catalog.duplicate_job_type");

    let err = Supervisor::builder(
        &pool,
        runledger_engine::runtime::config::JobsConfig::from_lookup(|name| {
            (name == "JOBS_POLL_INTERVAL_MS").then(|| "soon".to_owned())
        }),
    )
    .unwrap_err();
    assert_eq!(err.code(), "config.invalid_env_var");
}

async fn wait_until(condition: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "condition not reached in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct LeaseLostRecorder(Mutex<Vec<runledger_engine::core::jobs::JobId>>);

struct SharedLeaseLost(Arc<LeaseLostRecorder>);

impl JobLifecycleObserver for SharedLeaseLost {
    fn on_job_lease_lost(&self, event: &runledger_engine::runtime::JobLeaseLostEvent) {
        self.0.0.lock().unwrap().push(event.job.job_id);
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_lost_lease_stops_the_handler_and_is_reported(pool: PgPool) {
    let started = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (seen, flag, cancel_flag) = (
        Arc::clone(&started),
        Arc::clone(&dropped),
        Arc::clone(&cancelled),
    );
    let catalog = JobCatalog::new().job(
        "hold",
        handler("hold", move |ctx, _| {
            watch_cancellation(&ctx, &cancel_flag);
            let (seen, guard) = (Arc::clone(&seen), SetOnDrop(Arc::clone(&flag)));
            async move {
                let _guard = guard;
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let job = insert_job(&pool, "hold", json!({})).await;
    let lost = Arc::new(LeaseLostRecorder::default());
    let supervisor = Supervisor::builder(&pool, fast_config("w-loser"))
        .unwrap()
        .with_catalog(&catalog)
        .with_job_lifecycle_observer(SharedLeaseLost(Arc::clone(&lost)))
        .build()
        .unwrap();
    wait_until(|| started.load(Ordering::SeqCst) == 1).await;

    // Another worker now owns the lease (as after a reap and a re-claim elsewhere).
    sqlx::query("UPDATE runledger.job_queue SET worker_id = 'thief' WHERE id = $1")
        .bind(job.0)
        .execute(&pool)
        .await
        .unwrap();
    wait_until(|| dropped.load(Ordering::SeqCst)).await;
    wait_until(|| cancelled.load(Ordering::SeqCst)).await;
    wait_until(|| !lost.0.lock().unwrap().is_empty()).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    assert_eq!(*lost.0.lock().unwrap(), vec![job]);
    let record = get_job_by_id(&pool, job, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.worker_id.as_deref(),
        Some("thief"),
        "the loser wrote nothing"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn worker_claims_only_the_job_types_it_has_handlers_for(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "mine",
        handler("mine", |_, _| async { Ok(JobCompletion::success()) }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    define(&pool, "someone.else", DefinitionOpts::default()).await;
    let foreign = insert_job(&pool, "someone.else", json!({})).await;
    for n in 0..5 {
        insert_job(&pool, "mine", json!({ "n": n })).await;
    }
    let supervisor = start(&pool, &catalog, "w-picky");
    wait_for_status(&pool, "SUCCEEDED", 5, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();

    let record = get_job_by_id(&pool, foreign, TenantScope::Admin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, JobStatus::Pending);
    assert_eq!(record.attempt, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn worker_run_once_runs_one_batch_to_its_end_and_counts_it(pool: PgPool) {
    use runledger_engine::runtime::JobFailureDisposition;
    use runledger_engine::runtime::observer::JobLifecycleObservers;
    use runledger_engine::runtime::registry::JobRegistry;
    use runledger_engine::runtime::worker::{PassOutcome, WorkerConfig, WorkerLoop};

    let mut registry = JobRegistry::new();
    registry
        .register(handler(
            "once",
            |_, payload: serde_json::Value| async move {
                if payload["fail"] == json!(true) {
                    Err(JobFailure::terminal("once.bad", "asked to fail"))
                } else {
                    Ok(JobCompletion::success())
                }
            },
        ))
        .unwrap();
    define(&pool, "once", DefinitionOpts::default()).await;
    for fail in [false, false, true] {
        insert_job(&pool, "once", json!({ "fail": fail })).await;
    }
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-once")),
        JobLifecycleObservers::new(),
    )
    .unwrap();

    let pass = worker.run_once().await.unwrap();
    assert_eq!((pass.claimed, pass.succeeded, pass.failed), (3, 2, 1));
    let codes: Vec<Option<&str>> = pass
        .jobs
        .iter()
        .map(|done| match &done.outcome {
            PassOutcome::Succeeded => None,
            PassOutcome::Failed {
                code, disposition, ..
            } => {
                assert_eq!(*disposition, JobFailureDisposition::DeadLettered);
                Some(code.as_str())
            }
            other => panic!("unexpected outcome {other:?}"),
        })
        .collect();
    assert_eq!(codes.len(), 3, "every claimed job is reported once");
    assert_eq!(codes.iter().filter(|c| **c == Some("once.bad")).count(), 1);
    assert!(pass.jobs.iter().all(|done| done.job.job_type == "once"));
    assert_eq!(count_status(&pool, "SUCCEEDED").await, 2);
    assert_eq!(count_status(&pool, "DEAD_LETTERED").await, 1);
    assert_eq!(worker.run_once().await.unwrap().claimed, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn reaper_run_once_repeats_full_batches_until_every_expired_lease_is_back(pool: PgPool) {
    use runledger_engine::runtime::observer::JobLifecycleObservers;
    use runledger_engine::runtime::reaper::{Reaper, ReaperConfig};

    define(&pool, "reap", DefinitionOpts::default()).await;
    for n in 0..5 {
        insert_job(&pool, "reap", json!({ "n": n })).await;
    }
    crate::support::claim(&pool, "gone-worker", 5).await;
    sqlx::query("UPDATE runledger.job_queue SET lease_expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    let mut config = ReaperConfig::from_jobs_config(&fast_config("w-reaper"));
    config.batch_size = 2;
    let reaper = Reaper::new(pool.clone(), config, JobLifecycleObservers::new()).unwrap();

    let pass = reaper.run_once().await.unwrap();
    assert_eq!((pass.retried, pass.dead_lettered, pass.batches), (5, 0, 3));
    assert_eq!(count_status(&pool, "PENDING").await, 5);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_idle_worker_gives_its_claim_connections_back_to_the_pool(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "idle.job",
        handler("idle.job", |_, _| async { Ok(JobCompletion::success()) }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let supervisor = start(&pool, &catalog, "w-idle");
    // A few poll intervals (50 ms) with nothing to claim.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The LISTEN connection stays checked out; each claim loop takes one only for its poll
    // claims, and the other loops use the pool for moments. Most samples see at most two
    // connections in use (with three claim loops holding theirs, every sample saw four).
    let mut quiet = 0;
    for _ in 0..20 {
        let in_use = (pool.size() as usize).saturating_sub(pool.num_idle());
        if in_use <= 2 {
            quiet += 1;
        }
        tokio::time::sleep(Duration::from_millis(23)).await;
    }
    supervisor
        .shutdown_with_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(quiet >= 14, "only {quiet} of 20 samples saw an idle pool");
}

/// A success waits for the others of its batch only while they can still come: here a quick
/// job waits for a slow one claimed with it (both are written by one statement, so with one
/// `finished_at`), and that pair is written as soon as the slow one returns, long before the
/// hour the flush window would allow.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_batch_of_successes_waits_only_for_jobs_still_running(pool: PgPool) {
    use runledger_engine::runtime::observer::JobLifecycleObservers;
    use runledger_engine::runtime::registry::JobRegistry;
    use runledger_engine::runtime::worker::{WorkerConfig, WorkerLoop};

    define(&pool, "pair", DefinitionOpts::default()).await;
    let mut registry = JobRegistry::new();
    registry
        .register(handler(
            "pair",
            |_, payload: serde_json::Value| async move {
                if payload["slow"] == json!(true) {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Ok(JobCompletion::success())
            },
        ))
        .unwrap();
    let quick = insert_job(&pool, "pair", json!({ "slow": false })).await;
    let slow = insert_job(&pool, "pair", json!({ "slow": true })).await;
    let mut config = WorkerConfig::from_jobs_config(&fast_config("w-pair"));
    config.completion_flush_interval = Duration::from_secs(3600);
    // One claim loop: both jobs come in one claim.
    config.claim_parallelism = 1;
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        config,
        JobLifecycleObservers::new(),
    )
    .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running =
        tokio::spawn(worker.run(shutdown.clone(), tokio_util::sync::CancellationToken::new()));
    wait_for_status(&pool, "SUCCEEDED", 2, WAIT).await;
    shutdown.cancel();
    running.await.unwrap();

    let (quick_at, slow_at) = (
        job(&pool, quick).await.finished_at,
        job(&pool, slow).await.finished_at,
    );
    assert!(quick_at.is_some());
    assert_eq!(quick_at, slow_at, "both successes in one statement");
}
