//! The admin subcommands against real databases: what they print (`--json`, read back), their
//! exit statuses, and the engine's error codes when it refuses.

use std::process::Command;
use std::time::{Duration, Instant};

use runledger_engine::core::jobs::{
    StepKey, WorkflowRunEnqueueBuilder, WorkflowStepEnqueue, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    ClaimRequest, JobEnqueue, claim_jobs, complete_job_success, enqueue_job, enqueue_workflow_run,
    job_schedule, upsert_job_schedule,
};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::{BINARY, database_url, seed};

/// What one command did.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// The JSON document on stdout.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|err| {
            panic!(
                "stdout is not JSON ({err}): {}\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// The error code of a `--json` failure on stderr.
    fn error_code(&self) -> String {
        let error: Value = serde_json::from_str(self.stderr.trim())
            .unwrap_or_else(|err| panic!("stderr is not JSON ({err}): {}", self.stderr));
        error["error"]["code"].as_str().unwrap().to_owned()
    }
}

fn run(pool: &PgPool, args: &[&str]) -> Ran {
    let output = Command::new(BINARY)
        .args(args)
        .env("DATABASE_URL", database_url(pool))
        .output()
        .unwrap();
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs with `--json` and expects success.
fn ok(pool: &PgPool, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let ran = run(pool, &all);
    assert_eq!(ran.code, 0, "{args:?}: {}{}", ran.stdout, ran.stderr);
    ran.json()
}

/// Runs with `--json`, expects exit status 1 and returns the error code.
fn refused(pool: &PgPool, args: &[&str]) -> String {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let ran = run(pool, &all);
    assert_eq!(ran.code, 1, "{args:?}: {}{}", ran.stdout, ran.stderr);
    ran.error_code()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn jobs_list_and_show_print_json_that_reads_back(pool: PgPool) {
    let job = seed(&pool).await.to_string();

    let list = ok(&pool, &["jobs", "list", "--type", "emails"]);
    let jobs = list["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], job.as_str());
    assert_eq!(jobs[0]["status"], "PENDING");
    assert_eq!(jobs[0]["payload"]["to"], "ada@example.com");
    let pending = ok(
        &pool,
        &["jobs", "list", "--status", "pending", "--limit", "1"],
    );
    assert_eq!(pending["jobs"].as_array().unwrap().len(), 1);
    assert!(
        pending["next_cursor"].is_string(),
        "a full page has a cursor"
    );

    let shown = ok(&pool, &["jobs", "show", &job]);
    assert_eq!(shown["job_type"], "emails.send");
    assert_eq!(shown["logs"][0]["message"], "smoke log line");

    let text = run(&pool, &["jobs", "list"]);
    assert_eq!(text.code, 0);
    assert!(
        text.stdout.starts_with("ID") && text.stdout.contains("emails.send"),
        "{}",
        text.stdout
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn jobs_cancel_and_requeue_go_through_the_engine_and_report_its_codes(pool: PgPool) {
    let job = seed(&pool).await.to_string();

    let canceled = ok(&pool, &["jobs", "cancel", &job]);
    assert_eq!(canceled["status"], "CANCELED");
    assert_eq!(
        refused(&pool, &["jobs", "cancel", &job]),
        "job.cancel_invalid_state"
    );

    let requeued = ok(&pool, &["jobs", "requeue", &job]);
    assert_eq!(requeued["status"], "PENDING");
    assert_eq!(
        refused(&pool, &["jobs", "requeue", &job]),
        "job.requeue_invalid_state"
    );

    let unknown = uuid::Uuid::now_v7().to_string();
    assert_eq!(refused(&pool, &["jobs", "show", &unknown]), "job.not_found");
    let other_org = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        refused(&pool, &["--org", &other_org, "jobs", "cancel", &job]),
        "job.not_found",
        "another organization's job is not there for a scoped operator"
    );

    let step_job: String = sqlx::query_scalar(
        "SELECT id::text FROM runledger.job_queue WHERE workflow_run_id IS NOT NULL LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        refused(&pool, &["jobs", "cancel", &step_job]),
        "job.workflow_cancel_not_supported"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn workflows_list_show_and_cancel(pool: PgPool) {
    seed(&pool).await;
    let list = ok(&pool, &["workflows", "list"]);
    let runs = list["workflow_runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["steps"]["total"], 2);
    let run = runs[0]["id"].as_str().unwrap().to_owned();

    let shown = ok(&pool, &["workflows", "show", &run]);
    let keys: Vec<&str> = shown["step_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["step_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&"crawl") && keys.contains(&"score"));

    let canceled = ok(&pool, &["workflows", "cancel", &run]);
    assert_eq!(canceled["status"], "CANCELED");
    let unknown = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        refused(&pool, &["workflows", "cancel", &unknown]),
        "workflow.run_not_found"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn gates_complete_and_fail_with_the_engines_idempotency(pool: PgPool) {
    let meta = json!({});
    let request = WorkflowRunEnqueueBuilder::new(WorkflowType::new("orders.approval"), &meta)
        .step(WorkflowStepEnqueue::external(StepKey::new("approve")))
        .step(WorkflowStepEnqueue::external(StepKey::new("review")))
        .build()
        .unwrap();
    let run = enqueue_workflow_run(&pool, &request)
        .await
        .unwrap()
        .id
        .to_string();

    let done = ok(
        &pool,
        &[
            "gates",
            "complete",
            &run,
            "approve",
            "--output",
            r#"{"by":"ada"}"#,
        ],
    );
    assert_eq!(done["status"], "SUCCEEDED");
    assert_eq!(done["already_completed"], false);
    let again = ok(
        &pool,
        &[
            "gates",
            "complete",
            &run,
            "approve",
            "--output",
            r#"{"by":"ada"}"#,
        ],
    );
    assert_eq!(again["already_completed"], true);
    assert_eq!(
        refused(
            &pool,
            &[
                "gates",
                "complete",
                &run,
                "approve",
                "--output",
                r#"{"by":"bob"}"#
            ]
        ),
        "workflow.external_step_conflicting_output_retry"
    );

    let failed = ok(
        &pool,
        &["gates", "fail", &run, "review", "--code", "review.rejected"],
    );
    assert_eq!(failed["status"], "FAILED");
    let shown = ok(&pool, &["workflows", "show", &run]);
    assert_eq!(shown["status"], "COMPLETED_WITH_ERRORS");
    assert_eq!(
        refused(&pool, &["gates", "complete", &run, "nope"]),
        "workflow.step_not_found"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn schedules_list_pause_and_resume(pool: PgPool) {
    seed(&pool).await;
    upsert_job_schedule(
        &pool,
        &job_schedule("reports.nightly", "emails.send", "0 0 3 * * *"),
    )
    .await
    .unwrap();

    let list = ok(&pool, &["schedules", "list"]);
    assert_eq!(list["schedules"][0]["name"], "reports.nightly");
    assert_eq!(list["schedules"][0]["is_active"], true);
    assert_eq!(
        ok(&pool, &["schedules", "pause", "reports.nightly"])["is_active"],
        false
    );
    assert_eq!(
        ok(&pool, &["schedules", "resume", "reports.nightly"])["is_active"],
        true
    );
    assert_eq!(
        refused(&pool, &["schedules", "pause", "nope"]),
        "job_schedule.not_found"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn queues_pause_resume_limit_and_list(pool: PgPool) {
    assert_eq!(ok(&pool, &["queues", "pause", "emails"])["is_paused"], true);
    let limited = ok(&pool, &["queues", "limit", "emails", "3"]);
    assert_eq!(limited["global_concurrency"], 3);
    assert_eq!(limited["is_paused"], true);
    let list = ok(&pool, &["queues", "list"]);
    assert_eq!(list["queues"][0]["name"], "emails");
    assert_eq!(list["queues"][0]["global_concurrency"], 3);
    let resumed = ok(&pool, &["queues", "resume", "emails"]);
    assert_eq!(resumed["is_paused"], false);
    assert_eq!(
        ok(&pool, &["queues", "limit", "emails", "--none"])["global_concurrency"],
        Value::Null
    );
    assert_eq!(
        refused(&pool, &["queues", "pause", " "]),
        "job.invalid_queue"
    );
    assert_eq!(
        run(&pool, &["queues", "limit", "emails", "0"]).code,
        2,
        "bad usage"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn prune_counts_with_dry_run_then_deletes(pool: PgPool) {
    seed(&pool).await;
    let payload = json!({});
    let done = enqueue_job(&pool, &JobEnqueue::new("profiles.score", &payload))
        .await
        .unwrap()
        .id;
    let types = ["profiles.score".to_owned()];
    let leased = claim_jobs(
        &pool,
        &ClaimRequest::new("cli-test", 10, Duration::from_secs(60)).job_types(&types),
    )
    .await
    .unwrap();
    complete_job_success(&pool, &leased[0].lease(), None)
        .await
        .unwrap();

    // Kept a second after it succeeded: wait until the dry run sees it.
    let retain = ["--retain-succeeded-seconds", "1"];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut args = vec!["prune", "--dry-run"];
        args.extend_from_slice(&retain);
        let due = ok(&pool, &args);
        assert_eq!(due["dry_run"], true);
        if due["jobs"]["succeeded"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "never prunable: {due}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut args = vec!["prune"];
    args.extend_from_slice(&retain);
    let pruned = ok(&pool, &args);
    assert_eq!(pruned["jobs"]["succeeded"], 1);
    assert_eq!(pruned["jobs"]["total"], 1);
    assert_eq!(
        refused(&pool, &["jobs", "show", &done.to_string()]),
        "job.not_found"
    );
}

#[sqlx::test(migrations = false)]
async fn migrate_check_schema_and_stats(pool: PgPool) {
    let missing = run(&pool, &["--json", "check-schema"]);
    assert_eq!(missing.code, 3, "{}", missing.stderr);
    assert_eq!(missing.error_code(), "schema.missing_history");

    assert_eq!(ok(&pool, &["migrate"])["schema"], "up to date");
    assert_eq!(ok(&pool, &["check-schema"])["schema"], "compatible");

    seed(&pool).await;
    let stats = ok(&pool, &["stats"]);
    let emails = stats["job_types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["job_type"] == "emails.send")
        .unwrap();
    assert_eq!(emails["pending"], 1);
    assert_eq!(stats["workflow_runs"]["running"], 1);
}

#[test]
fn every_subcommand_has_help() {
    for path in [
        &[][..],
        &["tui"],
        &["migrate"],
        &["check-schema"],
        &["jobs"],
        &["jobs", "list"],
        &["jobs", "show"],
        &["jobs", "cancel"],
        &["jobs", "requeue"],
        &["workflows"],
        &["workflows", "list"],
        &["workflows", "show"],
        &["workflows", "cancel"],
        &["gates"],
        &["gates", "complete"],
        &["gates", "fail"],
        &["schedules"],
        &["schedules", "list"],
        &["schedules", "pause"],
        &["schedules", "resume"],
        &["prune"],
        &["stats"],
    ] {
        let output = Command::new(BINARY)
            .args(path)
            .arg("--help")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{path:?}");
        assert!(
            stdout.contains("Usage: runledger-tui"),
            "{path:?}: {stdout}"
        );
    }
}

#[test]
fn a_missing_database_url_is_a_usage_error() {
    let output = Command::new(BINARY)
        .args(["--json", "stats"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let error: Value = serde_json::from_slice(&output.stderr).unwrap();
    assert_eq!(error["error"]["code"], "cli.usage");
}
