//! Smoke tests of the real `runledger-tui` binary: started in a pseudo-terminal (driven by
//! `pty_driver.py`, which needs only python3) against a seeded database, switching screens and
//! reading the rendered text; plus the startup schema check.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::path::Path;
use std::process::Command;

use runledger_engine::core::jobs::{JobLogLevel, JobLogLine, WorkflowDagBuilder};
use runledger_engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, append_job_logs, enqueue_job, enqueue_workflow_run,
    upsert_job_definition, upsert_job_runtime_config,
};
use serde_json::json;
use sqlx::PgPool;

const BINARY: &str = env!("CARGO_BIN_EXE_runledger-tui");

/// The URL of the test's own database (same server as `DATABASE_URL`).
fn database_url(pool: &PgPool) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL is set");
    let name = pool.connect_options().get_database().unwrap().to_owned();
    let (without_query, query) = match base.split_once('?') {
        Some((url, query)) => (url.to_owned(), format!("?{query}")),
        None => (base.clone(), String::new()),
    };
    let (server, _) = without_query.rsplit_once('/').unwrap();
    format!("{server}/{name}{query}")
}

fn drive(args: &[&str], steps: &serde_json::Value) -> String {
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/pty_driver.py");
    let output = Command::new("python3")
        .arg(driver)
        .arg(BINARY)
        .arg(steps.to_string())
        .args(args)
        .output()
        .expect("python3 runs (the smoke test needs it)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "driver failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

async fn seed(pool: &PgPool) {
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
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn binary_shows_every_screen_of_a_seeded_database_and_restores_the_terminal(pool: PgPool) {
    seed(&pool).await;
    let url = database_url(&pool);
    let steps = json!([
        ["wait", "Dashboard"],
        ["wait", "emails.send"],
        ["wait", "live in"],
        ["key", "2"],
        ["wait", "2 matching"],
        ["wait", "profiles.crawl"],
        ["key", "/"],
        ["key", "\r"],
        ["key", "f"],
        ["wait", "status: PENDING"],
        ["key", "t"],
        ["key", "emails"],
        ["key", "\r"],
        ["wait", "type ~ emails"],
        ["wait", " 1 matching "],
        ["key", "\r"],
        ["wait", "Attempts+Events"],
        ["key", "]"],
        ["key", "]"],
        ["wait", "smoke log line"],
        ["key", "]"],
        ["wait", "\"to\": \"ada@example.com\""],
        ["key", "h"],
        ["wait", "NEXT/FINISHED"],
        ["key", "3"],
        ["wait", "profiles.research"],
        ["wait", "0/0/2"],
        ["key", "\r"],
        ["wait", "Workflow run"],
        ["wait", "crawl"],
        ["wait", "BLOCKED"],
        ["key", "4"],
        ["wait", "{\"batch\":25}"],
        ["key", "?"],
        ["wait", "Keys (any key closes)"],
        ["key", "x"],
        ["wait", "RUNTIME CONFIG"],
        ["quit"]
    ]);
    let out = drive(&["--database-url", &url, "--refresh-ms", "500"], &steps);
    assert!(out.contains("EXIT: 0"), "{out}");
    assert!(out.contains("RESTORED: True"), "{out}");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn binary_keeps_drawing_and_reports_reconnecting_when_the_database_is_unreachable(
    _pool: PgPool,
) {
    let steps = json!([
        ["wait", "reconnecting, try"],
        ["wait", "cannot load"],
        ["key", "2"],
        ["wait", "Queue"],
        ["quit"]
    ]);
    let out = drive(
        &[
            "--database-url",
            "postgres://postgres@127.0.0.1:1/nowhere",
            "--skip-schema-check",
        ],
        &steps,
    );
    assert!(out.contains("EXIT: 0"), "{out}");
    assert!(out.contains("RESTORED: True"), "{out}");
}

#[sqlx::test(migrations = false)]
async fn binary_refuses_a_database_without_the_schema(pool: PgPool) {
    let output = Command::new(BINARY)
        .args(["--database-url", &database_url(&pool)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("schema check failed (schema.missing_history)"),
        "{stderr}"
    );
}

#[test]
fn binary_refuses_bad_flags_with_usage() {
    let output = Command::new(BINARY)
        .args(["--limit", "0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--limit: expected 1..=1000") && stderr.contains("USAGE"),
        "{stderr}"
    );
}

/// The dashboard against an unreachable database: no seeding needed to reach a drawn screen.
const UNREACHABLE: [&str; 3] = [
    "--database-url",
    "postgres://postgres@127.0.0.1:1/nowhere",
    "--skip-schema-check",
];

#[test]
fn binary_exits_when_its_terminal_hangs_up() {
    for _ in 0..3 {
        let out = drive(
            &UNREACHABLE,
            &json!([["wait", "reconnecting, try"], ["hangup"]]),
        );
        assert!(out.contains("EXIT: 0"), "{out}");
    }
}

#[test]
fn binary_quits_cleanly_on_sigterm_and_sighup() {
    for signal in ["TERM", "HUP"] {
        let out = drive(
            &UNREACHABLE,
            &json!([["wait", "reconnecting, try"], ["signal", signal]]),
        );
        assert!(out.contains("EXIT: 0"), "SIG{signal}: {out}");
        assert!(out.contains("RESTORED: True"), "SIG{signal}: {out}");
    }
}
