//! Drawing. One file per screen; this module draws the frame around them (title with the
//! connection state, footer with the prompt or key hints, help overlay). Views only read the
//! [`App`]; they never touch the database.

mod charts;
mod dashboard;
mod definitions;
mod help;
mod job_detail;
mod queue;
mod workflow_detail;
mod workflows;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use runledger_engine::core::jobs::{JobStatus, WorkflowRunStatus, WorkflowStepStatus};

use crate::app::{App, Screen, Tab};

/// The clock a frame is drawn at (passed in so tests render deterministic text).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) now: Instant,
    pub(crate) utc: DateTime<Utc>,
}

impl Clock {
    pub(crate) fn now() -> Self {
        Self {
            now: Instant::now(),
            utc: Utc::now(),
        }
    }
}

/// Rows of chrome around a table (title, borders, header, footer): what a page key skips.
pub(crate) const CHROME_ROWS: u16 = 6;

/// Draws the whole screen.
pub(crate) fn draw(frame: &mut Frame<'_>, app: &App, clock: Clock) {
    let [title, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(title_line(app, clock)), title);
    let block = Block::bordered().title(view_title(app));
    match app.screen() {
        Screen::Tab(Tab::Dashboard) => dashboard::draw(frame, body, block, app, clock),
        Screen::Tab(Tab::Queue) => queue::draw(frame, body, block, app),
        Screen::Tab(Tab::Workflows) => workflows::draw(frame, body, block, app),
        Screen::Tab(Tab::Definitions) => definitions::draw(frame, body, block, app),
        Screen::Job(id) => job_detail::draw(frame, body, block, app, id),
        Screen::Workflow(id) => workflow_detail::draw(frame, body, block, app, id),
    }
    frame.render_widget(Paragraph::new(footer_line(app)), footer);
    if app.help {
        help::draw(frame, frame.area());
    }
}

/// The title bar: tabs, scope and the state of the data (live, loading, paused, stale,
/// reconnecting with the error).
fn title_line(app: &App, clock: Clock) -> Line<'static> {
    let mut spans = vec![Span::styled(
        " runledger ",
        Style::new().add_modifier(Modifier::BOLD),
    )];
    for (i, tab) in Tab::ALL.iter().enumerate() {
        let text = format!(" {} {} ", i + 1, tab.title());
        let style = if *tab == app.tab {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        spans.push(Span::styled(text, style));
    }
    let scope = match app.organization {
        Some(org) => format!(" | org {org}"),
        None => " | all orgs".to_owned(),
    };
    spans.push(Span::raw(scope));
    let (state, style) = data_state(app, clock.now);
    spans.push(Span::raw(" | "));
    spans.push(Span::styled(state, style));
    Line::from(spans)
}

/// A short description of how fresh the data is.
pub(crate) fn data_state(app: &App, now: Instant) -> (String, Style) {
    let age = app
        .connection
        .last_ok
        .map(|at| now.saturating_duration_since(at));
    let updated = age.map_or_else(String::new, |age| {
        format!(" (updated {} ago)", format_duration(age))
    });
    if let Some((error, attempt)) = &app.connection.error {
        return (
            format!("reconnecting, try {attempt}: {error}{updated}"),
            Style::new().fg(Color::Red),
        );
    }
    if !app.is_current() {
        return ("loading...".to_owned(), Style::new().fg(Color::Yellow));
    }
    if app.paused {
        return (format!("paused{updated}"), Style::new().fg(Color::Yellow));
    }
    let stale_after = (app.refresh * 3).max(Duration::from_secs(5));
    if age.is_some_and(|age| age > stale_after) {
        return (format!("stale{updated}"), Style::new().fg(Color::Yellow));
    }
    let took = app
        .current_elapsed()
        .map_or_else(String::new, |d| format!(" in {} ms", d.as_millis()));
    (format!("live{took}"), Style::new().fg(Color::Green))
}

fn view_title(app: &App) -> String {
    match app.screen() {
        Screen::Tab(tab) => format!(" {} ", tab.title()),
        Screen::Job(id) => format!(" Job {id} "),
        Screen::Workflow(id) => format!(" Workflow run {id} "),
    }
}

