//! Retention: the pruner deletes finished direct jobs and finished workflow runs once their
//! retention has passed, with everything they own, in bounded batches, one pruner at a time.

use std::time::{Duration, Instant};

use runledger_engine::core::jobs::{
    JobId, Retention, WorkflowDagBuilder, WorkflowRunId, WorkflowRunStatus,
};
use runledger_engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, PruneCounts, WorkflowRunHandleScope, complete_job_success,
    count_prunable, enqueue_job, enqueue_workflow_run, get_job_definition, get_workflow_run,
    prune_batch, upsert_job_definition,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use runledger_engine::runtime::pruner::{Pruner, PrunerConfig};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{
    DefinitionOpts, WORKER, claim, count_jobs, count_rows, define, fast_config, handler,
};

const DAY: Duration = Duration::from_secs(86_400);
const HOUR: Duration = Duration::from_secs(3_600);

/// A finished direct job written as if it had been created and finished `ago`, with one
/// attempt, an event and a log line (and a dead letter when it was dead-lettered): what a
/// worker leaves behind, aged without waiting.
async fn aged_job(pool: &PgPool, job_type: &str, status: &str, ago: Duration) -> JobId {
    let id: uuid::Uuid = sqlx::query_scalar(
        r#"
        WITH at AS (SELECT now() - make_interval(secs => $3) AS t),
        job AS (
            INSERT INTO runledger.job_queue (
                id, job_type, status, max_attempts, timeout_seconds, attempt, created_at,
                updated_at, finished_at
            )
            SELECT encode(overlay(uuid_send(gen_random_uuid())
                       PLACING substring(int8send(floor(extract(epoch FROM t) * 1000)::bigint) FROM 3)
                       FROM 1 FOR 6), 'hex')::uuid,
                   $1, $2, 3, 60, 1, t, t, t
            FROM at
            RETURNING id, finished_at
        ),
        attempt AS (
            INSERT INTO runledger.job_attempts (job_id, attempt, worker_id, outcome, failure_kind, leased_at, finished_at)
            SELECT id, 1, 'worker-old', CASE WHEN $2 = 'SUCCEEDED' THEN 'SUCCEEDED' ELSE 'FAILED' END,
                   CASE WHEN $2 = 'SUCCEEDED' THEN NULL ELSE 'TERMINAL' END, finished_at, finished_at
            FROM job
        ),
        event AS (
            INSERT INTO runledger.job_events (job_id, event_type, attempt)
            SELECT id, 'REQUEUED', 1 FROM job
        ),
        log AS (
            INSERT INTO runledger.job_logs (job_id, attempt, message) SELECT id, 1, 'old line' FROM job
        ),
        dead AS (
            INSERT INTO runledger.job_dead_letters (job_id, job_type, payload, attempt, failure_kind)
            SELECT id, $1, '{}'::jsonb, 1, 'TERMINAL' FROM job WHERE $2 = 'DEAD_LETTERED'
        )
        SELECT id FROM job
        "#,
    )
    .bind(job_type)
    .bind(status)
    .bind(ago.as_secs_f64())
    .fetch_one(pool)
    .await
    .unwrap();
    JobId(id)
}

async fn exists(pool: &PgPool, id: JobId) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM runledger.job_queue WHERE id = $1)")
        .bind(id.0)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn history_rows(pool: &PgPool, id: JobId) -> i64 {
    let mut total = 0;
    for table in ["job_attempts", "job_events", "job_logs", "job_dead_letters"] {
        total += count_rows(pool, table, id).await;
    }
    total
}

fn pruner(pool: &PgPool, retention: Retention) -> Pruner {
    Pruner::new(
        pool.clone(),
        PrunerConfig::from_jobs_config(&fast_config("pruner-test")).retention(retention),
    )
    .unwrap()
}

