//! Tests of the real `runledger` binary against seeded databases: the dashboard on a
//! pseudo-terminal (switching screens and reading the rendered text, quitting on signals and
//! hang-ups), and the admin subcommands (exit statuses, `--json` read back).

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod cli;
mod dashboard;
mod terminal;

use runledger_engine::core::jobs::{JobId, JobLogLevel, JobLogLine, WorkflowDagBuilder};
use runledger_engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, append_job_logs, enqueue_job, enqueue_workflow_run,
    upsert_job_definition, upsert_job_runtime_config,
};
use serde_json::json;
use sqlx::PgPool;

/// The binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_runledger");

/// The URL of the test's own database (same server as `DATABASE_URL`).
pub fn database_url(pool: &PgPool) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL is set");
    let name = pool.connect_options().get_database().unwrap().to_owned();
    let (without_query, query) = match base.split_once('?') {
        Some((url, query)) => (url.to_owned(), format!("?{query}")),
        None => (base.clone(), String::new()),
    };
    let (server, _) = without_query.rsplit_once('/').unwrap();
    format!("{server}/{name}{query}")
}

/// Three job types (one with a runtime config), a pending job with a log line, and a
/// two-step workflow run; returns the job.
pub async fn seed(pool: &PgPool) -> JobId {
    for job_type in ["emails.send", "profiles.crawl", "profiles.score"] {
        upsert_job_definition(pool, &JobDefinitionUpsert::new(job_type))
            .await
            .unwrap();
    }
    upsert_job_runtime_config(pool, "emails.send", &json!({"batch": 25}))
        .await
        .unwrap();
    let payload = json!({"to": "ada@example.com"});
    let job = enqueue_job(pool, &JobEnqueue::new("emails.send", &payload))
        .await
        .unwrap();
    let stored = append_job_logs(
        pool,
        &[JobLogLine::new(
            job.id,
            1,
            JobLogLevel::Info,
            "smoke log line",
        )],
    )
    .await
    .unwrap();
    assert_eq!(stored, 1);
    let meta = json!({});
    let run = WorkflowDagBuilder::new("profiles.research", &meta)
        .job("crawl", "profiles.crawl", &payload)
        .unwrap()
        .job("score", "profiles.score", &payload)
        .unwrap()
        .after_success("score", ["crawl"])
        .unwrap()
        .build()
        .unwrap();
    enqueue_workflow_run(pool, &run).await.unwrap();
    job.id
}
