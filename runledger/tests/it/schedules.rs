//! `#[schedule]`: registered through inventory, synced by the worker, fired by its scheduler.

use runledger::prelude::*;
use sqlx::PgPool;

use crate::support::{eventually, start_worker};

#[job(name = "it.tick")]
async fn tick(label: String) -> Result<String, JobError> {
    Ok(label)
}

#[schedule(cron = "* * * * * *", name = "it.tick.every_second")]
fn every_second() -> Tick {
    Tick {
        label: "scheduled".into(),
    }
}

#[schedule(
    cron = "@daily",
    name = "it.cleanup.daily",
    jitter = "5m",
    active = false
)]
#[job(name = "it.cleanup")]
async fn cleanup(older_than_days: Option<u32>) -> Result<u32, JobError> {
    Ok(older_than_days.unwrap_or(30))
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_schedule_found_through_inventory_fires(pool: PgPool) {
    let worker = start_worker(&pool).await;
    let (payload, output): (serde_json::Value, serde_json::Value) =
        eventually("a scheduled tick to succeed", || async {
            sqlx::query_as(
                "SELECT payload, output FROM runledger.job_queue WHERE job_type = 'it.tick' AND status = 'SUCCEEDED' LIMIT 1",
            )
            .fetch_optional(&pool)
            .await
            .unwrap()
        })
        .await;
    assert_eq!(payload["label"], "scheduled");
    assert_eq!(payload["schedule"], "it.tick.every_second");
    assert_eq!(output, serde_json::json!("scheduled"));
    worker.shutdown().await.unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_schedule_stacked_on_a_job_is_synced_with_its_attributes(pool: PgPool) {
    runledger::testing::prepare(&pool).await.unwrap();
    let (cron, jitter, active, template): (String, i32, bool, serde_json::Value) = sqlx::query_as(
        "SELECT cron_expr, max_jitter_seconds, is_active, payload_template FROM runledger.job_schedules WHERE name = 'it.cleanup.daily'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((cron.as_str(), jitter, active), ("@daily", 300, false));
    assert_eq!(template, serde_json::json!({}));
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn the_workers_catalog_lists_schedules_of_both_kinds(pool: PgPool) {
    let worker = Worker::builder(&pool).build().unwrap();
    let schedules = worker.catalog().schedules();
    let tick = schedules
        .iter()
        .find(|s| s.name() == "it.tick.every_second")
        .unwrap();
    assert_eq!(tick.job_type(), "it.tick");
    let cleanup = schedules
        .iter()
        .find(|s| s.name() == "it.cleanup.daily")
        .unwrap();
    assert_eq!(cleanup.job_type(), "it.cleanup");
    assert!(!cleanup.is_active());
}

/// 09:00 in Kathmandu (UTC+05:45, no daylight saving) is 03:15 UTC.
#[schedule(
    cron = "0 9 * * *",
    tz = "Asia/Kathmandu",
    name = "it.tick.kathmandu_morning"
)]
fn kathmandu_morning() -> Tick {
    Tick {
        label: "namaste".into(),
    }
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_schedule_with_a_time_zone_fires_at_its_wall_clock_time(pool: PgPool) {
    use chrono::Timelike;
    use runledger::chrono::{DateTime, Utc};

    let worker = start_worker(&pool).await;
    let cursor = || async {
        sqlx::query_as::<_, (String, DateTime<Utc>, Option<DateTime<Utc>>)>(
            "SELECT time_zone, next_fire_at, last_fired_at FROM runledger.job_schedules WHERE name = 'it.tick.kathmandu_morning'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let (time_zone, first, _) = cursor().await;
    assert_eq!(time_zone, "Asia/Kathmandu", "stored on the schedule");
    assert_eq!(
        (first.hour(), first.minute()),
        (3, 15),
        "09:00 in Kathmandu"
    );

    // Make the fire due now; the Supervisor's scheduler fires it and computes the next one in
    // the schedule's time zone.
    sqlx::query("UPDATE runledger.job_schedules SET next_fire_at = now() - interval '1 second' WHERE name = 'it.tick.kathmandu_morning'")
        .execute(&pool)
        .await
        .unwrap();
    let payload: serde_json::Value = eventually("the Kathmandu fire to run", || async {
        sqlx::query_scalar(
            "SELECT payload FROM runledger.job_queue WHERE payload->>'schedule' = 'it.tick.kathmandu_morning' AND status = 'SUCCEEDED'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap()
    })
    .await;
    assert_eq!(payload["label"], "namaste");
    let (_, next, fired) = cursor().await;
    assert!(fired.is_some());
    assert_eq!((next.hour(), next.minute(), next.second()), (3, 15, 0));
    assert!(next > Utc::now());
    worker.shutdown().await.unwrap();
}