fn footer_line(app: &App) -> Line<'static> {
    if let Some(input) = &app.input {
        return Line::from(vec![
            Span::styled(
                input.kind.prompt().to_owned(),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::raw(input.text.clone()),
            Span::styled("_", Style::new().add_modifier(Modifier::SLOW_BLINK)),
            Span::raw("   (Enter apply, Esc cancel)"),
        ]);
    }
    if let Some(flash) = &app.flash {
        return Line::from(Span::styled(
            format!(" {flash}"),
            Style::new().fg(Color::Cyan),
        ));
    }
    let hints = match app.screen() {
        Screen::Job(_) => {
            " h back  [ ] panes  j/k scroll  v raw/pretty  y copy id  r refresh  ? help  q quit"
        }
        Screen::Workflow(_) => {
            " h back  j/k move  Enter open step job  v raw/pretty  y copy  ? help  q quit"
        }
        Screen::Tab(Tab::Queue) => {
            " Enter open  / search  t type  f status  w run  c clear  v wide  y copy  ? help"
        }
        Screen::Tab(Tab::Workflows) => {
            " Enter open  / search  w type  f status  c clear  v wide  y copy  ? help"
        }
        Screen::Tab(_) => {
            " 1-4 screens  Enter jobs of type  / filter  : jump to id  p pause  o org  ? help  q quit"
        }
    };
    Line::from(Span::styled(hints, Style::new().fg(Color::DarkGray)))
}

/// "3s", "2m 5s", "4h 10m".
pub(crate) fn format_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// A UTC timestamp, compact.
pub(crate) fn format_time(at: DateTime<Utc>) -> String {
    at.format("%m-%d %H:%M:%S").to_string()
}

pub(crate) fn format_optional_time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "-".to_owned(), format_time)
}

/// A count capped by the query ("10000+").
pub(crate) fn format_count(count: i64, cap: i64) -> String {
    if count >= cap {
        format!("{cap}+")
    } else {
        count.to_string()
    }
}

pub(crate) fn job_status_style(status: JobStatus) -> Style {
    match status {
        JobStatus::Pending => Style::new().fg(Color::Yellow),
        JobStatus::Leased => Style::new().fg(Color::Cyan),
        JobStatus::Succeeded => Style::new().fg(Color::Green),
        JobStatus::DeadLettered => Style::new().fg(Color::Red),
        _ => Style::new().fg(Color::DarkGray),
    }
}

pub(crate) fn run_status_style(status: WorkflowRunStatus) -> Style {
    match status {
        WorkflowRunStatus::Running => Style::new().fg(Color::Cyan),
        WorkflowRunStatus::WaitingForExternal => Style::new().fg(Color::Yellow),
        WorkflowRunStatus::Succeeded => Style::new().fg(Color::Green),
        WorkflowRunStatus::CompletedWithErrors => Style::new().fg(Color::Red),
        _ => Style::new().fg(Color::DarkGray),
    }
}

pub(crate) fn step_status_style(status: WorkflowStepStatus) -> Style {
    match status {
        WorkflowStepStatus::Running | WorkflowStepStatus::Enqueued => Style::new().fg(Color::Cyan),
        WorkflowStepStatus::WaitingForExternal => Style::new().fg(Color::Yellow),
        WorkflowStepStatus::Succeeded => Style::new().fg(Color::Green),
        WorkflowStepStatus::Failed => Style::new().fg(Color::Red),
        _ => Style::new().fg(Color::DarkGray),
    }
}

/// The highlight of the selected table row.
pub(crate) fn selected_style() -> Style {
    Style::new().add_modifier(Modifier::REVERSED)
}

/// Draws `table` with a bold `header` and row `selected` (clamped to the `len` rows)
/// highlighted.
pub(crate) fn render_table<'a, H>(
    frame: &mut Frame<'_>,
    area: Rect,
    table: Table<'a>,
    header: H,
    selected: usize,
    len: usize,
) where
    H: IntoIterator,
    H::Item: Into<Cell<'a>>,
{
    let table = table
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(selected_style());
    let mut state = TableState::default().with_selected(Some(App::clamp(selected, len)));
    frame.render_stateful_widget(table, area, &mut state);
}

/// A centered paragraph for empty and loading states.
pub(crate) fn placeholder(frame: &mut Frame<'_>, area: Rect, block: Block<'_>, text: &str) {
    frame.render_widget(
        Paragraph::new(text.to_owned())
            .block(block)
            .centered()
            .style(Style::new().fg(Color::DarkGray)),
        area,
    );
}

/// The text shown where data has not arrived yet: loading, or the error that prevents it.
pub(crate) fn not_loaded_text(app: &App) -> String {
    match &app.connection.error {
        Some((error, _)) => format!("cannot load: {error}"),
        None => "loading...".to_owned(),
    }
}

/// Pretty or compact JSON.
pub(crate) fn json_text(value: &serde_json::Value, raw: bool) -> String {
    if raw {
        value.to_string()
    } else {
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    }
}

#[cfg(test)]
pub(crate) mod tests;
