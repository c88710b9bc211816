//! Key handling, one test per key group.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::any::Any;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use runledger_engine::core::jobs::{
    JobId, JobStatus, WorkflowRunId, WorkflowRunStatus, WorkflowStepId,
};
use uuid::Uuid;

use super::{App, Effect};
use crate::input::InputKind;
use crate::model::{
    Command, Data, Found, PollerEvent, QueueData, Snapshot, ViewQuery, WorkflowsData,
};
use crate::screens::{JobDetail, Pane, Queue, Screen, WorkflowDetail, Workflows};
use crate::ui::tests::{app, job, load, metrics, press, queue_data, run_row, workflow_detail};

/// The tab of type `S`.
fn tab<S: Screen>(app: &App) -> &S {
    app.tabs
        .iter()
        .find_map(|tab| (&**tab as &dyn Any).downcast_ref())
        .expect("a registered tab")
}

/// The screen on top, which must be an `S`.
fn top<S: Screen>(app: &App) -> &S {
    (app.top() as &dyn Any)
        .downcast_ref()
        .expect("the screen on top")
}

fn queue(app: &App) -> &Queue {
    tab(app)
}

fn workflows(app: &App) -> &Workflows {
    tab(app)
}

fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        press(app, KeyCode::Char(c));
    }
}

fn queue_app() -> App {
    let mut app = app();
    press(&mut app, KeyCode::Char('2'));
    load(&mut app, Data::Queue(queue_data()));
    app
}

#[test]
fn number_keys_and_tab_switch_screens() {
    let mut app = app();
    assert_eq!(app.top().title(), "Dashboard");
    for (key, title) in [
        ('2', "Queue"),
        ('3', "Workflows"),
        ('4', "Definitions"),
        ('1', "Dashboard"),
    ] {
        press(&mut app, KeyCode::Char(key));
        assert_eq!(app.top().title(), title);
    }
    press(&mut app, KeyCode::Tab);
    assert_eq!(app.top().title(), "Queue");
    press(&mut app, KeyCode::BackTab);
    press(&mut app, KeyCode::BackTab);
    assert_eq!(
        app.top().title(),
        "Definitions",
        "Shift+Tab wraps backwards"
    );
    assert_eq!(app.query().view, ViewQuery::Definitions);
}

#[test]
fn movement_keys_move_the_selection_and_turn_keyset_pages() {
    let mut app = queue_app();
    press(&mut app, KeyCode::Char('j'));
    assert_eq!(queue(&app).pages.selection.row, 1);
    press(&mut app, KeyCode::Up);
    assert_eq!(queue(&app).pages.selection.row, 0);
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('k'));
    press(&mut app, KeyCode::Char('G'));
    assert_eq!(queue(&app).pages.selection.index(2), 1);
    press(&mut app, KeyCode::Char('g'));
    assert_eq!(queue(&app).pages.selection.row, 0);
    press(&mut app, KeyCode::PageDown);
    assert_eq!(
        queue(&app).pages.selection.row,
        1,
        "a page key stops at the last row first"
    );
    // Past the last row: the next keyset page, from the page's cursor.
    press(&mut app, KeyCode::Char('j'));
    assert_eq!(queue(&app).pages.cursors, vec![JobId(Uuid::from_u128(2))]);
    assert_eq!(
        app.query().view,
        ViewQuery::Queue {
            filter: queue(&app).filter.clone(),
            after: Some(JobId(Uuid::from_u128(2)))
        }
    );
    load(
        &mut app,
        Data::Queue(QueueData {
            next_cursor: None,
            ..queue_data()
        }),
    );
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::PageUp);
    assert_eq!(queue(&app).pages.selection.row, 0);
    press(&mut app, KeyCode::Char('k'));
    assert!(
        queue(&app).pages.cursors.is_empty(),
        "above the first row: the previous page"
    );
    assert_eq!(
        queue(&app).pages.selection.row,
        usize::MAX,
        "…at its last row"
    );
}

