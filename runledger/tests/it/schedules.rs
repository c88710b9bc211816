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

#[test]
fn registered_schedules_list_both_kinds() {
    let schedules = runledger::registered_schedules().unwrap();
    let tick = schedules
        .iter()
        .find(|s| s.name == "it.tick.every_second")
        .unwrap();
    assert_eq!(tick.job_name, "it.tick");
    let cleanup = schedules
        .iter()
        .find(|s| s.name == "it.cleanup.daily")
        .unwrap();
    assert_eq!(cleanup.job_name, "it.cleanup");
    assert!(!cleanup.active);
}
