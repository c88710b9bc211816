//! The admin subcommands against real databases: what they print (`--json`, read back), their
//! exit statuses, and the engine's error codes when it refuses.

use std::process::Command;
use std::time::{Duration, Instant};

use runledger_engine::core::jobs::{
    StepKey, WorkflowRunEnqueueBuilder, WorkflowStepEnqueue, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    ClaimRequest, JobDefinitionUpsert, JobEnqueue, claim_jobs, complete_job_success, enqueue_job,
    enqueue_workflow_run, job_schedule, upsert_job_definition, upsert_job_schedule,
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

/// Runs the binary with `DATABASE_URL` naming `database`, or unset.
fn execute(args: &[&str], database: Option<String>) -> Ran {
    let mut command = Command::new(BINARY);
    command.args(args);
    match database {
        Some(url) => command.env("DATABASE_URL", url),
        None => command.env_remove("DATABASE_URL"),
    };
    let output = command.output().unwrap();
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs the binary against the test's database.
fn run(pool: &PgPool, args: &[&str]) -> Ran {
    execute(args, Some(database_url(pool)))
}

/// Runs the binary without a database.
fn offline(args: &[&str]) -> Ran {
    execute(args, None)
}

/// The element of a JSON array whose `key` is `value`.
fn find<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|element| element[key] == value)
        .unwrap_or_else(|| panic!("no {key} = {value} in {list}"))
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
async fn jobs_explain_names_each_rule_that_holds_a_job(pool: PgPool) {
    upsert_job_definition(&pool, &JobDefinitionUpsert::new("reports.render"))
        .await
        .unwrap();
    let payload = json!({});
    let job = enqueue_job(
        &pool,
        &JobEnqueue::new("reports.render", &payload).delay(Duration::from_secs(3_600)),
    )
    .await
    .unwrap()
    .id
    .to_string();
    ok(&pool, &["queues", "pause", "default"]);

    let explained = ok(&pool, &["jobs", "explain", &job]);
    assert_eq!(explained["status"], "PENDING");
    let reasons: Vec<&str> = explained["holds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hold| hold["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["scheduled", "queue_paused", "no_live_worker"]);
    let text = run(&pool, &["jobs", "explain", &job]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("held: queue `default` is paused")
            && text
                .stdout
                .contains("held: no live worker runs `reports.render` from queue `default`"),
        "{}",
        text.stdout
    );

    let unknown = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        refused(&pool, &["jobs", "explain", &unknown]),
        "job.not_found"
    );
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
async fn a_job_shows_its_queue_and_resource_key_in_every_output(pool: PgPool) {
    let mut definition = JobDefinitionUpsert::new("emails.digest");
    definition.queue = "emails".into();
    upsert_job_definition(&pool, &definition).await.unwrap();
    let payload = json!({});
    let job = enqueue_job(
        &pool,
        &JobEnqueue::new("emails.digest", &payload).resource_key("account:42"),
    )
    .await
    .unwrap()
    .id
    .to_string();

    let listed = ok(&pool, &["jobs", "list"]);
    assert_eq!(listed["jobs"][0]["queue"], "emails");
    assert_eq!(listed["jobs"][0]["resource_key"], "account:42");
    let shown = ok(&pool, &["jobs", "show", &job]);
    assert_eq!(shown["id"], job.as_str());
    assert_eq!(shown["queue"], "emails");
    assert_eq!(shown["resource_key"], "account:42");
    assert_eq!(shown["stage"], "QUEUED");
    assert_eq!(shown["attempts"], json!([]));
    let canceled = ok(&pool, &["jobs", "cancel", &job]);
    assert_eq!(canceled["queue"], "emails");
    assert_eq!(canceled["resource_key"], "account:42");

    let table = run(&pool, &["jobs", "list"]);
    let header = table.stdout.lines().next().unwrap();
    assert!(
        header.contains("QUEUE") && header.contains("RESOURCE"),
        "{}",
        table.stdout
    );
    let row = table.stdout.lines().nth(1).unwrap();
    assert!(
        row.contains("emails") && row.contains("account:42"),
        "{row}"
    );
    let detail = run(&pool, &["jobs", "show", &job]);
    assert!(
        detail.stdout.contains("queue         emails")
            && detail.stdout.contains("resource key  account:42"),
        "{}",
        detail.stdout
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

/// The step keys of a `workflows show` answer, in its order.
fn step_keys(shown: &Value) -> Vec<&str> {
    shown["step_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["step_key"].as_str().unwrap())
        .collect()
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
    let keys = step_keys(&shown);
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&"crawl") && keys.contains(&"score"));
    let score = find(&shown["step_list"], "step_key", "score");
    assert_eq!(score["kind"], "JOB");
    assert_eq!(
        score["dependencies"],
        json!([{"step_key": "crawl", "condition": "SUCCESS"}])
    );
    assert_eq!(shown["steps"]["total"], 2);
    assert_eq!(shown["next_cursor"], Value::Null, "one page holds both");

    // A page at a time: the first step and a cursor, then the other and none.
    let first = ok(&pool, &["workflows", "show", &run, "--limit", "1"]);
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    assert_eq!(first["step_list"][0]["id"], cursor.as_str());
    let rest = ok(&pool, &["workflows", "show", &run, "--after", &cursor]);
    let mut paged = step_keys(&first);
    assert_eq!(paged.len(), 1);
    paged.extend(step_keys(&rest));
    assert_eq!(
        paged, keys,
        "the two pages hold the steps of the whole run, in order"
    );
    assert_eq!(rest["next_cursor"], Value::Null);

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
        if due["succeeded_jobs"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "never prunable: {due}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut args = vec!["prune"];
    args.extend_from_slice(&retain);
    let pruned = ok(&pool, &args);
    assert_eq!(pruned["dry_run"], false);
    assert_eq!(pruned["succeeded_jobs"], 1);
    assert_eq!(pruned["dead_lettered_jobs"], 0);
    assert!(pruned["batches"].as_u64().unwrap() >= 1, "{pruned}");
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
    let emails = find(&stats["job_types"], "job_type", "emails.send");
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
        &["queues"],
        &["queues", "list"],
        &["queues", "pause"],
        &["queues", "resume"],
        &["queues", "limit"],
        &["prune"],
        &["stats"],
        &["completions"],
    ] {
        let mut args = path.to_vec();
        args.push("--help");
        let help = offline(&args);
        assert_eq!(help.code, 0, "{path:?}: {}", help.stderr);
        assert!(
            help.stdout.contains("Usage: runledger "),
            "{path:?}: {}",
            help.stdout
        );
    }
}

#[test]
fn a_missing_database_url_is_a_usage_error() {
    let ran = offline(&["--json", "stats"]);
    assert_eq!(ran.code, 2);
    assert_eq!(ran.error_code(), "cli.usage");
}

#[test]
fn status_flags_list_the_engines_statuses_in_help() {
    let jobs = offline(&["jobs", "list", "--help"]);
    assert_eq!(jobs.code, 0, "{}", jobs.stderr);
    assert!(
        jobs.stdout
            .contains("[possible values: pending, leased, succeeded, dead_lettered, canceled]"),
        "{}",
        jobs.stdout
    );
    let runs = offline(&["workflows", "list", "--help"]);
    assert!(
        runs.stdout.contains(
            "[possible values: running, waiting_for_external, succeeded, completed_with_errors, canceled]"
        ),
        "{}",
        runs.stdout
    );
}

#[test]
fn a_bad_status_is_refused_with_the_possible_values() {
    let refused = offline(&["jobs", "list", "--status", "done"]);
    assert_eq!(refused.code, 2, "bad usage");
    assert!(
        refused
            .stderr
            .contains("invalid value 'done' for '--status <STATUS>'")
            && refused
                .stderr
                .contains("[possible values: pending, leased, succeeded, dead_lettered, canceled]"),
        "{}",
        refused.stderr
    );
}

#[test]
fn completions_print_a_script_naming_the_subcommands() {
    let bash = offline(&["completions", "bash"]);
    assert_eq!(bash.code, 0, "{}", bash.stderr);
    for word in [
        "_runledger()",
        "jobs",
        "workflows",
        "gates",
        "queues",
        "completions",
    ] {
        assert!(
            bash.stdout.contains(word),
            "{word} missing:\n{}",
            bash.stdout
        );
    }
    assert!(
        bash.stdout
            .contains("pending leased succeeded dead_lettered canceled"),
        "statuses complete too:\n{}",
        bash.stdout
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let script = offline(&["completions", shell]);
        assert_eq!(script.code, 0, "{shell}: {}", script.stderr);
        assert!(
            script.stdout.contains("workflows"),
            "{shell}: {}",
            script.stdout
        );
    }
    assert_eq!(
        offline(&["completions", "tcsh"]).code,
        2,
        "an unknown shell is bad usage"
    );
}