#[test]
fn enter_opens_and_h_or_esc_go_back() {
    let mut app = queue_app();
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.query().view, ViewQuery::Job(JobId(Uuid::from_u128(3))));
    press(&mut app, KeyCode::Char('h'));
    assert_eq!(app.top().title(), "Queue");

    press(&mut app, KeyCode::Char('3'));
    load(
        &mut app,
        Data::Workflows(WorkflowsData {
            runs: vec![run_row(77)],
            total: 1,
            next_cursor: None,
        }),
    );
    press(&mut app, KeyCode::Char('l'));
    let run = WorkflowRunId(Uuid::from_u128(77));
    assert_eq!(
        app.query().view,
        ViewQuery::Workflow {
            id: run,
            after: None
        }
    );
    load(&mut app, Data::Workflow(Some(Box::new(workflow_detail()))));
    press(&mut app, KeyCode::Enter);
    let stack: Vec<ViewQuery> = app.stack.iter().map(|screen| screen.query()).collect();
    assert_eq!(
        stack,
        vec![
            ViewQuery::Workflow {
                id: run,
                after: None
            },
            ViewQuery::Job(JobId(Uuid::from_u128(31)))
        ]
    );
    press(&mut app, KeyCode::Esc);
    assert_eq!(
        app.query().view,
        ViewQuery::Workflow {
            id: run,
            after: None
        }
    );
    press(&mut app, KeyCode::Char('G'));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.flash.as_deref(), Some("this step has no job yet"));

    // On the dashboard, Enter shows the queue of the selected type.
    press(&mut app, KeyCode::Char('1'));
    load(&mut app, Data::Dashboard(metrics()));
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.top().title(), "Queue");
    assert_eq!(
        queue(&app).filter.type_contains.as_deref(),
        Some("reports.render")
    );
}

#[test]
fn a_runs_steps_turn_keyset_pages_past_the_last_row() {
    let mut app = queue_app();
    let run = WorkflowRunId(Uuid::from_u128(77));
    app.stack.push(Box::new(WorkflowDetail::new(run)));
    let cursor = WorkflowStepId(Uuid::from_u128(9));
    let mut detail = workflow_detail();
    detail.next_cursor = Some(cursor);
    load(&mut app, Data::Workflow(Some(Box::new(detail))));
    press(&mut app, KeyCode::Char('G'));
    assert_eq!(
        app.query().view,
        ViewQuery::Workflow {
            id: run,
            after: None
        }
    );
    press(&mut app, KeyCode::Char('j'));
    assert_eq!(
        app.query().view,
        ViewQuery::Workflow {
            id: run,
            after: Some(cursor)
        },
        "past the last step: the page after it"
    );
    press(&mut app, KeyCode::Char('k'));
    assert_eq!(
        app.query().view,
        ViewQuery::Workflow {
            id: run,
            after: None
        }
    );
}

#[test]
fn brackets_and_arrows_switch_job_detail_panes() {
    let mut app = queue_app();
    press(&mut app, KeyCode::Enter);
    let pane = |app: &App| top::<JobDetail>(app).pane;
    assert_eq!(pane(&app), Pane::Summary);
    press(&mut app, KeyCode::Char(']'));
    assert_eq!(pane(&app), Pane::History);
    press(&mut app, KeyCode::Right);
    assert_eq!(pane(&app), Pane::Logs);
    press(&mut app, KeyCode::Char('j'));
    assert_eq!(top::<JobDetail>(&app).scroll, 1, "j scrolls inside a pane");
    press(&mut app, KeyCode::Left);
    assert_eq!(pane(&app), Pane::History);
    assert_eq!(top::<JobDetail>(&app).scroll, 0);
    press(&mut app, KeyCode::Char('['));
    press(&mut app, KeyCode::Char('['));
    assert_eq!(pane(&app), Pane::Payload, "panes wrap around");
}

#[test]
fn slash_t_and_w_edit_filters() {
    let mut app = queue_app();
    press(&mut app, KeyCode::Char('/'));
    assert_eq!(app.input.as_ref().unwrap().kind, InputKind::Search);
    type_text(&mut app, "smtp.rejected");
    press(&mut app, KeyCode::Enter);
    assert_eq!(queue(&app).filter.search.as_deref(), Some("smtp.rejected"));

    press(&mut app, KeyCode::Char('t'));
    type_text(&mut app, "email");
    press(&mut app, KeyCode::Backspace);
    press(&mut app, KeyCode::Enter);
    assert_eq!(queue(&app).filter.type_contains.as_deref(), Some("emai"));

    press(&mut app, KeyCode::Char('t'));
    press(&mut app, KeyCode::Esc);
    assert!(app.input.is_none());
    assert_eq!(
        queue(&app).filter.type_contains.as_deref(),
        Some("emai"),
        "Esc keeps the filter"
    );

    // w on the queue: only the selected job's workflow run, and back.
    load(&mut app, Data::Queue(queue_data()));
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Char('w'));
    assert_eq!(
        queue(&app).filter.workflow_run,
        Some(WorkflowRunId(Uuid::from_u128(77)))
    );
    press(&mut app, KeyCode::Char('w'));
    assert_eq!(queue(&app).filter.workflow_run, None);
    // A job without a run: w edits the workflow type filter on the Workflows screen.
    press(&mut app, KeyCode::Char('g'));
    press(&mut app, KeyCode::Char('w'));
    assert_eq!(app.top().title(), "Workflows");
    type_text(&mut app, "research");
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        workflows(&app).filter.type_contains.as_deref(),
        Some("research")
    );

    // / on workflows with a UUID looks the id up.
    press(&mut app, KeyCode::Char('/'));
    press(&mut app, KeyCode::Char('u'));
    let _ = app.handle_key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    type_text(&mut app, &Uuid::from_u128(5).to_string());
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.query().view, ViewQuery::Lookup(Uuid::from_u128(5)));
}