/// Counts of one kind of direct job.
fn jobs(succeeded: u64, dead_lettered: u64, canceled: u64) -> PruneCounts {
    let mut counts = PruneCounts::default();
    counts.succeeded_jobs = succeeded;
    counts.dead_lettered_jobs = dead_lettered;
    counts.canceled_jobs = canceled;
    counts
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn finished_jobs_past_their_retention_are_deleted_with_their_history(pool: PgPool) {
    define(&pool, "it.mail", DefinitionOpts::default()).await;
    let old_success = aged_job(&pool, "it.mail", "SUCCEEDED", 2 * DAY).await;
    let old_dead = aged_job(&pool, "it.mail", "DEAD_LETTERED", 8 * DAY).await;
    let old_cancel = aged_job(&pool, "it.mail", "CANCELED", 8 * DAY).await;
    let recent_success = aged_job(&pool, "it.mail", "SUCCEEDED", HOUR).await;
    let recent_dead = aged_job(&pool, "it.mail", "DEAD_LETTERED", 2 * DAY).await;
    let recent_cancel = aged_job(&pool, "it.mail", "CANCELED", 2 * DAY).await;
    let pending = enqueue_job(&pool, &JobEnqueue::new("it.mail", &json!({})))
        .await
        .unwrap()
        .id;
    for id in [old_success, old_dead, old_cancel] {
        assert!(history_rows(&pool, id).await >= 3);
    }

    let pass = pruner(&pool, Retention::default())
        .run_once()
        .await
        .unwrap();

    assert_eq!(pass.deleted, jobs(1, 1, 1));
    assert!(!pass.locked_out);
    for id in [old_success, old_dead, old_cancel] {
        assert!(!exists(&pool, id).await, "{id} should be pruned");
        assert_eq!(history_rows(&pool, id).await, 0, "{id} left history behind");
    }
    for id in [recent_success, recent_dead, recent_cancel, pending] {
        assert!(exists(&pool, id).await, "{id} should be kept");
    }
    assert!(history_rows(&pool, recent_dead).await >= 3);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_definitions_own_retention_replaces_the_defaults_for_its_type(pool: PgPool) {
    upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("it.audit").retention_seconds(30 * 86_400),
    )
    .await
    .unwrap();
    upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("it.ping").retention_seconds(600),
    )
    .await
    .unwrap();
    let audit = aged_job(&pool, "it.audit", "SUCCEEDED", 2 * DAY).await;
    let ping_dead = aged_job(&pool, "it.ping", "DEAD_LETTERED", HOUR).await;
    let ping_fresh = aged_job(&pool, "it.ping", "SUCCEEDED", Duration::from_secs(60)).await;

    let pass = pruner(&pool, Retention::default())
        .run_once()
        .await
        .unwrap();

    assert_eq!(pass.deleted, jobs(0, 1, 0));
    assert!(exists(&pool, audit).await, "kept 30 days by its definition");
    assert!(
        !exists(&pool, ping_dead).await,
        "kept only 10 minutes by its definition"
    );
    assert!(exists(&pool, ping_fresh).await);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn batches_are_bounded_and_a_pass_repeats_them_while_they_come_back_full(pool: PgPool) {
    define(&pool, "it.mail", DefinitionOpts::default()).await;
    for _ in 0..25 {
        aged_job(&pool, "it.mail", "SUCCEEDED", 2 * DAY).await;
    }
    let config = PrunerConfig::from_jobs_config(&fast_config("pruner-test")).batch_sizes(10, 10);
    let pruner = Pruner::new(pool.clone(), config).unwrap();

    let pass = pruner.run_once().await.unwrap();

    assert_eq!(pass.deleted.succeeded_jobs, 25);
    assert_eq!(pass.batches, 3);
    assert_eq!(count_jobs(&pool).await, 0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn only_one_pruner_works_at_a_time(pool: PgPool) {
    define(&pool, "it.mail", DefinitionOpts::default()).await;
    let old = aged_job(&pool, "it.mail", "SUCCEEDED", 2 * DAY).await;
    // Another process's pruner, in the middle of a batch.
    let mut other = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('runledger.pruner'))")
        .execute(&mut *other)
        .await
        .unwrap();

    let pass = pruner(&pool, Retention::default())
        .run_once()
        .await
        .unwrap();
    assert!(pass.locked_out);
    assert_eq!(pass.deleted, PruneCounts::default());
    assert!(exists(&pool, old).await);

    other.rollback().await.unwrap();
    let pass = pruner(&pool, Retention::default())
        .run_once()
        .await
        .unwrap();
    assert!(!pass.locked_out);
    assert_eq!(pass.deleted, jobs(1, 0, 0));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_dry_run_counts_what_a_prune_deletes_and_deletes_nothing(pool: PgPool) {
    define(&pool, "it.mail", DefinitionOpts::default()).await;
    for (status, ago) in [
        ("SUCCEEDED", 2 * DAY),
        ("SUCCEEDED", 3 * DAY),
        ("SUCCEEDED", HOUR),
        ("DEAD_LETTERED", 9 * DAY),
        ("CANCELED", DAY),
    ] {
        aged_job(&pool, "it.mail", status, ago).await;
    }
    let before = count_jobs(&pool).await;

    let due = count_prunable(&pool, &Retention::default()).await.unwrap();

    assert_eq!(due, jobs(2, 1, 0));
    assert_eq!(count_jobs(&pool).await, before);
    let pass = pruner(&pool, Retention::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.deleted, due);
}

/// Prunes with `retention` until `done` holds, for work that must first age past a retention
/// of one second.
async fn prune_until<F, Fut>(pool: &PgPool, retention: &Retention, done: F) -> PruneCounts
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut total = PruneCounts::default();
    loop {
        let batch = prune_batch(pool, retention, 1_000, 100).await.unwrap();
        total.add(&batch.deleted);
        if done().await {
            return total;
        }
        assert!(Instant::now() < deadline, "not pruned in time: {total:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn one_second() -> Retention {
    Retention::default()
        .succeeded(Duration::from_secs(1))
        .dead_lettered(Duration::from_secs(1))
        .canceled(Duration::from_secs(1))
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_pruned_jobs_idempotency_key_is_free_again(pool: PgPool) {
    define(&pool, "it.mail", DefinitionOpts::default()).await;
    let payload = json!({"to": "ada@example.com"});
    let request = JobEnqueue::new("it.mail", &payload).idempotency_key("welcome:42");
    let first = enqueue_job(&pool, &request).await.unwrap().id;
    let leased = claim(&pool, WORKER, 1).await;
    complete_job_success(&pool, &leased[0].lease(), None)
        .await
        .unwrap();
    assert_eq!(enqueue_job(&pool, &request).await.unwrap().id, first);

    let pruned = prune_until(&pool, &one_second(), || async {
        !exists(&pool, first).await
    })
    .await;

    assert_eq!(pruned.succeeded_jobs, 1);
    let second = enqueue_job(&pool, &request).await.unwrap().id;
    assert_ne!(
        second, first,
        "the key names a new job once the old one is pruned"
    );
}

async fn run_status(pool: &PgPool, run: WorkflowRunId) -> Option<WorkflowRunStatus> {
    get_workflow_run(pool, run, WorkflowRunHandleScope::Admin)
        .await
        .unwrap()
        .map(|r| r.status)
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_finished_workflow_run_is_pruned_as_a_unit_and_a_running_one_is_kept(pool: PgPool) {
    define(&pool, "it.step", DefinitionOpts::default()).await;
    let meta = json!({});
    let payload = json!({});
    let two_steps = WorkflowDagBuilder::new("it.flow", &meta)
        .job("fetch", "it.step", &payload)
        .unwrap()
        .job("store", "it.step", &payload)
        .unwrap()
        .after_success("store", ["fetch"])
        .unwrap()
        .build()
        .unwrap();
    let finished = enqueue_workflow_run(&pool, &two_steps).await.unwrap().id;
    for _ in 0..2 {
        let leased = claim(&pool, WORKER, 1).await;
        complete_job_success(&pool, &leased[0].lease(), None)
            .await
            .unwrap();
    }
    assert_eq!(
        run_status(&pool, finished).await,
        Some(WorkflowRunStatus::Succeeded)
    );
    // A second run whose first step succeeded and whose second still waits to be claimed.
    let running = enqueue_workflow_run(&pool, &two_steps).await.unwrap().id;
    let leased = claim(&pool, WORKER, 1).await;
    let running_step_job = leased[0].id;
    complete_job_success(&pool, &leased[0].lease(), None)
        .await
        .unwrap();
    assert_eq!(
        run_status(&pool, running).await,
        Some(WorkflowRunStatus::Running)
    );

    let pruned = prune_until(&pool, &one_second(), || async {
        run_status(&pool, finished).await.is_none()
    })
    .await;

    assert_eq!(pruned.succeeded_runs, 1);
    assert_eq!(
        pruned.jobs(),
        0,
        "step jobs go with their run, not one by one"
    );
    let left: (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM runledger.workflow_steps WHERE workflow_run_id = $1),
                (SELECT count(*) FROM runledger.workflow_step_dependencies WHERE workflow_run_id = $1),
                (SELECT count(*) FROM runledger.job_queue WHERE workflow_run_id = $1)",
    )
    .bind(finished.0)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, (0, 0, 0));
    let orphan_attempts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runledger.job_attempts a
         WHERE NOT EXISTS (SELECT 1 FROM runledger.job_queue q WHERE q.id = a.job_id)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(orphan_attempts, 0);
    assert_eq!(
        run_status(&pool, running).await,
        Some(WorkflowRunStatus::Running)
    );
    assert!(exists(&pool, running_step_job).await);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_jobs_retain_setting_reaches_its_definition_row(pool: PgPool) {
    use runledger_engine::core::jobs::JobDefaults;

    let catalog = JobCatalog::new().job_with_definition_overrides(
        "it.report",
        handler("it.report", |_, _| async {
            Ok(runledger_engine::core::jobs::JobCompletion::success())
        }),
        JobDefaults::new().retention_seconds(3 * 86_400),
    );
    catalog.sync_definitions(&pool).await.unwrap();

    let definition = get_job_definition(&pool, "it.report")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(definition.retention_seconds, Some(3 * 86_400));

    let refused = upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("it.report").retention_seconds(0),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code(), "job_definition.invalid_retention");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_supervisor_runs_the_pruner(pool: PgPool) {
    let catalog = JobCatalog::new().job(
        "it.mail",
        handler("it.mail", |_, _| async {
            Ok(runledger_engine::core::jobs::JobCompletion::success())
        }),
    );
    catalog.sync_definitions(&pool).await.unwrap();
    let old = aged_job(&pool, "it.mail", "SUCCEEDED", 2 * DAY).await;
    let supervisor = Supervisor::builder(&pool, fast_config("pruning-worker"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    while exists(&pool, old).await {
        assert!(
            Instant::now() < deadline,
            "the supervisor's pruner never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    supervisor.shutdown().await.unwrap();
}
