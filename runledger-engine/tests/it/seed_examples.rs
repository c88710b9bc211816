//! The original documentation's examples, with `runledger_core::` / `runledger_postgres::` /
//! `runledger_runtime::` rewritten to `runledger_engine::core::` / `::postgres::` /
//! `::runtime::`. They must keep compiling (this module) and behave as written (the test at
//! the bottom runs the worker example's catalog against a database).

#![allow(dead_code)]

use std::time::Duration;

use runledger_engine::core::jobs::{JobCompletion, JobContext, JobFailure, JobType};
use runledger_engine::core::prelude::async_trait;
use runledger_engine::runtime::Supervisor;
use runledger_engine::runtime::catalog::JobCatalog;
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::registry::JobHandler;
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;

struct SendEmail;

#[async_trait]
impl JobHandler for SendEmail {
    fn job_type(&self) -> JobType<'static> {
        JobType::new("jobs.email.send")
    }

    async fn execute(
        &self,
        _context: JobContext,
        _payload: Value,
    ) -> Result<JobCompletion, JobFailure> {
        Ok(JobCompletion::success())
    }
}

async fn run_worker() -> Result<(), Box<dyn std::error::Error>> {
    let pool = PgPoolOptions::new()
        .connect(&std::env::var("DATABASE_URL")?)
        .await?;
    runledger_engine::postgres::migrate_after_idempotency_cutover(&pool).await?;
    let catalog = JobCatalog::new().job("jobs.email.send", SendEmail);
    catalog.sync_definitions(&pool).await?;
    let supervisor = Supervisor::builder(&pool, JobsConfig::from_env())?
        .with_catalog(&catalog)
        .build()?;
    let shutdown_result = supervisor
        .run_until_shutdown(
            async {
                if let Err(error) = tokio::signal::ctrl_c().await {
                    eprintln!("failed to listen for shutdown signal: {error}");
                }
            },
            Duration::from_secs(30),
        )
        .await;
    pool.close().await;
    shutdown_result?;
    Ok(())
}

async fn enqueue_from_api(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    let payload = serde_json::json!({});
    let _job = runledger_engine::postgres::jobs::enqueue_job(
        &pool,
        &runledger_engine::postgres::jobs::JobEnqueue::new("jobs.email.send", &payload),
    )
    .await?;
    Ok(())
}

async fn workflow_dag(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    use runledger_engine::core::jobs::WorkflowDagBuilder;

    let metadata = serde_json::json!({"source": "api"});
    let crawl_payload = serde_json::json!({"profile_id": "p_123"});
    let classify_payload = serde_json::json!({"profile_id": "p_123"});
    let score_payload = serde_json::json!({"profile_id": "p_123"});
    let persist_payload = serde_json::json!({"profile_id": "p_123"});

    let run = WorkflowDagBuilder::new("profiles.research", &metadata)
        .idempotency_key("profile:p_123:research")
        .job("crawl", "profiles.crawl", &crawl_payload)?
        .job("classify", "profiles.classify", &classify_payload)?
        .after_success("classify", ["crawl"])?
        .job("score", "profiles.score", &score_payload)?
        .after_success("score", ["crawl"])?
        .job("persist", "profiles.persist", &persist_payload)?
        .after_success("persist", ["classify", "score"])?
        .build()?;
    let _workflow_run = runledger_engine::postgres::jobs::enqueue_workflow_run(&pool, &run).await?;

    let run = WorkflowDagBuilder::new("profiles.research", &metadata)
        .idempotency_key("profile:p_123:research")
        .job("crawl", "profiles.crawl", &crawl_payload)?
        .job("persist", "profiles.persist", &persist_payload)?
        .after_success("persist", ["crawl"])?
        .result_step("persist")?
        .build()?;
    let handle = runledger_engine::postgres::jobs::enqueue_workflow_run_handle(&pool, &run).await?;
    let _result = handle.get_result(Default::default()).await?;
    Ok(())
}

async fn external_gate(
    pool: sqlx::PgPool,
    workflow_run_id: runledger_engine::core::jobs::WorkflowRunId,
) -> Result<(), Box<dyn std::error::Error>> {
    use runledger_engine::core::jobs::{StepKey, WorkflowStepStatus};
    use runledger_engine::postgres::jobs::CompleteExternalWorkflowStepInput;

    let approval_output = serde_json::json!({ "approved_by": "ops" });

    runledger_engine::postgres::jobs::complete_external_workflow_step(
        &pool,
        &CompleteExternalWorkflowStepInput {
            workflow_run_id,
            organization_id: None,
            step_key: StepKey::new("approval"),
            terminal_status: WorkflowStepStatus::Succeeded,
            status_reason: Some("approved"),
            last_error_code: None,
            last_error_message: None,
            output: Some(&approval_output),
        },
    )
    .await?;
    Ok(())
}