#[test]
fn f_cycles_status_filters_and_c_clears_them() {
    let mut app = queue_app();
    let mut seen = Vec::new();
    for _ in 0..6 {
        press(&mut app, KeyCode::Char('f'));
        seen.push(queue(&app).filter.status);
    }
    assert_eq!(
        seen,
        [
            Some(JobStatus::Pending),
            Some(JobStatus::Leased),
            Some(JobStatus::Succeeded),
            Some(JobStatus::DeadLettered),
            Some(JobStatus::Canceled),
            None
        ]
    );
    press(&mut app, KeyCode::Char('f'));
    press(&mut app, KeyCode::Char('t'));
    type_text(&mut app, "x");
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('c'));
    assert!(queue(&app).filter.is_empty());

    press(&mut app, KeyCode::Char('3'));
    press(&mut app, KeyCode::Char('f'));
    assert_eq!(
        workflows(&app).filter.status,
        Some(WorkflowRunStatus::Running)
    );
    press(&mut app, KeyCode::Char('c'));
    assert_eq!(workflows(&app).filter.status, None);

    press(&mut app, KeyCode::Char('1'));
    press(&mut app, KeyCode::Char('f'));
    assert!(
        app.flash
            .as_deref()
            .unwrap()
            .contains("Queue and Workflows")
    );
}

#[test]
fn v_toggles_wide_lists_and_payload_wrapping_r_toggles_raw_payloads() {
    let mut app = queue_app();
    press(&mut app, KeyCode::Char('v'));
    assert!(app.options.wide);
    press(&mut app, KeyCode::Enter);
    assert!(app.options.wrap, "payloads wrap by default");
    press(&mut app, KeyCode::Char('v'));
    assert!(!app.options.wrap);
    assert!(
        app.options.wide,
        "v on a detail screen leaves the list view alone"
    );
    press(&mut app, KeyCode::Char('R'));
    assert!(app.options.raw_json);
    press(&mut app, KeyCode::Char('R'));
    assert!(!app.options.raw_json);
}

#[test]
fn refresh_keys_and_pause_talk_to_the_poller() {
    let mut app = app();
    assert_eq!(
        press(&mut app, KeyCode::Char('r')),
        vec![Effect::Poller(Command::Refresh)]
    );
    assert_eq!(
        press(&mut app, KeyCode::Char('.')),
        vec![Effect::Poller(Command::Refresh)]
    );
    assert_eq!(
        press(&mut app, KeyCode::Char('R')),
        Vec::new(),
        "R toggles raw payloads; it does not refresh"
    );
    assert_eq!(
        press(&mut app, KeyCode::Char('p')),
        vec![Effect::Poller(Command::SetPaused(true))]
    );
    assert!(app.paused);
    assert_eq!(
        press(&mut app, KeyCode::Char('p')),
        vec![Effect::Poller(Command::SetPaused(false))]
    );
}

#[test]
fn y_copies_the_selected_id() {
    let mut app = queue_app();
    press(&mut app, KeyCode::Char('j'));
    let id = Uuid::from_u128(2).to_string();
    assert_eq!(
        press(&mut app, KeyCode::Char('y')),
        vec![Effect::Copy(id.clone())]
    );
    assert_eq!(app.flash, Some(format!("copied {id}")));
    press(&mut app, KeyCode::Char('1'));
    load(&mut app, Data::Dashboard(metrics()));
    assert_eq!(
        press(&mut app, KeyCode::Char('y')),
        vec![Effect::Copy("emails.send".to_owned())]
    );
}

#[test]
fn colon_runs_commands_and_jumps_to_ids() {
    let mut app = app();
    let id = Uuid::from_u128(42);
    press(&mut app, KeyCode::Char(':'));
    type_text(&mut app, &id.to_string());
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.query().view, ViewQuery::Lookup(id));
    load(&mut app, Data::Lookup(Found::Workflow(WorkflowRunId(id))));
    assert_eq!(
        app.query().view,
        ViewQuery::Workflow {
            id: WorkflowRunId(id),
            after: None
        }
    );

    press(&mut app, KeyCode::Char(':'));
    type_text(&mut app, &id.to_string());
    press(&mut app, KeyCode::Enter);
    load(&mut app, Data::Lookup(Found::Nothing(id)));
    assert!(
        app.flash
            .as_deref()
            .unwrap()
            .starts_with("no job or workflow run")
    );

    for (line, title) in [("queue", "Queue"), ("4", "Definitions")] {
        press(&mut app, KeyCode::Char(':'));
        type_text(&mut app, line);
        press(&mut app, KeyCode::Enter);
        assert_eq!(app.top().title(), title);
    }
    press(&mut app, KeyCode::Char(':'));
    type_text(&mut app, &format!("org {id}"));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.query().organization, Some(id));
    press(&mut app, KeyCode::Char(':'));
    type_text(&mut app, "quit");
    assert_eq!(press(&mut app, KeyCode::Enter), vec![Effect::Quit]);
}

