//! Unique keys: a singleton holds its key while it is queued (never started) or active
//! (pending or leased), a debounced job while it waits, a throttled job for its window; another
//! enqueue with the key returns the holder (a debounce replaces its payload), and the key is
//! free once the holder leaves.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use runledger_engine::core::jobs::{JobCompletion, JobId, JobStatus};
use runledger_engine::postgres::jobs::{
    EnqueueOutcome, EnqueuedJob, JobEnqueue, TenantScope, UniqueWhile, cancel_job,
    complete_job_success, enqueue_job, enqueue_jobs, requeue_job,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{DefinitionOpts, claim, define, fast_config, handler, wait_for_status};

const TYPE: &str = "singleton.job";

async fn enqueue_unique(pool: &PgPool, key: &str, scope: UniqueWhile) -> EnqueuedJob {
    let payload = json!({});
    enqueue_job(pool, &JobEnqueue::new(TYPE, &payload).unique(key, scope))
        .await
        .unwrap()
}

async fn refused(pool: &PgPool, request: JobEnqueue<'_>) -> &'static str {
    enqueue_job(pool, &request).await.unwrap_err().code()
}

async fn jobs_of_type(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM runledger.job_queue WHERE job_type = $1")
        .bind(TYPE)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_queued_singleton_dedupes_until_it_starts_then_one_more_may_wait(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let first = enqueue_unique(&pool, "index:products", UniqueWhile::Queued).await;
    assert!(first.created);
    let again = enqueue_unique(&pool, "index:products", UniqueWhile::Queued).await;
    assert_eq!((again.id, again.created), (first.id, false));

    // Another key, another organization: other singletons.
    assert!(
        enqueue_unique(&pool, "index:orders", UniqueWhile::Queued)
            .await
            .created
    );
    let payload = json!({});
    let tenant = enqueue_job(
        &pool,
        &JobEnqueue::new(TYPE, &payload)
            .organization_id(uuid::Uuid::from_u128(5))
            .unique("index:products", UniqueWhile::Queued),
    )
    .await
    .unwrap();
    assert!(tenant.created && tenant.id != first.id);

    // Once it started, one more may wait behind it, and only one.
    let claimed = claim(&pool, "w-single", 10).await;
    assert!(claimed.iter().any(|job| job.id == first.id));
    let behind = enqueue_unique(&pool, "index:products", UniqueWhile::Queued).await;
    assert!(behind.created && behind.id != first.id);
    let again = enqueue_unique(&pool, "index:products", UniqueWhile::Queued).await;
    assert_eq!((again.id, again.created), (behind.id, false));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_active_singleton_returns_the_running_job_and_frees_its_key_when_it_ends(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let first = enqueue_unique(&pool, "account:42", UniqueWhile::Active).await;
    let [running] = claim(&pool, "w-single", 1).await.try_into().unwrap();
    assert_eq!(running.id, first.id);
    let again = enqueue_unique(&pool, "account:42", UniqueWhile::Active).await;
    assert_eq!(
        (again.id, again.status, again.created),
        (first.id, JobStatus::Leased, false),
        "never a second while one runs"
    );
    complete_job_success(&pool, &running.lease(), None)
        .await
        .unwrap();
    let next = enqueue_unique(&pool, "account:42", UniqueWhile::Active).await;
    assert!(next.created && next.id != first.id, "free once it ended");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn concurrent_enqueues_of_one_key_make_one_job(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                enqueue_unique(&pool, "report:daily", UniqueWhile::Active)
                    .await
                    .id
            })
        })
        .collect();
    let mut ids: Vec<JobId> = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every caller got the one job");
    assert_eq!(jobs_of_type(&pool).await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_batch_resolves_each_singleton_and_inserts_the_rest(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let payload = json!({});
    let requests = [
        JobEnqueue::new(TYPE, &payload),
        JobEnqueue::new(TYPE, &payload).unique("k", UniqueWhile::Queued),
        JobEnqueue::new(TYPE, &payload).unique("k", UniqueWhile::Queued),
        JobEnqueue::new(TYPE, &payload),
    ];
    let jobs = enqueue_jobs(&pool, &requests).await.unwrap();
    let created: Vec<bool> = jobs.iter().map(|job| job.created).collect();
    assert_eq!(created, [true, true, false, true]);
    assert_eq!(jobs[1].id, jobs[2].id);
    assert_eq!(jobs_of_type(&pool).await, 3);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_requeue_that_would_make_two_holders_is_refused_with_its_code(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let first = enqueue_unique(&pool, "account:7", UniqueWhile::Active).await;
    cancel_job(&pool, first.id, TenantScope::Admin)
        .await
        .unwrap();
    let second = enqueue_unique(&pool, "account:7", UniqueWhile::Active).await;
    assert!(second.created);
    let refused = requeue_job(&pool, first.id, TenantScope::Admin)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "job.unique_key_taken");
    assert!(
        refused.to_string().contains(&second.id.to_string()),
        "{refused}"
    );

    cancel_job(&pool, second.id, TenantScope::Admin)
        .await
        .unwrap();
    requeue_job(&pool, first.id, TenantScope::Admin)
        .await
        .unwrap();
    let again = enqueue_unique(&pool, "account:7", UniqueWhile::Active).await;
    assert_eq!((again.id, again.created), (first.id, false));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn bad_unique_requests_are_refused_with_their_codes(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let payload = json!({});
    assert_eq!(
        refused(
            &pool,
            JobEnqueue::new(TYPE, &payload).unique("  ", UniqueWhile::Queued)
        )
        .await,
        "job.invalid_unique_key"
    );
    assert_eq!(
        refused(
            &pool,
            JobEnqueue::new(TYPE, &payload)
                .unique("k", UniqueWhile::Queued)
                .idempotency_key("k")
        )
        .await,
        "job.unique_key_with_idempotency_key"
    );
    assert_eq!(
        refused(
            &pool,
            JobEnqueue::new("singleton.missing", &payload).unique("k", UniqueWhile::Queued)
        )
        .await,
        "job.definition_not_found_or_disabled"
    );
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .unwrap();
    let err = enqueue_job(
        &mut *tx,
        &JobEnqueue::new(TYPE, &payload).unique("k", UniqueWhile::Active),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "validation.isolation_level_unsupported");
    assert_eq!(jobs_of_type(&pool).await, 0, "nothing was inserted");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_debounced_burst_of_100_enqueues_runs_once_with_the_last_payload(pool: PgPool) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let catalog = JobCatalog::new().job(
        TYPE,
        handler(TYPE, move |_, payload: Value| {
            let record = Arc::clone(&record);
            async move {
                record.lock().unwrap().push(payload);
                Ok(JobCompletion::success())
            }
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();

    let window = Duration::from_millis(1_500);
    let mut outcomes = Vec::new();
    let mut ids = Vec::new();
    for n in 0..100 {
        let payload = json!({ "n": n });
        let job = enqueue_job(
            &pool,
            &JobEnqueue::new(TYPE, &payload).debounce("document:7", window),
        )
        .await
        .unwrap();
        outcomes.push(job.outcome);
        ids.push(job.id);
    }
    assert_eq!(outcomes[0], EnqueueOutcome::Inserted);
    assert!(outcomes[1..].iter().all(|o| *o == EnqueueOutcome::Replaced));
    ids.dedup();
    assert_eq!(ids.len(), 1, "one job for the burst");
    let (payload, due_in): (Value, f64) = sqlx::query_as(
        "SELECT payload, extract(epoch FROM next_run_at - now())::float8
         FROM runledger.job_queue WHERE id = $1",
    )
    .bind(ids[0].0)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(payload, json!({ "n": 99 }), "the last payload wins");
    assert!(
        due_in > 1.0,
        "due a window after the last enqueue: {due_in}"
    );

    let supervisor = Supervisor::builder(&pool, fast_config("w-debounce"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 1, Duration::from_secs(30)).await;
    supervisor
        .shutdown_with_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![json!({ "n": 99 })]);
    assert_eq!(jobs_of_type(&pool).await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_throttle_keeps_the_first_job_of_each_window_and_drops_the_rest(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let window = Duration::from_millis(800);
    let throttled = |n: i32| {
        let pool = &pool;
        async move {
            let payload = json!({ "n": n });
            enqueue_job(
                pool,
                &JobEnqueue::new(TYPE, &payload).throttle("user:42", window),
            )
            .await
            .unwrap()
        }
    };
    let kept = throttled(0).await;
    assert_eq!(kept.outcome, EnqueueOutcome::Inserted);
    for n in 1..10 {
        let dropped = throttled(n).await;
        assert_eq!(
            (dropped.id, dropped.outcome),
            (kept.id, EnqueueOutcome::Dropped)
        );
    }
    // Finished or not, the kept job holds the key for its window.
    let [job] = claim(&pool, "w-throttle", 1).await.try_into().unwrap();
    complete_job_success(&pool, &job.lease(), None)
        .await
        .unwrap();
    let dropped = throttled(10).await;
    assert_eq!(
        (dropped.id, dropped.status, dropped.outcome),
        (kept.id, JobStatus::Succeeded, EnqueueOutcome::Dropped)
    );

    tokio::time::sleep(window + Duration::from_millis(100)).await;
    let next = throttled(11).await;
    assert_eq!(next.outcome, EnqueueOutcome::Inserted, "a new window");
    assert_ne!(next.id, kept.id);
    assert_eq!(jobs_of_type(&pool).await, 2);

    let payload = json!({});
    assert_eq!(
        refused(
            &pool,
            JobEnqueue::new(TYPE, &payload).throttle("user:42", Duration::ZERO)
        )
        .await,
        "job.invalid_unique_window"
    );
}

/// A requeue whose own check cannot see a holder yet (enqueued in a transaction that commits
/// while the requeue waits on the unique index) still fails with its code.
#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_requeue_racing_an_enqueue_of_its_key_fails_with_its_code(pool: PgPool) {
    define(&pool, TYPE, DefinitionOpts::default()).await;
    let first = enqueue_unique(&pool, "account:9", UniqueWhile::Active).await;
    cancel_job(&pool, first.id, TenantScope::Admin)
        .await
        .unwrap();

    let mut tx = pool.begin().await.unwrap();
    let payload = json!({});
    let racing = enqueue_job(
        &mut *tx,
        &JobEnqueue::new(TYPE, &payload).unique("account:9", UniqueWhile::Active),
    )
    .await
    .unwrap();
    assert!(racing.created);
    let requeue = {
        let pool = pool.clone();
        tokio::spawn(async move { requeue_job(&pool, first.id, TenantScope::Admin).await })
    };
    // The requeue waits on the uncommitted holder's index entry until the commit.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.commit().await.unwrap();
    let refused = requeue.await.unwrap().unwrap_err();
    assert_eq!(refused.code(), "job.unique_key_taken", "{refused}");
    assert_eq!(jobs_of_type(&pool).await, 2);
}
