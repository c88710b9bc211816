//! Durable enqueue intents: recording inside the caller's transaction, promotion by the intent
//! promoter (batches, savepoints, conflicts, deferral), its loop under the Supervisor, metrics.

use std::time::Duration;

use runledger_engine::core::jobs::{JobCompletion, JobIntentId, JobIntentStatus, JobStatus};
use runledger_engine::postgres::jobs::{
    JobEnqueue, JobIntentListFilter, JobIntentRecord, TenantScope, enqueue_job,
    get_job_enqueue_intent, get_job_intent_metrics, list_job_enqueue_intents,
    record_job_enqueue_intent,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::intent_promoter::{IntentPromoter, IntentPromoterConfig};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{
    DefinitionOpts, count_jobs, define, fast_config, handler, job, wait_for_status,
};

const WAIT: Duration = Duration::from_secs(30);

fn types(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// A promoter of `job_types` with the default settings.
fn promoter(pool: &PgPool, job_types: &[&str]) -> IntentPromoter {
    let config = IntentPromoterConfig::from_jobs_config(&JobsConfig::default());
    IntentPromoter::new(pool.clone(), types(job_types), config).unwrap()
}

async fn record(pool: &PgPool, job_type: &str, payload: &Value, key: &str) -> JobIntentId {
    let request = JobEnqueue::new(job_type, payload).idempotency_key(key);
    record_job_enqueue_intent(pool, &request).await.unwrap().id
}

async fn intent(pool: &PgPool, id: JobIntentId) -> JobIntentRecord {
    get_job_enqueue_intent(pool, id, TenantScope::Admin)
        .await
        .unwrap()
        .expect("intent exists")
}

async fn count_intents(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM runledger.job_enqueue_intents")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_intent_recorded_in_a_rolled_back_transaction_leaves_nothing(pool: PgPool) {
    define(&pool, "orders.confirm", DefinitionOpts::default()).await;
    let payload = json!({"order_id": 7});
    let mut tx = pool.begin().await.unwrap();
    let request = JobEnqueue::new("orders.confirm", &payload).idempotency_key("order:7");
    let recorded = record_job_enqueue_intent(&mut *tx, &request).await.unwrap();
    assert!(recorded.created);
    assert_eq!(recorded.status, JobIntentStatus::Pending);
    tx.rollback().await.unwrap();

    assert_eq!(count_intents(&pool).await, 0);
    let pass = promoter(&pool, &["orders.confirm"])
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.claimed, 0);
    assert_eq!(count_jobs(&pool).await, 0);
    assert!(
        get_job_enqueue_intent(&pool, recorded.id, TenantScope::Admin)
            .await
            .unwrap()
            .is_none()
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_committed_intent_becomes_one_job_with_its_key_and_request(pool: PgPool) {
    define(&pool, "orders.confirm", DefinitionOpts::default()).await;
    let payload = json!({"order_id": 7});
    let mut tx = pool.begin().await.unwrap();
    let request = JobEnqueue::new("orders.confirm", &payload)
        .idempotency_key("order:7")
        .priority(9)
        .max_attempts(2);
    let recorded = record_job_enqueue_intent(&mut *tx, &request).await.unwrap();
    tx.commit().await.unwrap();

    let pass = promoter(&pool, &["orders.confirm"])
        .run_once()
        .await
        .unwrap();
    assert_eq!((pass.claimed, pass.promoted), (1, 1));
    let promoted = intent(&pool, recorded.id).await;
    assert_eq!(promoted.status, JobIntentStatus::Promoted);
    assert!(promoted.finished_at.is_some());
    let job = job(&pool, promoted.job_id.unwrap()).await;
    assert_eq!(job.payload, payload);
    assert_eq!(job.idempotency_key.as_deref(), Some("order:7"));
    assert_eq!((job.priority, job.max_attempts), (9, 2));

    // A direct keyed enqueue of the same request is the same job.
    let direct = enqueue_job(&pool, &request).await.unwrap();
    assert_eq!((direct.id, direct.created), (job.id, false));
    let again = promoter(&pool, &["orders.confirm"])
        .run_once()
        .await
        .unwrap();
    assert_eq!(again.claimed, 0, "a promoted intent is never taken again");
    assert_eq!(count_jobs(&pool).await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_intent_for_a_type_registered_only_later_is_promoted_once_it_is(pool: PgPool) {
    define(&pool, "billing.charge", DefinitionOpts::default()).await;
    // The producer ships first: no definition, no worker runs `invoices.render` yet.
    let id = record(
        &pool,
        "invoices.render",
        &json!({"invoice": 1}),
        "invoice:1",
    )
    .await;
    let pass = promoter(&pool, &["billing.charge"])
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.claimed, 0, "a worker without the type leaves it alone");
    let registered_but_undefined = promoter(&pool, &["invoices.render"])
        .run_once()
        .await
        .unwrap();
    assert_eq!(
        registered_but_undefined.claimed, 0,
        "no definition yet: the intent waits"
    );
    let waiting = intent(&pool, id).await;
    assert_eq!(waiting.status, JobIntentStatus::Pending);
    assert_eq!(waiting.attempts, 0, "waiting spends no tries");

    // The worker that runs the type deploys: its catalog syncs the definition.
    define(&pool, "invoices.render", DefinitionOpts::default()).await;
    let pass = promoter(&pool, &["invoices.render"])
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.promoted, 1);
    let promoted = intent(&pool, id).await;
    assert_eq!(promoted.status, JobIntentStatus::Promoted);
    assert_eq!(
        job(&pool, promoted.job_id.unwrap()).await.job_type,
        "invoices.render"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_intent_of_a_disabled_type_waits_until_it_is_enabled(pool: PgPool) {
    define(
        &pool,
        "invoices.render",
        DefinitionOpts {
            enabled: false,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let id = record(&pool, "invoices.render", &json!({}), "invoice:2").await;
    let pass = promoter(&pool, &["invoices.render"])
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.claimed, 0);
    define(&pool, "invoices.render", DefinitionOpts::default()).await;
    let pass = promoter(&pool, &["invoices.render"])
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.promoted, 1);
    assert_eq!(intent(&pool, id).await.status, JobIntentStatus::Promoted);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn two_promoters_never_promote_one_intent_twice(pool: PgPool) {
    define(&pool, "orders.confirm", DefinitionOpts::default()).await;
    for n in 0..300 {
        record(
            &pool,
            "orders.confirm",
            &json!({"n": n}),
            &format!("order:{n}"),
        )
        .await;
    }
    let mut config = IntentPromoterConfig::from_jobs_config(&JobsConfig::default());
    config.batch_size = 7;
    let make = || IntentPromoter::new(pool.clone(), types(&["orders.confirm"]), config.clone());
    let (a, b) = (make().unwrap(), make().unwrap());
    let (pass_a, pass_b) = tokio::join!(
        tokio::spawn(async move { a.run_once().await.unwrap() }),
        tokio::spawn(async move { b.run_once().await.unwrap() }),
    );
    let (pass_a, pass_b) = (pass_a.unwrap(), pass_b.unwrap());

    assert_eq!(
        pass_a.promoted + pass_b.promoted,
        300,
        "{pass_a:?} {pass_b:?}"
    );
    assert_eq!(
        pass_a.claimed + pass_b.claimed,
        300,
        "no intent taken twice"
    );
    assert_eq!(count_jobs(&pool).await, 300);
    let distinct: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT job_id) FROM runledger.job_enqueue_intents WHERE status = 'PROMOTED'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(distinct, 300);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn recording_again_returns_the_intent_and_another_request_conflicts(pool: PgPool) {
    let payload = json!({"order_id": 7});
    let request = JobEnqueue::new("orders.confirm", &payload).idempotency_key("order:7");
    let first = record_job_enqueue_intent(&pool, &request).await.unwrap();
    let reordered = json!({"order_id": 7});
    let same = JobEnqueue::new("orders.confirm", &reordered).idempotency_key("order:7");
    let second = record_job_enqueue_intent(&pool, &same).await.unwrap();
    assert_eq!((second.id, second.created), (first.id, false));

    let other = json!({"order_id": 8});
    let err = record_job_enqueue_intent(
        &pool,
        &JobEnqueue::new("orders.confirm", &other).idempotency_key("order:7"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "job.intent_idempotency_conflict");
    assert_eq!(count_intents(&pool).await, 1);

    // Keys are scoped by organization and job type, like the queue's.
    let tenant = uuid::Uuid::now_v7();
    let scoped = JobEnqueue::new("orders.confirm", &other)
        .idempotency_key("order:7")
        .organization_id(tenant);
    assert!(
        record_job_enqueue_intent(&pool, &scoped)
            .await
            .unwrap()
            .created
    );

    let unkeyed = record_job_enqueue_intent(&pool, &JobEnqueue::new("orders.confirm", &payload))
        .await
        .unwrap_err();
    assert_eq!(unkeyed.code(), "job.intent_idempotency_key_required");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn an_intent_whose_key_holds_another_request_is_conflicted_and_the_batch_goes_on(
    pool: PgPool,
) {
    define(&pool, "orders.confirm", DefinitionOpts::default()).await;
    let original = json!({"order_id": 1, "total": 10});
    let existing = enqueue_job(
        &pool,
        &JobEnqueue::new("orders.confirm", &original).idempotency_key("order:1"),
    )
    .await
    .unwrap();
    let clashing = record(
        &pool,
        "orders.confirm",
        &json!({"order_id": 1, "total": 99}),
        "order:1",
    )
    .await;
    let fine = record(&pool, "orders.confirm", &json!({"order_id": 2}), "order:2").await;

    let pass = promoter(&pool, &["orders.confirm"])
        .run_once()
        .await
        .unwrap();
    assert_eq!((pass.promoted, pass.conflicted, pass.deferred), (1, 1, 0));
    let conflicted = intent(&pool, clashing).await;
    assert_eq!(conflicted.status, JobIntentStatus::Conflicted);
    assert_eq!(conflicted.job_id, None);
    assert_eq!(
        conflicted.last_error_code.as_deref(),
        Some("job.idempotency_conflict")
    );
    assert!(
        conflicted
            .last_error_message
            .unwrap()
            .contains(&existing.id.to_string())
    );
    assert_eq!(intent(&pool, fine).await.status, JobIntentStatus::Promoted);
    assert_eq!(
        job(&pool, existing.id).await.payload,
        original,
        "the existing job is untouched"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_failed_promotion_is_deferred_with_backoff_without_undoing_the_others(pool: PgPool) {
    define(&pool, "orders.confirm", DefinitionOpts::default()).await;
    // A storage-level refusal of one job (here a trigger) stands for any failure that is
    // neither a conflict nor a missing definition.
    sqlx::raw_sql(
        "CREATE FUNCTION public.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.payload ? 'poison' THEN RAISE EXCEPTION 'poisoned payload'; END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_poison BEFORE INSERT ON runledger.job_queue
             FOR EACH ROW EXECUTE FUNCTION public.refuse_poison();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let poisoned = record(&pool, "orders.confirm", &json!({"poison": true}), "order:p").await;
    let fine = record(&pool, "orders.confirm", &json!({"order_id": 3}), "order:3").await;
    let mut config = IntentPromoterConfig::from_jobs_config(&JobsConfig::default());
    config.retry_base_delay = Duration::from_secs(10);
    config.retry_max_delay = Duration::from_secs(30);
    let capped = IntentPromoter::new(pool.clone(), types(&["orders.confirm"]), config).unwrap();

    let pass = capped.run_once().await.unwrap();
    assert_eq!((pass.promoted, pass.deferred), (1, 1));
    assert_eq!(intent(&pool, fine).await.status, JobIntentStatus::Promoted);
    let deferred = intent(&pool, poisoned).await;
    assert_eq!(deferred.status, JobIntentStatus::Pending);
    assert_eq!(deferred.attempts, 1);
    assert_eq!(
        deferred.last_error_code.as_deref(),
        Some("storage.query_failed")
    );
    assert!(
        (deferred.next_attempt_at - deferred.updated_at).num_seconds() >= 5,
        "it waits at least half the first retry delay"
    );
    let again = capped.run_once().await.unwrap();
    assert_eq!(again.claimed, 0, "not before its retry time");

    // Retry delays grow with each failure and stay under the cap.
    for tries in 2..=6 {
        sqlx::query(
            "UPDATE runledger.job_enqueue_intents SET next_attempt_at = now() WHERE id = $1",
        )
        .bind(poisoned.0)
        .execute(&pool)
        .await
        .unwrap();
        assert_eq!(capped.run_once().await.unwrap().deferred, 1);
        let wait: f64 = sqlx::query_scalar(
            "SELECT extract(epoch FROM next_attempt_at - updated_at)::float8
             FROM runledger.job_enqueue_intents WHERE id = $1",
        )
        .bind(poisoned.0)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert!((5.0..=30.0).contains(&wait), "try {tries}: waits {wait} s");
        assert_eq!(intent(&pool, poisoned).await.attempts, tries);
    }

    sqlx::raw_sql("DROP TRIGGER refuse_poison ON runledger.job_queue")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE runledger.job_enqueue_intents SET next_attempt_at = now() WHERE id = $1")
        .bind(poisoned.0)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(capped.run_once().await.unwrap().promoted, 1);
    let recovered = intent(&pool, poisoned).await;
    assert_eq!(recovered.status, JobIntentStatus::Promoted);
    assert_eq!(recovered.last_error_code, None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_delayed_intent_counts_its_delay_from_when_it_was_recorded(pool: PgPool) {
    define(&pool, "orders.remind", DefinitionOpts::default()).await;
    let payload = json!({});
    let request = JobEnqueue::new("orders.remind", &payload)
        .idempotency_key("remind:1")
        .delay(Duration::from_secs(3_600));
    let id = record_job_enqueue_intent(&pool, &request).await.unwrap().id;
    // The promoter runs much later than the recording.
    sqlx::query(
        "UPDATE runledger.job_enqueue_intents SET created_at = now() - interval '50 minutes' WHERE id = $1",
    )
    .bind(id.0)
    .execute(&pool)
    .await
    .unwrap();
    promoter(&pool, &["orders.remind"])
        .run_once()
        .await
        .unwrap();
    let job = job(&pool, intent(&pool, id).await.job_id.unwrap()).await;
    let minutes = (job.next_run_at - chrono::Utc::now()).num_minutes();
    assert!(
        (8..=10).contains(&minutes),
        "due in {minutes} min, not an hour"
    );
    // The job's snapshot keeps the delay, so a direct retry of the request is the same job.
    assert!(!enqueue_job(&pool, &request).await.unwrap().created);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn intent_reads_and_metrics_show_the_backlog_and_outcomes(pool: PgPool) {
    define(&pool, "orders.confirm", DefinitionOpts::default()).await;
    let tenant = uuid::Uuid::now_v7();
    enqueue_job(
        &pool,
        &JobEnqueue::new("orders.confirm", &json!({"v": 1})).idempotency_key("clash"),
    )
    .await
    .unwrap();
    record(&pool, "orders.confirm", &json!({"v": 2}), "clash").await;
    record(&pool, "orders.confirm", &json!({"v": 3}), "ok").await;
    let scoped = json!({});
    let request = JobEnqueue::new("reports.later", &scoped)
        .idempotency_key("later")
        .organization_id(tenant);
    let waiting = record_job_enqueue_intent(&pool, &request).await.unwrap().id;
    promoter(&pool, &["orders.confirm"])
        .run_once()
        .await
        .unwrap();

    let metrics = get_job_intent_metrics(&pool, None).await.unwrap();
    let row = |job_type: &str| metrics.iter().find(|m| m.job_type == job_type).unwrap();
    let confirm = row("orders.confirm");
    assert_eq!(
        (
            confirm.pending,
            confirm.promoted_24h,
            confirm.conflicted_24h
        ),
        (0, 1, 1)
    );
    let later = row("reports.later");
    assert_eq!(
        (later.pending, later.pending_due, later.deferred),
        (1, 1, 0)
    );
    assert!(later.oldest_pending_at.is_some());
    let tenant_metrics = get_job_intent_metrics(&pool, Some(tenant)).await.unwrap();
    assert_eq!(tenant_metrics.len(), 1);
    assert_eq!(tenant_metrics[0].job_type, "reports.later");

    let conflicted = list_job_enqueue_intents(
        &pool,
        &JobIntentListFilter::new().status(JobIntentStatus::Conflicted),
    )
    .await
    .unwrap();
    assert_eq!(conflicted.len(), 1);
    assert_eq!(conflicted[0].idempotency_key, "clash");
    assert!(
        get_job_enqueue_intent(&pool, waiting, TenantScope::Global)
            .await
            .unwrap()
            .is_none(),
        "another organization's intent is not found"
    );
    assert!(
        get_job_enqueue_intent(&pool, waiting, TenantScope::Organization(tenant))
            .await
            .unwrap()
            .is_some()
    );
}

fn confirm_catalog() -> JobCatalog {
    JobCatalog::new().job(
        "orders.confirm",
        handler("orders.confirm", |_, _| async {
            Ok(JobCompletion::success())
        }),
    )
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_supervisor_promotes_intents_and_runs_their_jobs(pool: PgPool) {
    let catalog = confirm_catalog();
    catalog.sync_definitions(&pool).await.unwrap();
    let supervisor = Supervisor::builder(&pool, fast_config("w-intents"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let payload = json!({"order_id": 5});
    let request = JobEnqueue::new("orders.confirm", &payload).idempotency_key("order:5");
    let id = record_job_enqueue_intent(&mut *tx, &request)
        .await
        .unwrap()
        .id;
    tx.commit().await.unwrap();

    wait_for_status(&pool, "SUCCEEDED", 1, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
    let promoted = intent(&pool, id).await;
    assert_eq!(promoted.status, JobIntentStatus::Promoted);
    assert_eq!(
        job(&pool, promoted.job_id.unwrap()).await.status,
        JobStatus::Succeeded
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn on_the_smallest_pool_the_promoter_polls_instead_of_holding_a_listen_connection(
    pool: PgPool,
) {
    let catalog = confirm_catalog();
    catalog.sync_definitions(&pool).await.unwrap();
    let two = crate::support::pool_of(&pool, 2).await;
    let supervisor = Supervisor::builder(&two, fast_config("w-small-pool"))
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    let id = record(&pool, "orders.confirm", &json!({"order_id": 8}), "order:8").await;
    enqueue_job(
        &pool,
        &JobEnqueue::new("orders.confirm", &json!({"direct": true})),
    )
    .await
    .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 2, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
    assert_eq!(intent(&pool, id).await.status, JobIntentStatus::Promoted);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_supervisor_with_the_promoter_switched_off_leaves_intents_pending(pool: PgPool) {
    let catalog = confirm_catalog();
    catalog.sync_definitions(&pool).await.unwrap();
    let id = record(&pool, "orders.confirm", &json!({"order_id": 6}), "order:6").await;
    let config = JobsConfig {
        intent_promoter_enabled: false,
        ..fast_config("w-no-intents")
    };
    let supervisor = Supervisor::builder(&pool, config)
        .unwrap()
        .with_catalog(&catalog)
        .build()
        .unwrap();
    // The worker loop runs (it takes this job), the promoter does not.
    enqueue_job(
        &pool,
        &JobEnqueue::new("orders.confirm", &json!({"direct": true})),
    )
    .await
    .unwrap();
    wait_for_status(&pool, "SUCCEEDED", 1, WAIT).await;
    supervisor.shutdown_with_timeout(WAIT).await.unwrap();
    assert_eq!(intent(&pool, id).await.status, JobIntentStatus::Pending);
    assert_eq!(count_jobs(&pool).await, 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_committed_intent_wakes_the_promoter_before_its_poll_interval(pool: PgPool) {
    define(&pool, "orders.confirm", DefinitionOpts::default()).await;
    let mut config = IntentPromoterConfig::from_jobs_config(&JobsConfig::default());
    config.interval = Duration::from_secs(3_600);
    let promoter = IntentPromoter::new(pool.clone(), types(&["orders.confirm"]), config).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(promoter.run(shutdown.clone()));

    // Once its LISTEN is in place, only a notification can wake it within the hour.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let listening: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                            WHERE datname = current_database()
                              AND query ILIKE 'LISTEN%runledger_enqueue_intents%')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if listening {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the promoter never listened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = record(&pool, "orders.confirm", &json!({"order_id": 9}), "order:9").await;
    let deadline = std::time::Instant::now() + WAIT;
    while intent(&pool, id).await.status != JobIntentStatus::Promoted {
        assert!(
            std::time::Instant::now() < deadline,
            "the notification did not wake it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    running.await.unwrap();
}
