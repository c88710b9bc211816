//! Render tests: each screen drawn from a fixed snapshot into a `TestBackend`, including the
//! empty, loading and error states.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use runledger_engine::core::jobs::{
    JobId, JobStatus, WorkflowRunId, WorkflowRunStatus, WorkflowStepStatus,
};
use serde_json::json;

use super::Clock;
use crate::app::frame::draw;
use crate::app::{App, AppConfig};
use crate::model::{
    ActivityPoint, DashboardData, Data, DefinitionRow, HistoryLine, IntentTotals, JobDetailData,
    JobRow, MetricRow, PollerEvent, QueueData, RunRow, Snapshot, StepRow, WorkflowDetailData,
    WorkflowsData,
};

pub(crate) fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

pub(crate) fn app() -> App {
    App::new(AppConfig {
        organization: None,
        limit: 200,
        refresh: Duration::from_secs(2),
    })
}

/// Feeds `data` to `app` as the answer to its current query.
pub(crate) fn load(app: &mut App, data: Data) {
    app.apply(PollerEvent::Snapshot(Box::new(Snapshot {
        query: app.query(),
        data,
        fetched_at: Instant::now(),
        elapsed: Duration::from_millis(7),
    })));
}

pub(crate) fn press(app: &mut App, code: KeyCode) -> Vec<crate::app::Effect> {
    app.handle_key(KeyEvent::from(code))
}

pub(crate) fn render(app: &App) -> String {
    render_sized(app, 160, 30)
}

