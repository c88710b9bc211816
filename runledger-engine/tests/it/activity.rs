//! The last hour's activity, minute by minute, as the dashboard charts it.

use runledger_engine::postgres::jobs::{complete_job_success, get_job_activity};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{DefinitionOpts, WORKER, claim, dead_letter, define, insert_job};

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn activity_counts_the_hours_outcomes_and_derives_the_queue_depth(pool: PgPool) {
    define(&pool, "it.mail", DefinitionOpts::default()).await;
    let org = uuid::Uuid::now_v7();
    for n in 0..3 {
        insert_job(&pool, "it.mail", json!({ "n": n })).await;
    }
    let leased = claim(&pool, WORKER, 2).await;
    complete_job_success(&pool, &leased[0].lease(), None)
        .await
        .unwrap();
    dead_letter(&pool, &leased[1]).await;

    let minutes = get_job_activity(&pool, None).await.unwrap();

    assert_eq!(minutes.len(), 60);
    assert!(minutes.windows(2).all(|w| w[0].minute < w[1].minute));
    assert_eq!(minutes.iter().map(|m| m.succeeded).sum::<i64>(), 1);
    assert_eq!(minutes.iter().map(|m| m.dead_lettered).sum::<i64>(), 1);
    assert_eq!(minutes.iter().map(|m| m.enqueued).sum::<i64>(), 3);
    assert_eq!(
        minutes.last().unwrap().queue_depth,
        1,
        "one job still pending"
    );
    assert_eq!(minutes[0].queue_depth, 0, "nothing was queued an hour ago");

    let other = get_job_activity(&pool, Some(org)).await.unwrap();
    assert!(other.iter().all(|m| m.enqueued == 0 && m.queue_depth == 0));
}
