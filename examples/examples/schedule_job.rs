//! A recurring job declared next to its handler: `reports.refresh` every minute (UTC), synced
//! at startup and materialized by the Supervisor's scheduler loop in any number of worker
//! processes without double fires. It exits once the first fire's job has succeeded (within
//! about a minute), or on Ctrl-C.
//!
//! ```sh
//! cargo run -p runledger-examples --example schedule_job
//! ```

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use runledger::JobsConfig;
use runledger::engine::core::jobs::{JobCompletion, JobContext, JobFailure, JobType};
use runledger::engine::core::prelude::async_trait;
use runledger::engine::runtime::Supervisor;
use runledger::engine::runtime::catalog::{CatalogJobScheduleSpec, JobCatalog};
use runledger::engine::runtime::registry::JobHandler;
use serde_json::Value;

struct RefreshReports;

#[async_trait]
impl JobHandler for RefreshReports {
    fn job_type(&self) -> JobType<'static> {
        JobType::new("reports.refresh")
    }

    async fn execute(&self, _: JobContext, payload: Value) -> Result<JobCompletion, JobFailure> {
        println!(
            "refreshing reports for the fire at {}",
            payload["scheduled_for"]
        );
        Ok(JobCompletion::success())
    }
}

/// The database's clock, so that the check below does not depend on this host's clock.
async fn chrono_now(pool: &sqlx::PgPool) -> Result<String, sqlx::Error> {
    sqlx::query_scalar("SELECT now()::text")
        .fetch_one(pool)
        .await
}

/// Resolves once a job of this schedule enqueued after `started` has succeeded.
async fn first_fire_succeeded(pool: &sqlx::PgPool, started: String) {
    loop {
        let done: Result<bool, _> = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runledger.job_queue WHERE job_type = 'reports.refresh' \
             AND status = 'SUCCEEDED' AND created_at >= $1::timestamptz)",
        )
        .bind(&started)
        .fetch_one(pool)
        .await;
        if let Ok(true) = done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let db = runledger_examples::database().await?;
    let pool = db.pool().clone();
    runledger::engine::postgres::migrate(&pool).await?;

    let catalog = JobCatalog::new()
        .job("reports.refresh", RefreshReports)
        .schedule(CatalogJobScheduleSpec {
            name: "reports.refresh.minutely",
            job_type: "reports.refresh",
            cron_expr: "*/1 * * * *",
            payload_template: &serde_json::json!({ "full": false }),
            is_active: true,
            organization_id: None,
            max_jitter_seconds: 0,
            next_fire_at: None,
        });
    catalog.sync_definitions(&pool).await?;
    catalog.sync_schedules(&pool).await?;

    let started = chrono_now(&pool).await?;
    let supervisor = Supervisor::builder(&pool, JobsConfig::from_env())?
        .with_catalog(&catalog)
        .build()?;
    let first_fire_done = first_fire_succeeded(&pool, started);
    supervisor
        .run_until_shutdown(
            async {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    () = first_fire_done => println!("the first fire succeeded; stopping"),
                }
            },
            Duration::from_secs(30),
        )
        .await?;
    pool.close().await;
    Ok(())
}