struct Flags {
    hourly_refresh: bool,
}

async fn catalog_schedules(
    pool: sqlx::PgPool,
    flags: Flags,
) -> Result<(), Box<dyn std::error::Error>> {
    use runledger_engine::runtime::catalog::{CatalogJobScheduleSpec, JobCatalog};

    struct RefreshHandler;
    #[async_trait]
    impl JobHandler for RefreshHandler {
        fn job_type(&self) -> JobType<'static> {
            JobType::new("profiles.refresh")
        }
        async fn execute(&self, _: JobContext, _: Value) -> Result<JobCompletion, JobFailure> {
            Ok(JobCompletion::success())
        }
    }

    let catalog = JobCatalog::new()
        .job("profiles.refresh", RefreshHandler)
        .schedule(CatalogJobScheduleSpec {
            name: "profiles.refresh.hourly",
            job_type: "profiles.refresh",
            cron_expr: "0 0 * * * *",
            payload_template: &serde_json::json!({}),
            is_active: flags.hourly_refresh,
            organization_id: None,
            max_jitter_seconds: 0,
            next_fire_at: None,
        });

    catalog.sync_definitions(&pool).await?;
    catalog.sync_schedules(&pool).await?;

    let scope = catalog.schedule_sync_scope()?;
    catalog.sync_schedules_exact(&pool, &scope).await?;
    Ok(())
}

fn definition_overrides() -> JobCatalog {
    use runledger_engine::runtime::catalog::JobCatalogDefinitionOverrides;

    struct ExtractDocuments;
    struct CleanupAuth;
    #[async_trait]
    impl JobHandler for ExtractDocuments {
        fn job_type(&self) -> JobType<'static> {
            JobType::new("documents.extract")
        }
        async fn execute(&self, _: JobContext, _: Value) -> Result<JobCompletion, JobFailure> {
            Ok(JobCompletion::success())
        }
    }
    #[async_trait]
    impl JobHandler for CleanupAuth {
        fn job_type(&self) -> JobType<'static> {
            JobType::new("auth.cleanup")
        }
        async fn execute(&self, _: JobContext, _: Value) -> Result<JobCompletion, JobFailure> {
            Ok(JobCompletion::success())
        }
    }

    JobCatalog::new()
        .job_with_definition_overrides(
            "documents.extract",
            ExtractDocuments,
            JobCatalogDefinitionOverrides::new()
                .timeout_seconds(600)
                .priority(20),
        )
        .job_with_definition_overrides(
            "auth.cleanup",
            CleanupAuth,
            JobCatalogDefinitionOverrides::new()
                .timeout_seconds(60)
                .priority(0),
        )
}

async fn runtime_crate_docs(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    use runledger_engine::core::prelude::*;
    use runledger_engine::runtime::prelude::*;

    struct MyHandler;
    #[async_trait]
    impl JobHandler for MyHandler {
        fn job_type(&self) -> JobType<'static> {
            JobType::new("my.handler")
        }
        async fn execute(
            &self,
            _: JobContext,
            _: serde_json::Value,
        ) -> Result<JobCompletion, JobFailure> {
            Ok(JobCompletion::success())
        }
    }

    let catalog = JobCatalog::new().handler(MyHandler);
    catalog.sync_definitions(&pool).await?;
    let supervisor = Supervisor::builder_from_env(&pool)?
        .with_catalog(&catalog)
        .build()?;

    supervisor
        .run_until_shutdown(std::future::pending::<()>(), Duration::from_secs(30))
        .await?;
    Ok(())
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_documented_catalog_overrides_sync_as_described(pool: sqlx::PgPool) {
    definition_overrides()
        .sync_definitions(&pool)
        .await
        .unwrap();
    let extract = runledger_engine::postgres::jobs::get_job_definition(&pool, "documents.extract")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((extract.timeout_seconds, extract.priority), (600, 20));
    let cleanup = runledger_engine::postgres::jobs::get_job_definition(&pool, "auth.cleanup")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((cleanup.timeout_seconds, cleanup.priority), (60, 0));
}
