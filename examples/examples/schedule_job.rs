//! A recurring job declared next to its handler: `reports.refresh` every minute (UTC), synced
//! at startup and materialized by the Supervisor's scheduler loop in any number of worker
//! processes without double fires.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo run -p runledger-examples --example schedule_job
//! ```

#![allow(clippy::print_stdout)]

use std::time::Duration;

use runledger::engine::core::jobs::{JobCompletion, JobContext, JobFailure, JobType};
use runledger::engine::core::prelude::async_trait;
use runledger::engine::runtime::Supervisor;
use runledger::engine::runtime::catalog::{CatalogJobScheduleSpec, JobCatalog};
use runledger::engine::runtime::config::JobsConfig;
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = sqlx::PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
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

    let supervisor = Supervisor::builder(&pool, JobsConfig::from_env())?
        .with_catalog(&catalog)
        .build()?;
    supervisor
        .run_until_shutdown(
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
            Duration::from_secs(30),
        )
        .await?;
    pool.close().await;
    Ok(())
}
