//! Named queues, global concurrency limits across workers, and paused queues.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runledger_engine::core::jobs::{JobCompletion, JobDefaults};
use runledger_engine::postgres::jobs::{
    ClaimRequest, JobDefinitionUpsert, claim_jobs, claim_limited_jobs, pause_queue, resume_queue,
    set_queue_global_concurrency, upsert_job_definition,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use runledger_engine::runtime::queues::QueueConcurrency;
use sqlx::PgPool;

use crate::support::{LONG_LEASE, WORKER, enqueue_many, fast_config, handler, wait_for_status};

/// When each handler started and ended, in this process.
pub type Spans = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// Most spans overlapping at any instant.
pub fn max_overlap(spans: &[(Instant, Instant)]) -> usize {
    let mut edges: Vec<(Instant, i32)> = spans
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // At one instant, an end comes before a start: touching spans do not overlap.
    edges.sort();
    let (mut running, mut most) = (0_i32, 0_i32);
    for (_, step) in edges {
        running += step;
        most = most.max(running);
    }
    usize::try_from(most).unwrap_or_default()
}

/// Adds to `catalog` a `job_type` whose handler sleeps `hold` and records its span in `spans`.
pub fn timed(
    catalog: JobCatalog,
    job_type: &'static str,
    defaults: JobDefaults,
    hold: Duration,
    spans: &Spans,
) -> JobCatalog {
    let spans = Arc::clone(spans);
    catalog.job_with_definition_overrides(
        job_type,
        handler(job_type, move |_, _| {
            let spans = Arc::clone(&spans);
            async move {
                let start = Instant::now();
                tokio::time::sleep(hold).await;
                spans.lock().unwrap().push((start, Instant::now()));
                Ok(JobCompletion::success())
            }
        }),
        defaults,
    )
}

/// Runs `catalog` on two Supervisors of 8 slots each until `expected` jobs succeeded.
async fn run_on_two_supervisors(pool: &PgPool, catalog: &JobCatalog, expected: i64) {
    let supervisors: Vec<_> = ["limits-a", "limits-b"]
        .into_iter()
        .map(|worker| {
            let mut config = fast_config(worker);
            config.max_global_concurrency = 8;
            Supervisor::builder(pool, config)
                .unwrap()
                .with_catalog(catalog)
                .build()
                .unwrap()
        })
        .collect();
    wait_for_status(pool, "SUCCEEDED", expected, Duration::from_secs(60)).await;
    for supervisor in supervisors {
        supervisor
            .shutdown_with_timeout(Duration::from_secs(10))
            .await
            .unwrap();
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_queue_limit_holds_across_two_supervisors(pool: PgPool) {
    let spans = Spans::default();
    let catalog = timed(
        JobCatalog::new(),
        "reports.render",
        JobDefaults::new().queue("reports"),
        Duration::from_millis(150),
        &spans,
    );
    catalog.sync_definitions(&pool).await.unwrap();
    set_queue_global_concurrency(&pool, "reports", Some(2))
        .await
        .unwrap();
    enqueue_many(&pool, "reports.render", 12).await;

    run_on_two_supervisors(&pool, &catalog, 12).await;

    let spans = spans.lock().unwrap();
    assert_eq!(spans.len(), 12);
    let most = max_overlap(&spans);
    eprintln!("queue limit 2, two supervisors of 8 slots: at most {most} handlers at once");
    assert_eq!(
        most, 2,
        "never more than the queue's limit, and the limit is used"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_job_type_limit_holds_across_two_supervisors_while_other_types_run_in_parallel(
    pool: PgPool,
) {
    let limited = Spans::default();
    let free = Spans::default();
    let catalog = timed(
        JobCatalog::new(),
        "exports.build",
        JobDefaults::new().global_concurrency(1),
        Duration::from_millis(100),
        &limited,
    );
    let catalog = timed(
        catalog,
        "thumbnails.make",
        JobDefaults::new(),
        Duration::from_millis(300),
        &free,
    );
    catalog.sync_definitions(&pool).await.unwrap();
    enqueue_many(&pool, "exports.build", 6).await;
    enqueue_many(&pool, "thumbnails.make", 8).await;

    run_on_two_supervisors(&pool, &catalog, 14).await;

    let (limited, free) = (limited.lock().unwrap(), free.lock().unwrap());
    let most = max_overlap(&limited);
    eprintln!(
        "job type limit 1, two supervisors: at most {most} at once; unlimited type: at most {}",
        max_overlap(&free)
    );
    assert_eq!(most, 1, "one job of the limited type at a time");
    assert!(
        max_overlap(&free) >= 4,
        "jobs without a limit run in parallel"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_worker_runs_only_the_queues_it_serves_each_within_its_own_concurrency(pool: PgPool) {
    let emails = Spans::default();
    let reports = Spans::default();
    let catalog = timed(
        JobCatalog::new(),
        "emails.send",
        JobDefaults::new().queue("emails"),
        Duration::from_millis(100),
        &emails,
    );
    let catalog = timed(
        catalog,
        "reports.render",
        JobDefaults::new().queue("reports"),
        Duration::from_millis(10),
        &reports,
    );
    catalog.sync_definitions(&pool).await.unwrap();
    enqueue_many(&pool, "emails.send", 4).await;
    enqueue_many(&pool, "reports.render", 3).await;

    let mut config = fast_config("emails-only");
    config.queues = vec![QueueConcurrency::new("emails", 1)];
    let supervisor = Supervisor::builder(&pool, config)
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 4, Duration::from_secs(30)).await;
    supervisor
        .shutdown_with_timeout(Duration::from_secs(10))
        .await
        .unwrap();

    assert_eq!(
        max_overlap(&emails.lock().unwrap()),
        1,
        "the queue's own concurrency"
    );
    assert!(
        reports.lock().unwrap().is_empty(),
        "a queue it does not serve"
    );
    let pending: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT queue FROM runledger.job_queue WHERE status = 'PENDING'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(pending, vec!["reports".to_owned()]);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn jobs_of_a_paused_queue_stay_pending_until_it_is_resumed(pool: PgPool) {
    upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("emails.send").values(JobDefaults::new().queue("emails")),
    )
    .await
    .unwrap();
    enqueue_many(&pool, "emails.send", 2).await;
    let request = ClaimRequest::new(WORKER, 10, LONG_LEASE);

    let paused = pause_queue(&pool, "emails").await.unwrap();
    assert!(paused.is_paused);
    assert!(claim_jobs(&pool, &request).await.unwrap().is_empty());

    let resumed = resume_queue(&pool, "emails").await.unwrap();
    assert!(!resumed.is_paused);
    let claimed = claim_jobs(&pool, &request).await.unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(claimed.iter().all(|job| job.queue == "emails"));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_limit_set_after_enqueue_applies_to_pending_jobs_and_blocked_jobs_spend_no_attempt(
    pool: PgPool,
) {
    upsert_job_definition(&pool, &JobDefinitionUpsert::new("reports.render"))
        .await
        .unwrap();
    enqueue_many(&pool, "reports.render", 3).await;
    set_queue_global_concurrency(&pool, "default", Some(1))
        .await
        .unwrap();
    let request = ClaimRequest::new(WORKER, 10, LONG_LEASE);

    assert!(
        claim_jobs(&pool, &request).await.unwrap().is_empty(),
        "limited jobs are left to the limited claim"
    );
    let first = claim_limited_jobs(&pool, &request).await.unwrap();
    assert_eq!(first.len(), 1, "the limit is 1");
    assert!(
        claim_limited_jobs(&pool, &request)
            .await
            .unwrap()
            .is_empty()
    );
    let attempts: Vec<i32> = sqlx::query_scalar(
        "SELECT attempt FROM runledger.job_queue WHERE status = 'PENDING' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(attempts, vec![0, 0], "blocked jobs spent no attempt");

    // Removing the limit hands the rest back to the ordinary claim.
    set_queue_global_concurrency(&pool, "default", None)
        .await
        .unwrap();
    assert_eq!(claim_jobs(&pool, &request).await.unwrap().len(), 2);
    let leased: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue WHERE status = 'LEASED'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(leased, 3);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn invalid_queue_names_and_limits_are_refused_with_stable_codes(pool: PgPool) {
    let err = pause_queue(&pool, " ").await.unwrap_err();
    assert_eq!(err.code(), "job.invalid_queue");
    let err = set_queue_global_concurrency(&pool, "emails", Some(0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job.invalid_global_concurrency");
    let err = upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("emails.send").values(JobDefaults::new().global_concurrency(0)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "job_definition.invalid_global_concurrency");
}
