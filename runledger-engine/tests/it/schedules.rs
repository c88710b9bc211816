//! Cron schedules: upsert rules, catalog sync, materialization across workers, catch-up,
//! jitter and error isolation.

use std::time::Duration;

use chrono::{DateTime, Utc};
use runledger_engine::core::jobs::JobCompletion;
use runledger_engine::core::jobs::JobHandler;
use runledger_engine::postgres::jobs::{
    get_job_schedule, job_schedule, materialize_due_schedules, set_job_definition_enabled,
    set_job_schedule_active, upsert_job_schedule,
};
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::{CatalogJobScheduleSpec, JobCatalog};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{DefinitionOpts, define, fast_config, handler};

fn noop(job_type: &'static str) -> impl JobHandler {
    handler(job_type, |_, _| async { Ok(JobCompletion::success()) })
}

fn spec<'a>(
    name: &'a str,
    cron: &'a str,
    payload: &'a Value,
    active: bool,
) -> CatalogJobScheduleSpec<'a> {
    CatalogJobScheduleSpec {
        name,
        job_type: "reports.refresh",
        cron_expr: cron,
        payload_template: payload,
        is_active: active,
        organization_id: None,
        max_jitter_seconds: 0,
        next_fire_at: None,
    }
}

async fn scheduled_jobs(pool: &PgPool) -> Vec<Value> {
    sqlx::query_scalar("SELECT payload FROM runledger.job_queue ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn two_supervisors_materialize_every_fire_exactly_once(pool: PgPool) {
    let payload = json!({"full": false});
    let catalog = JobCatalog::new()
        .job("reports.refresh", noop("reports.refresh"))
        .schedule(spec("reports.every-second", "* * * * * *", &payload, true));
    catalog.sync_definitions(&pool).await.unwrap();
    catalog.sync_schedules(&pool).await.unwrap();

    let start = |worker: &str| {
        let mut config = fast_config(worker);
        config.schedule_poll_interval = Duration::from_secs(1);
        Supervisor::builder(&pool, config)
            .unwrap()
            .with_catalog(&catalog)
            .build()
            .unwrap()
    };
    let (first, second) = (start("sched-a"), start("sched-b"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    first
        .shutdown_with_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    second
        .shutdown_with_timeout(Duration::from_secs(10))
        .await
        .unwrap();

    let per_fire: Vec<(String, i64)> = sqlx::query_as(
        "SELECT payload->>'scheduled_for', count(*) FROM runledger.job_queue
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        per_fire.len() >= 5,
        "expected fires over 10 s, got {per_fire:?}"
    );
    assert!(
        per_fire.iter().all(|(_, count)| *count == 1),
        "a fire was materialized twice: {per_fire:?}"
    );
    let jobs = scheduled_jobs(&pool).await;
    assert_eq!(jobs[0]["full"], json!(false), "template kept");
    assert_eq!(jobs[0]["schedule"], json!("reports.every-second"));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_stale_cursor_yields_one_catch_up_fire_then_jumps_to_the_future(pool: PgPool) {
    define(&pool, "reports.refresh", DefinitionOpts::default()).await;
    let stale = Utc::now() - chrono::Duration::minutes(5);
    upsert_job_schedule(
        &pool,
        &job_schedule("reports.minutely", "reports.refresh", "0 * * * * *").next_fire_at(stale),
    )
    .await
    .unwrap();

    let pass = materialize_due_schedules(&pool, 100).await.unwrap();
    assert_eq!((pass.due, pass.fired), (1, 1));
    let jobs = scheduled_jobs(&pool).await;
    assert_eq!(jobs.len(), 1, "exactly one catch-up job");
    let scheduled_for: DateTime<Utc> =
        serde_json::from_value(jobs[0]["scheduled_for"].clone()).unwrap();
    assert_eq!(scheduled_for.timestamp_micros(), stale.timestamp_micros());

    let schedule = get_job_schedule(&pool, "reports.minutely")
        .await
        .unwrap()
        .unwrap();
    assert!(
        schedule.next_fire_at > Utc::now(),
        "the cursor jumped to the next future fire"
    );
    assert_eq!(
        materialize_due_schedules(&pool, 100).await.unwrap().fired,
        0
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn jitter_is_deterministic_and_within_bounds(pool: PgPool) {
    let jitters: Vec<(f64, f64)> = sqlx::query_as(
        "SELECT extract(epoch FROM runledger.schedule_jitter('nightly', f, 30))::float8,
                extract(epoch FROM runledger.schedule_jitter('nightly', f, 30))::float8
         FROM generate_series(timestamptz '2026-01-01', timestamptz '2026-01-02', interval '1 hour') AS f",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        jitters.iter().all(|(a, b)| a == b),
        "same schedule and fire, same jitter"
    );
    assert!(jitters.iter().all(|(a, _)| (0.0..=30.0).contains(a)));
    assert!(
        jitters.iter().any(|(a, _)| *a > 0.0),
        "jitter actually spreads fires"
    );
    let none: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM runledger.schedule_jitter('nightly', now(), 0))::float8",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(none, 0.0);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn invalid_cron_is_refused_and_a_corrupt_row_does_not_block_others(pool: PgPool) {
    define(&pool, "reports.refresh", DefinitionOpts::default()).await;
    let err = upsert_job_schedule(
        &pool,
        &job_schedule("bad", "reports.refresh", "every tuesday"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "job_schedule.invalid_cron");
    assert!(!err.to_string().is_empty());

    sqlx::query(
        "INSERT INTO runledger.job_schedules (name, job_type, cron_expr, next_fire_at)
         VALUES ('corrupt', 'reports.refresh', 'garbage', now() - interval '1 minute')",
    )
    .execute(&pool)
    .await
    .unwrap();
    upsert_job_schedule(
        &pool,
        &job_schedule("healthy", "reports.refresh", "@hourly")
            .next_fire_at(Utc::now() - chrono::Duration::seconds(1)),
    )
    .await
    .unwrap();

    let pass = materialize_due_schedules(&pool, 100).await.unwrap();
    assert_eq!((pass.fired, pass.deferred), (1, 1));
    let corrupt = get_job_schedule(&pool, "corrupt").await.unwrap().unwrap();
    assert_eq!(
        corrupt.last_error_code.as_deref(),
        Some("job_schedule.invalid_cron")
    );
    assert!(
        corrupt.retry_at.is_some_and(|at| at > Utc::now()),
        "deferred, not retried in a tight loop"
    );
    assert!(
        corrupt.next_fire_at < Utc::now(),
        "the cursor stays on the fire that failed"
    );
    assert_eq!(scheduled_jobs(&pool).await.len(), 1);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn catalog_sync_keeps_the_cursor_while_the_cron_is_unchanged(pool: PgPool) {
    let payload = json!({});
    let catalog = JobCatalog::new()
        .job("reports.refresh", noop("reports.refresh"))
        .schedule(spec("reports.hourly", "0 0 * * * *", &payload, true));
    catalog.sync_definitions(&pool).await.unwrap();
    catalog.sync_schedules(&pool).await.unwrap();
    let pinned = Utc::now() + chrono::Duration::days(3);
    sqlx::query("UPDATE runledger.job_schedules SET next_fire_at = $1")
        .bind(pinned)
        .execute(&pool)
        .await
        .unwrap();

    catalog.sync_schedules(&pool).await.unwrap();
    let kept = get_job_schedule(&pool, "reports.hourly")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        kept.next_fire_at.timestamp_micros(),
        pinned.timestamp_micros()
    );

    let changed = JobCatalog::new()
        .job("reports.refresh", noop("reports.refresh"))
        .schedule(spec("reports.hourly", "0 30 * * * *", &payload, true));
    changed.sync_schedules(&pool).await.unwrap();
    let moved = get_job_schedule(&pool, "reports.hourly")
        .await
        .unwrap()
        .unwrap();
    assert!(
        moved.next_fire_at < pinned,
        "a new cron recomputes the cursor"
    );
    assert_eq!(moved.cron_expr, "0 30 * * * *");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn admin_pause_is_overwritten_by_catalog_sync_but_kept_by_upsert(pool: PgPool) {
    let payload = json!({});
    let catalog = JobCatalog::new()
        .job("reports.refresh", noop("reports.refresh"))
        .schedule(spec("reports.hourly", "@hourly", &payload, true));
    catalog.sync_definitions(&pool).await.unwrap();
    catalog.sync_schedules(&pool).await.unwrap();

    set_job_schedule_active(&pool, "reports.hourly", false)
        .await
        .unwrap();
    catalog.sync_schedules(&pool).await.unwrap();
    assert!(
        get_job_schedule(&pool, "reports.hourly")
            .await
            .unwrap()
            .unwrap()
            .is_active
    );

    set_job_schedule_active(&pool, "reports.hourly", false)
        .await
        .unwrap();
    upsert_job_schedule(
        &pool,
        &job_schedule("reports.hourly", "reports.refresh", "@hourly"),
    )
    .await
    .unwrap();
    assert!(
        !get_job_schedule(&pool, "reports.hourly")
            .await
            .unwrap()
            .unwrap()
            .is_active,
        "upsert preserves the stored active state"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn exact_schedule_sync_deactivates_scoped_schedules_the_catalog_lacks(pool: PgPool) {
    let payload = json!({});
    let full = JobCatalog::new()
        .job("reports.refresh", noop("reports.refresh"))
        .schedule(spec("reports.hourly", "@hourly", &payload, true))
        .schedule(spec("reports.daily", "@daily", &payload, true));
    full.sync_definitions(&pool).await.unwrap();
    full.sync_schedules(&pool).await.unwrap();
    let scope = full.schedule_sync_scope().unwrap();

    let smaller = JobCatalog::new()
        .job("reports.refresh", noop("reports.refresh"))
        .schedule(spec("reports.hourly", "@hourly", &payload, true));
    smaller.sync_schedules(&pool).await.unwrap();
    assert!(
        get_job_schedule(&pool, "reports.daily")
            .await
            .unwrap()
            .unwrap()
            .is_active,
        "additive sync leaves absent schedules alone"
    );
    let deactivated = smaller.sync_schedules_exact(&pool, &scope).await.unwrap();
    assert_eq!(deactivated, vec!["reports.daily".to_owned()]);
    assert!(
        !get_job_schedule(&pool, "reports.daily")
            .await
            .unwrap()
            .unwrap()
            .is_active
    );
    assert!(
        get_job_schedule(&pool, "reports.hourly")
            .await
            .unwrap()
            .unwrap()
            .is_active
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn active_schedules_and_enabled_definitions_go_together(pool: PgPool) {
    define(
        &pool,
        "reports.refresh",
        DefinitionOpts {
            enabled: false,
            ..DefinitionOpts::default()
        },
    )
    .await;
    let err = upsert_job_schedule(&pool, &job_schedule("r", "reports.refresh", "@hourly"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job_schedule.definition_not_found_or_disabled");
    let err = upsert_job_schedule(&pool, &job_schedule("r", "nobody.defines.this", "@hourly"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job_schedule.definition_not_found_or_disabled");
    // An inactive schedule may exist for a disabled definition, but cannot be activated.
    upsert_job_schedule(
        &pool,
        &job_schedule("r", "reports.refresh", "@hourly").active(false),
    )
    .await
    .unwrap();
    let err = set_job_schedule_active(&pool, "r", true).await.unwrap_err();
    assert_eq!(err.code(), "job_schedule.definition_not_found_or_disabled");

    set_job_definition_enabled(&pool, "reports.refresh", true)
        .await
        .unwrap();
    set_job_schedule_active(&pool, "r", true).await.unwrap();
    let err = set_job_definition_enabled(&pool, "reports.refresh", false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job_definition.active_schedule_exists");

    let err = JobCatalog::new()
        .schedule(spec("orphan", "@hourly", &json!({}), true))
        .sync_schedules(&pool)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "catalog.schedule_unknown_job_type");

    // Declared before its job: refused even though the job follows.
    let err = JobCatalog::new()
        .schedule(spec("early", "@hourly", &json!({}), true))
        .job("reports.refresh", noop("reports.refresh"))
        .sync_schedules(&pool)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "catalog.schedule_unknown_job_type");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_time_zone_is_validated_stored_and_used_for_every_fire(pool: PgPool) {
    use chrono::Timelike;

    define(&pool, "reports.refresh", DefinitionOpts::default()).await;
    let err = upsert_job_schedule(
        &pool,
        &job_schedule("nightly", "reports.refresh", "0 3 * * *").time_zone("Europe/Berln"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "job_schedule.invalid_time_zone");
    let err = upsert_job_schedule(
        &pool,
        &job_schedule("nightly", "reports.refresh", "0 3 * * *").time_zone("europe/berlin"),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("Europe/Berlin"),
        "suggests the spelling: {err}"
    );

    // 03:00 in Kolkata (UTC+05:30) is 21:30 UTC the day before.
    let due = Utc::now() - chrono::Duration::seconds(1);
    let stored = upsert_job_schedule(
        &pool,
        &job_schedule("nightly", "reports.refresh", "0 3 * * *")
            .time_zone("Asia/Kolkata")
            .next_fire_at(due),
    )
    .await
    .unwrap();
    assert_eq!(stored.time_zone, "Asia/Kolkata");
    let pass = materialize_due_schedules(&pool, 10).await.unwrap();
    assert_eq!(pass.fired, 1);
    let after = get_job_schedule(&pool, "nightly").await.unwrap().unwrap();
    assert_eq!(
        (after.next_fire_at.hour(), after.next_fire_at.minute()),
        (21, 30)
    );

    // Another time zone is another schedule: the cursor is recomputed, as for a new cron.
    let moved = upsert_job_schedule(
        &pool,
        &job_schedule("nightly", "reports.refresh", "0 3 * * *").time_zone("UTC"),
    )
    .await
    .unwrap();
    assert_eq!(moved.time_zone, "UTC");
    assert_eq!(
        (moved.next_fire_at.hour(), moved.next_fire_at.minute()),
        (3, 0)
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_catalog_schedule_in_a_time_zone_is_synced_with_it(pool: PgPool) {
    let payload = json!({});
    let catalog = JobCatalog::new()
        .job("reports.refresh", noop("reports.refresh"))
        .schedule_in(
            spec("reports.berlin", "0 9 * * 1-5", &payload, true),
            "Europe/Berlin",
        );
    catalog.sync_definitions(&pool).await.unwrap();
    catalog.sync_schedules(&pool).await.unwrap();
    let stored = get_job_schedule(&pool, "reports.berlin")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.time_zone, "Europe/Berlin");
}