fn render_sized(app: &App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    let clock = Clock {
        now: Instant::now(),
        utc: at() + chrono::Duration::seconds(90),
    };
    terminal.draw(|frame| draw(frame, app, clock)).unwrap();
    let buffer = terminal.backend().buffer();
    buffer
        .content()
        .chunks(usize::from(width))
        .map(|row| {
            row.iter()
                .map(|cell| cell.symbol())
                .collect::<String>()
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn job(n: u128, job_type: &str, status: JobStatus) -> JobRow {
    let mut job = JobRow::new(JobId(uuid::Uuid::from_u128(n)), job_type, status, at());
    job.attempts_used = 1;
    job
}

pub(crate) fn metrics() -> DashboardData {
    DashboardData {
        // Sixty minutes: a burst of successes and its backlog draining, two dead letters.
        activity: (0..60_u64)
            .map(|minute| ActivityPoint {
                succeeded: if (50..55).contains(&minute) { 100 } else { 0 },
                dead_lettered: u64::from(minute == 52) * 2,
                queue_depth: if minute < 50 {
                    500
                } else {
                    500 - (minute - 49) * 50
                },
            })
            .collect(),
        metrics: vec![
            MetricRow {
                job_type: "emails.send".to_owned(),
                enabled: true,
                pending: 1200,
                ready: 1100,
                oldest_ready_at: Some(at()),
                leased: 8,
                stale_leases: 0,
                succeeded_24h: 54321,
                dead_lettered_24h: 0,
                p50_ms: Some(12.0),
                p95_ms: Some(340.0),
                panicked_24h: 0,
            },
            MetricRow {
                job_type: "reports.render".to_owned(),
                enabled: false,
                stale_leases: 2,
                dead_lettered_24h: 3,
                panicked_24h: 1,
                ..MetricRow::default()
            },
        ],
        runs_running: 4,
        runs_waiting: 1,
        runs_with_errors: 2,
        intents: IntentTotals {
            pending: 7,
            deferred: 2,
            oldest_pending_at: Some(at()),
            promoted_24h: 40,
            conflicted_24h: 1,
        },
    }
}

pub(crate) fn queue_data() -> QueueData {
    let mut failed = job(2, "emails.send", JobStatus::DeadLettered);
    failed.last_error_code = Some("smtp.rejected".to_owned());
    failed.workflow_run_id = Some(WorkflowRunId(uuid::Uuid::from_u128(77)));
    failed.queue = "emails".to_owned();
    failed.resource_key = Some("account:42".to_owned());
    QueueData {
        jobs: vec![job(3, "reports.render", JobStatus::Pending), failed],
        next_cursor: Some(JobId(uuid::Uuid::from_u128(2))),
        total: 10_000,
    }
}

pub(crate) fn run_row(n: u128) -> RunRow {
    RunRow {
        id: WorkflowRunId(uuid::Uuid::from_u128(n)),
        workflow_type: "profiles.research".to_owned(),
        status: WorkflowRunStatus::Running,
        organization_id: None,
        created_at: at(),
        finished_at: None,
        status_reason: None,
        progress: Some((1, 0, 4)),
        metadata: json!({"source": "api"}),
        result: None,
    }
}

pub(crate) fn workflow_detail() -> WorkflowDetailData {
    let step = |key: &str, status, deps: &[&str], job: Option<u128>| StepRow {
        key: key.to_owned(),
        kind: "profiles.step".to_owned(),
        status,
        job_id: job.map(|n| JobId(uuid::Uuid::from_u128(n))),
        dependencies: deps
            .iter()
            .map(|d| ((*d).to_owned(), "SUCCESS".to_owned()))
            .collect(),
        dependency_count: deps.len() as i64,
        error: None,
    };
    WorkflowDetailData {
        run: run_row(77),
        steps: vec![
            step("crawl", WorkflowStepStatus::Succeeded, &[], Some(31)),
            step(
                "classify",
                WorkflowStepStatus::Running,
                &["crawl"],
                Some(32),
            ),
            step(
                "persist",
                WorkflowStepStatus::Blocked,
                &["classify", "score"],
                None,
            ),
        ],
        next_cursor: None,
    }
}

pub(crate) fn job_detail() -> JobDetailData {
    let mut job = job(2, "emails.send", JobStatus::DeadLettered);
    job.payload = json!({"to": "ada@example.com", "subject": "hello"});
    job.progress =
        Some(json!({"stage": "render", "completed": 3, "total": 4, "message": "smtp next"}));
    job.last_error_code = Some("smtp.rejected".to_owned());
    job.queue = "emails".to_owned();
    job.resource_key = Some("account:42".to_owned());
    let line = |label: &str, text: &str| HistoryLine {
        at: at(),
        attempt: Some(1),
        label: label.to_owned(),
        text: text.to_owned(),
    };
    JobDetailData {
        job,
        attempts: vec![line("FAILED", "TERMINAL smtp.rejected mailbox unknown")],
        events: vec![line("DEAD_LETTERED", "{\"failure_kind\":\"TERMINAL\"}")],
        dead_letters: vec![line("TERMINAL", "smtp.rejected mailbox unknown")],
        logs: vec![
            line("INFO", "rendering template"),
            line("ERROR", "smtp server said 550"),
        ],
        holds: Vec::new(),
    }
}

#[test]
fn dashboard_shows_metrics_per_type_and_run_counters() {
    let mut app = app();
    load(&mut app, Data::Dashboard(metrics()));
    let screen = render(&app);
    assert!(screen.contains(" 1 Dashboard "), "{screen}");
    assert!(screen.contains("live in 7 ms"), "{screen}");
    assert!(
        screen.contains("pending 1200  ready 1100  leased 8  stale leases 2"),
        "{screen}"
    );
    assert!(
        screen.contains("running 4  waiting 1  with errors 2"),
        "{screen}"
    );
    assert!(screen.contains("panicked 24h 1"), "{screen}");
    assert!(
        screen.contains(
            "intents: pending 7  oldest 1m 30s  deferred 2  promoted 24h 40  conflicted 24h 1"
        ),
        "{screen}"
    );
    let row = screen.lines().find(|l| l.contains("emails.send")).unwrap();
    for cell in ["yes", "1200", "1100", "1m 30s", "54321", "12", "340"] {
        assert!(row.contains(cell), "{cell} missing in {row}");
    }
    assert!(screen.contains("reports.render"), "{screen}");
}

#[test]
fn dashboard_charts_the_last_hour() {
    let mut app = app();
    load(&mut app, Data::Dashboard(metrics()));
    let screen = render(&app);
    assert!(
        screen.contains("succeeded/min · 500 in 1h, peak 100"),
        "{screen}"
    );
    assert!(
        screen.contains("dead-lettered/min · 2 in 1h, peak 2"),
        "{screen}"
    );
    assert!(screen.contains("queue depth · now 0"), "{screen}");
    // The burst shows as full bars at the right of the successes chart.
    let bars = screen
        .lines()
        .find(|line| line.contains('█'))
        .expect("a full bar");
    assert!(bars.contains("█████"), "{bars}");
}

#[test]
fn dashboard_empty_loading_and_error_states() {
    let mut app = app();
    assert!(render(&app).contains("loading..."));
    app.apply(PollerEvent::Failed {
        error: "storage.query_failed: connection refused".to_owned(),
        attempt: 3,
    });
    let screen = render(&app);
    assert!(
        screen.contains("reconnecting, try 3: storage.query_failed: connection refused"),
        "{screen}"
    );
    assert!(
        screen.contains("cannot load: storage.query_failed"),
        "{screen}"
    );
    load(&mut app, Data::Dashboard(DashboardData::default()));
    let screen = render(&app);
    assert!(screen.contains("no job definitions yet"), "{screen}");
    assert!(!screen.contains("reconnecting"), "{screen}");
}

#[test]
fn data_kept_while_reconnecting_is_marked_as_such() {
    let mut app = app();
    load(&mut app, Data::Dashboard(metrics()));
    app.apply(PollerEvent::Failed {
        error: "no answer within 10 s".to_owned(),
        attempt: 1,
    });
    let screen = render(&app);
    assert!(
        screen.contains("reconnecting, try 1: no answer within 10 s (updated 0s ago)"),
        "{screen}"
    );
    assert!(
        screen.contains("emails.send"),
        "the last data stays visible: {screen}"
    );
}

#[test]
fn stale_and_paused_states_show_in_the_title() {
    let mut app = app();
    load(&mut app, Data::Dashboard(metrics()));
    app.connection.last_ok = Instant::now().checked_sub(Duration::from_secs(60));
    assert!(render(&app).contains("stale (updated 1m 0s ago)"));
    press(&mut app, KeyCode::Char('p'));
    assert!(render(&app).contains("paused (updated"));
}

#[test]
fn queue_lists_jobs_with_filters_and_capped_count() {
    let mut app = app();
    press(&mut app, KeyCode::Char('2'));
    press(&mut app, KeyCode::Char('f'));
    load(&mut app, Data::Queue(queue_data()));
    let screen = render(&app);
    assert!(screen.contains("10000+ matching"), "{screen}");
    assert!(screen.contains("status: PENDING"), "{screen}");
    assert!(screen.contains("page 1"), "{screen}");
    assert!(
        screen.contains("00000000-0000-0000-0000-000000000003"),
        "{screen}"
    );
    let failed = screen
        .lines()
        .find(|l| l.contains("smtp.rejected"))
        .unwrap();
    assert!(
        failed.contains("DEAD_LETTERED") && failed.contains("1/5") && failed.contains("emails"),
        "{failed}"
    );
    assert!(screen.contains("QUEUE"), "{screen}");
    press(&mut app, KeyCode::Char('v'));
    // The wide table is for wide terminals: its organization, worker and run columns alone
    // take 84 of them.
    let wide = render_sized(&app, 240, 30);
    assert!(
        wide.contains("WORKER") && wide.contains("00000000-0000-0000-0000-00000000004d"),
        "{wide}"
    );
    let failed = wide.lines().find(|l| l.contains("smtp.rejected")).unwrap();
    assert!(failed.contains("account:42"), "{failed}");
}

#[test]
fn queue_empty_states_explain_themselves() {
    let mut app = app();
    press(&mut app, KeyCode::Char('2'));
    load(&mut app, Data::Queue(QueueData::default()));
    assert!(render(&app).contains("the queue is empty"));
    press(&mut app, KeyCode::Char('f'));
    load(&mut app, Data::Queue(QueueData::default()));
    assert!(render(&app).contains("no job matches these filters (c clears them)"));
}

#[test]
fn job_detail_shows_each_pane() {
    let mut app = app();
    press(&mut app, KeyCode::Char('2'));
    load(&mut app, Data::Queue(queue_data()));
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Enter);
    load(&mut app, Data::Job(Some(Box::new(job_detail()))));
    let summary = render(&app);
    assert!(
        summary.contains("Job 00000000-0000-0000-0000-000000000002"),
        "{summary}"
    );
    assert!(
        summary.contains("Summary")
            && summary.contains("Attempts+Events (2)")
            && summary.contains("Logs (2)"),
        "{summary}"
    );
    assert!(summary.contains("emails.send  DEAD_LETTERED"), "{summary}");
    assert!(summary.contains("smtp.rejected"), "{summary}");
    assert!(
        summary.contains("progress        render 3/4 (75%) smtp next"),
        "{summary}"
    );
    assert!(summary.contains("stage           QUEUED"), "{summary}");
    assert!(summary.contains("queue           emails"), "{summary}");
    assert!(summary.contains("resource key    account:42"), "{summary}");
    assert!(
        !summary.contains("held"),
        "a dead-lettered job is held by nothing"
    );

    let mut pending = job_detail();
    pending.job.status = JobStatus::Pending;
    pending.holds = vec!["queue `emails` is paused".to_owned()];
    load(&mut app, Data::Job(Some(Box::new(pending))));
    let held = render(&app);
    assert!(
        held.contains("held            queue `emails` is paused"),
        "{held}"
    );
    load(&mut app, Data::Job(Some(Box::new(job_detail()))));

    press(&mut app, KeyCode::Char(']'));
    let history = render(&app);
    assert!(history.contains("attempt  #1   FAILED"), "{history}");
    assert!(history.contains("event    #1   DEAD_LETTERED"), "{history}");

    press(&mut app, KeyCode::Right);
    let logs = render(&app);
    assert!(
        logs.contains("INFO") && logs.contains("rendering template"),
        "{logs}"
    );
    assert!(logs.contains("smtp server said 550"), "{logs}");

    press(&mut app, KeyCode::Char(']'));
    let payload = render(&app);
    assert!(payload.contains("\"subject\": \"hello\","), "{payload}");
    press(&mut app, KeyCode::Char('R'));
    let raw = render(&app);
    assert!(
        raw.contains(r#"{"subject":"hello","to":"ada@example.com"}"#),
        "{raw}"
    );
}

#[test]
fn job_detail_shows_progress_as_a_gauge() {
    let mut app = app();
    press(&mut app, KeyCode::Char('2'));
    load(&mut app, Data::Queue(queue_data()));
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Enter);
    let mut detail = job_detail();
    detail.job.progress = Some(json!({"stage": "sending", "completed": 3, "total": 4}));
    load(&mut app, Data::Job(Some(Box::new(detail))));
    let screen = render(&app);
    let gauge = screen
        .lines()
        .find(|line| line.contains("sending  3/4"))
        .unwrap_or_else(|| panic!("no gauge: {screen}"));
    assert!(gauge.contains('█'), "{gauge}");
}

#[test]
fn progress_ratio_reads_the_shapes_handlers_store() {
    use crate::screens::progress_ratio;
    assert_eq!(
        progress_ratio(&json!({"completed": 1, "total": 4})),
        Some(0.25)
    );
    assert_eq!(
        progress_ratio(&json!({"current": 5, "total": 10})),
        Some(0.5)
    );
    assert_eq!(progress_ratio(&json!({"percent": 80})), Some(0.8));
    assert_eq!(progress_ratio(&json!({"fraction": 0.1})), Some(0.1));
    assert_eq!(progress_ratio(&json!(0.75)), Some(0.75));
    assert_eq!(
        progress_ratio(&json!({"completed": 9, "total": 3})),
        Some(1.0)
    );
    assert_eq!(progress_ratio(&json!({"stage": "crawling"})), None);
    assert_eq!(progress_ratio(&json!({"completed": 1, "total": 0})), None);
}

#[test]
fn v_toggles_payload_wrapping_and_r_raw_json() {
    let mut app = app();
    let mut detail = job_detail();
    detail.job.payload = json!({"ids": (0..40).map(|n| format!("id-{n:03}")).collect::<Vec<_>>()});
    press(&mut app, KeyCode::Char(':'));
    for c in "job 00000000-0000-0000-0000-000000000002".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    load(&mut app, Data::Job(Some(Box::new(detail))));
    press(&mut app, KeyCode::Char('['));
    press(&mut app, KeyCode::Char('R'));
    let wrapped = render(&app);
    assert!(
        wrapped.contains("id-000") && wrapped.contains("id-039"),
        "a raw payload wraps by default: {wrapped}"
    );
    press(&mut app, KeyCode::Char('v'));
    let cut = render(&app);
    assert!(
        cut.contains("id-000") && !cut.contains("id-039"),
        "v cuts long lines at the edge: {cut}"
    );
    press(&mut app, KeyCode::Char('R'));
    let pretty = render(&app);
    assert!(
        pretty.contains("\"id-001\","),
        "R goes back to pretty JSON, one id per line: {pretty}"
    );
}

#[test]
fn job_detail_missing_job_and_empty_logs() {
    let mut app = app();
    press(&mut app, KeyCode::Char(':'));
    for c in "job 00000000-0000-0000-0000-000000000009".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    assert!(render(&app).contains("loading..."));
    load(&mut app, Data::Job(None));
    assert!(render(&app).contains("no job has this id"));

    let mut detail = job_detail();
    detail.job.id = JobId(uuid::Uuid::from_u128(9));
    detail.logs.clear();
    load(&mut app, Data::Job(Some(Box::new(detail))));
    press(&mut app, KeyCode::Char('['));
    press(&mut app, KeyCode::Char('['));
    assert!(render(&app).contains("no log lines"));
}

#[test]
fn workflows_list_runs_with_progress() {
    let mut app = app();
    press(&mut app, KeyCode::Char('3'));
    load(
        &mut app,
        Data::Workflows(WorkflowsData {
            runs: vec![run_row(77)],
            total: 1,
            next_cursor: None,
        }),
    );
    let screen = render(&app);
    assert!(screen.contains(" 1 runs "), "{screen}");
    let row = screen
        .lines()
        .find(|l| l.contains("profiles.research"))
        .unwrap();
    assert!(row.contains("RUNNING") && row.contains("1/0/4"), "{row}");
    load(&mut app, Data::Workflows(WorkflowsData::default()));
    assert!(render(&app).contains("no workflow runs match"));
}

#[test]
fn workflow_detail_shows_steps_with_dependencies() {
    let mut app = app();
    press(&mut app, KeyCode::Char('3'));
    load(
        &mut app,
        Data::Workflows(WorkflowsData {
            runs: vec![run_row(77)],
            total: 1,
            next_cursor: None,
        }),
    );
    press(&mut app, KeyCode::Enter);
    load(&mut app, Data::Workflow(Some(Box::new(workflow_detail()))));
    let screen = render(&app);
    assert!(
        screen.contains("Workflow run 00000000-0000-0000-0000-00000000004d"),
        "{screen}"
    );
    assert!(screen.contains(r#"metadata {"source":"api"}"#), "{screen}");
    let persist = screen.lines().find(|l| l.contains("persist")).unwrap();
    assert!(
        persist.contains("BLOCKED") && persist.contains("classify, score"),
        "{persist}"
    );
    let crawl = screen.lines().find(|l| l.contains("crawl ")).unwrap();
    assert!(
        crawl.contains("SUCCEEDED") && crawl.contains("00000000-0000-0000-0000-00000000001f"),
        "{crawl}"
    );

    load(&mut app, Data::Workflow(None));
    assert!(render(&app).contains("no workflow run has this id"));
}

#[test]
fn definitions_show_settings_configs_and_schedules() {
    let mut app = app();
    press(&mut app, KeyCode::Char('4'));
    load(&mut app, Data::Definitions(Vec::new()));
    assert!(render(&app).contains("no job definitions yet"));
    load(
        &mut app,
        Data::Definitions(vec![DefinitionRow {
            job_type: "reports.render".to_owned(),
            enabled: true,
            version: 2,
            max_attempts: 5,
            timeout_seconds: 300,
            priority: 10,
            retry_ms: (1000, 3_600_000),
            runtime_config: Some(json!({"batch": 50})),
            schedules: vec![("reports.hourly".to_owned(), "0 0 * * * *".to_owned(), true)],
        }]),
    );
    let screen = render(&app);
    let row = screen
        .lines()
        .find(|l| l.contains("reports.render"))
        .unwrap();
    for cell in [
        "yes",
        "300s",
        "1000..3600000",
        r#"{"batch":50}"#,
        "reports.hourly [0 0 * * * *]",
    ] {
        assert!(row.contains(cell), "{cell} missing in {row}");
    }
    press(&mut app, KeyCode::Char('/'));
    for c in "zzz".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    assert!(render(&app).contains("no job type matches the filter"));
}

#[test]
fn help_overlay_lists_every_key() {
    let mut app = app();
    press(&mut app, KeyCode::Char('?'));
    let screen = render_sized(&app, 120, 40);
    for (keys, _) in super::help::KEYS {
        assert!(screen.contains(keys), "{keys} missing:\n{screen}");
    }
    assert!(screen.contains("toggle raw / pretty payload"), "{screen}");
    press(&mut app, KeyCode::Char('x'));
    assert!(!render(&app).contains("Keys (any key closes)"));
}

#[test]
fn prompts_and_messages_show_in_the_footer() {
    let mut app = app();
    press(&mut app, KeyCode::Char('2'));
    press(&mut app, KeyCode::Char('/'));
    press(&mut app, KeyCode::Char('a'));
    assert!(render(&app).contains("/a_"));
    press(&mut app, KeyCode::Esc);
    press(&mut app, KeyCode::Char(':'));
    for c in "bogus".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    assert!(render(&app).contains("unknown command: bogus"));
}

#[test]
fn tiny_terminals_do_not_panic() {
    let mut app = app();
    load(&mut app, Data::Dashboard(metrics()));
    for (w, h) in [(1, 1), (10, 3), (40, 8)] {
        render_sized(&app, w, h);
        app.help = true;
        render_sized(&app, w, h);
        app.help = false;
    }
}

#[test]
fn progress_of_another_shape_is_shown_as_json() {
    use crate::screens::progress_text;
    assert_eq!(progress_text(&json!({"completed": 7})), "7");
    assert_eq!(progress_text(&json!({"pct": 40})), r#"{"pct":40}"#);
}