#[test]
fn o_edits_the_organization_scope_and_shift_o_toggles_it() {
    let mut app = app();
    press(&mut app, KeyCode::Char('o'));
    assert_eq!(app.input.as_ref().unwrap().kind, InputKind::Organization);
    type_text(&mut app, "not-a-uuid");
    press(&mut app, KeyCode::Enter);
    assert!(app.flash.as_deref().unwrap().contains("not a UUID"));
    let org = Uuid::from_u128(9);
    press(&mut app, KeyCode::Char('o'));
    press(&mut app, KeyCode::Char('u'));
    let _ = app.handle_key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    type_text(&mut app, &org.to_string());
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.organization, Some(org));

    press(&mut app, KeyCode::Char('o'));
    assert_eq!(
        app.input.as_ref().unwrap().text,
        org.to_string(),
        "o edits the current scope, even when one is set"
    );
    let _ = app.handle_key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.organization, None,
        "an empty scope means all organizations"
    );

    press(&mut app, KeyCode::Char('O'));
    assert_eq!(app.organization, Some(org), "O brings the last scope back");
    press(&mut app, KeyCode::Char('O'));
    assert_eq!(app.organization, None);
}

#[test]
fn help_and_quit_keys() {
    let mut app = app();
    press(&mut app, KeyCode::Char('?'));
    assert!(app.help);
    assert!(press(&mut app, KeyCode::Char('j')).is_empty());
    assert!(!app.help, "any key closes help");
    assert_eq!(press(&mut app, KeyCode::Char('q')), vec![Effect::Quit]);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(app.handle_key(ctrl_c), vec![Effect::Quit]);
    press(&mut app, KeyCode::Char('/'));
    assert_eq!(
        app.handle_key(ctrl_c),
        vec![Effect::Quit],
        "even while typing"
    );
}

#[test]
fn snapshots_for_an_old_query_do_not_count_as_current() {
    let mut app = queue_app();
    assert!(app.is_current());
    press(&mut app, KeyCode::Char('f'));
    assert!(
        !app.is_current(),
        "filters changed: the data on screen is for the old query"
    );
    let _ = job(1, "x", JobStatus::Pending);
}

#[test]
fn each_screen_keeps_its_own_selection_and_search() {
    let mut app = app();
    load(&mut app, Data::Dashboard(metrics()));
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Char('/'));
    type_text(&mut app, "reports");
    press(&mut app, KeyCode::Enter);

    press(&mut app, KeyCode::Char('4'));
    press(&mut app, KeyCode::Char('/'));
    assert_eq!(
        app.input.as_ref().unwrap().text,
        "",
        "Definitions has a search of its own"
    );
    press(&mut app, KeyCode::Esc);

    press(&mut app, KeyCode::Char('1'));
    assert_eq!(
        press(&mut app, KeyCode::Char('y')),
        vec![Effect::Copy("reports.render".to_owned())],
        "back on the Dashboard: its search and selected row as they were"
    );
}

#[test]
fn a_snapshot_for_a_tab_under_a_detail_screen_reaches_the_tab() {
    let mut app = queue_app();
    let queue_query = app.query();
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.query().view, ViewQuery::Job(JobId(Uuid::from_u128(3))));
    app.apply(PollerEvent::Snapshot(Box::new(Snapshot {
        query: queue_query,
        data: Data::Queue(QueueData {
            jobs: vec![job(8, "emails.send", JobStatus::Leased)],
            next_cursor: None,
            total: 1,
        }),
        fetched_at: Instant::now(),
        elapsed: Duration::from_millis(3),
    })));
    assert!(
        !app.is_current(),
        "the job detail still waits for its own data"
    );
    press(&mut app, KeyCode::Char('h'));
    assert!(app.is_current());
    assert_eq!(
        press(&mut app, KeyCode::Char('y')),
        vec![Effect::Copy(Uuid::from_u128(8).to_string())]
    );
}

#[test]
fn a_detail_screen_ignores_data_of_another_id() {
    let mut app = queue_app();
    press(&mut app, KeyCode::Enter);
    let mut other = app.query();
    other.view = ViewQuery::Job(JobId(Uuid::from_u128(99)));
    app.apply(PollerEvent::Snapshot(Box::new(Snapshot {
        query: other,
        data: Data::Job(None),
        fetched_at: Instant::now(),
        elapsed: Duration::from_millis(3),
    })));
    assert!(top::<JobDetail>(&app).loaded().is_none());
}
