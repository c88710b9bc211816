//! Job detail: panes Summary (with the job's progress as a gauge), Attempts+Events, Logs and
//! Payload (switch with `[` and `]`).

use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Gauge, Paragraph, Tabs, Wrap};
use runledger_engine::core::jobs::JobId;
use serde_json::Value;

use super::list::Movement;
use super::screen::{Action, Loaded, Screen};
use super::search::Search;
use crate::input::InputKind;
use crate::model::{Data, HistoryLine, JobDetailData, Query, Snapshot, ViewQuery};
use crate::ui::{
    Context, format_optional_time, format_time, job_status_style, json_text, placeholder,
};

/// The panes of the job detail screen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Pane {
    #[default]
    Summary,
    History,
    Logs,
    Payload,
}

impl Pane {
    pub(crate) const ALL: [Pane; 4] = [Pane::Summary, Pane::History, Pane::Logs, Pane::Payload];

    pub(crate) fn title(self) -> &'static str {
        match self {
            Pane::Summary => "Summary",
            Pane::History => "Attempts+Events",
            Pane::Logs => "Logs",
            Pane::Payload => "Payload",
        }
    }

    fn index(self) -> usize {
        Pane::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }

    fn shifted(self, forward: bool) -> Pane {
        let len = Pane::ALL.len();
        let step = if forward { 1 } else { len - 1 };
        Pane::ALL[(self.index() + step) % len]
    }
}

/// The detail screen of one job.
#[derive(Debug)]
pub(crate) struct JobDetail {
    id: JobId,
    pub(crate) pane: Pane,
    /// Lines scrolled off the top of the pane.
    pub(crate) scroll: u16,
    /// Filters the history and log lines.
    pub(crate) search: Search,
    /// `None` inside: no job has this id.
    data: Option<Loaded<Option<Box<JobDetailData>>>>,
}

impl JobDetail {
    pub(crate) fn new(id: JobId) -> Self {
        Self {
            id,
            pane: Pane::Summary,
            scroll: 0,
            search: Search::default(),
            data: None,
        }
    }

    fn scroll_by(&mut self, movement: Movement) {
        self.scroll = match movement {
            Movement::By(delta) => {
                let scroll = i64::from(self.scroll) + delta as i64;
                u16::try_from(scroll.max(0)).unwrap_or(u16::MAX)
            }
            Movement::First => 0,
            Movement::Last => u16::MAX / 2,
        };
    }

    fn switch_pane(&mut self, forward: bool) {
        self.pane = self.pane.shifted(forward);
        self.scroll = 0;
    }
}

impl Screen for JobDetail {
    fn title(&self) -> String {
        format!("Job {}", self.id)
    }

    fn hints(&self) -> &'static str {
        " h back  [ ] panes  j/k scroll  v raw/pretty  y copy id  r refresh  ? help  q quit"
    }

    fn query(&self) -> ViewQuery {
        ViewQuery::Job(self.id)
    }

    fn absorb(&mut self, snapshot: Snapshot) -> Option<Snapshot> {
        if snapshot.query.view != self.query() {
            return Some(snapshot);
        }
        Loaded::keep(&mut self.data, snapshot, |data| match data {
            Data::Job(data) => Ok(data),
            other => Err(other),
        })
    }

    fn loaded(&self) -> Option<(&Query, Duration)> {
        Loaded::answered(self.data.as_ref())
    }

    fn handle_key(&mut self, key: KeyEvent, page_rows: usize) -> Option<Action> {
        if let Some(movement) = Movement::of(key, page_rows) {
            self.scroll_by(movement);
            return Some(Action::Done);
        }
        match key.code {
            KeyCode::Char(']') | KeyCode::Right => self.switch_pane(true),
            KeyCode::Char('[') | KeyCode::Left => self.switch_pane(false),
            KeyCode::Char('/') => return Some(Action::Prompt(self.search.prompt())),
            KeyCode::Char('c') => self.search = Search::default(),
            KeyCode::Char('y') => return Some(Action::Copy(self.id.to_string())),
            _ => return None,
        }
        Some(Action::Done)
    }

    fn submit(&mut self, kind: InputKind, value: Option<String>) -> Action {
        if kind == InputKind::Search {
            self.search = Search(value);
        }
        Action::Done
    }

    fn draw(&self, frame: &mut Frame<'_>, area: Rect, block: Block<'_>, context: &Context<'_>) {
        let Some(loaded) = &self.data else {
            return placeholder(frame, area, block, &context.not_loaded_text());
        };
        let Some(detail) = &loaded.data else {
            return placeholder(frame, area, block, "no job has this id");
        };
        let options = context.options;
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let [tabs_area, pane_area] =
            Layout::vertical([Constraint::Length(2), Constraint::Min(1)]).areas(inner);
        let titles = Pane::ALL.iter().map(|pane| match pane {
            Pane::History => format!(
                "{} ({})",
                pane.title(),
                detail.attempts.len() + detail.events.len()
            ),
            Pane::Logs => format!("{} ({})", pane.title(), detail.logs.len()),
            _ => pane.title().to_owned(),
        });
        frame.render_widget(
            Tabs::new(titles)
                .select(self.pane.index())
                .highlight_style(Style::new().add_modifier(Modifier::REVERSED)),
            tabs_area,
        );
        let text = match self.pane {
            Pane::Summary => summary(detail),
            Pane::History => history(&self.search, detail),
            Pane::Logs => logs(&self.search, detail),
            Pane::Payload => json_text(&detail.job.payload, options.raw_json)
                .lines()
                .map(|line| Line::from(format!(" {line}")))
                .collect(),
        };
        let gauge = (self.pane == Pane::Summary)
            .then_some(detail.job.progress.as_ref())
            .flatten()
            .and_then(|progress| Some((progress, progress_ratio(progress)?)));
        let pane_area = match gauge {
            Some((progress, ratio)) => {
                let [gauge_area, rest] =
                    Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(pane_area);
                frame.render_widget(
                    Gauge::default()
                        .ratio(ratio)
                        .label(progress_label(progress, ratio))
                        .gauge_style(Style::new().fg(Color::Cyan)),
                    gauge_area,
                );
                rest
            }
            None => pane_area,
        };
        let max_scroll = u16::try_from(text.len().saturating_sub(1)).unwrap_or(u16::MAX);
        let mut paragraph = Paragraph::new(text).scroll((self.scroll.min(max_scroll), 0));
        if options.wrap || self.pane != Pane::Payload {
            paragraph = paragraph.wrap(Wrap { trim: false });
        }
        frame.render_widget(paragraph, pane_area);
    }
}

fn field(name: &str, value: String) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!(" {name:<16}"), Style::new().fg(Color::DarkGray)),
        Span::raw(value),
    ])
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A handler's progress (`ctx.progress(..)`): `stage 5/10 (50%) message`, or the stored JSON
/// when it has another shape.
pub(crate) fn progress_text(progress: &serde_json::Value) -> String {
    let text = |key: &str| progress.get(key).and_then(serde_json::Value::as_str);
    let count = |key: &str| progress.get(key).and_then(serde_json::Value::as_u64);
    let mut parts: Vec<String> = Vec::new();
    if let Some(stage) = text("stage") {
        parts.push(stage.to_owned());
    }
    match (count("completed"), count("total")) {
        (Some(done), Some(total)) if total > 0 => {
            parts.push(format!(
                "{done}/{total} ({}%)",
                done.saturating_mul(100) / total
            ));
        }
        (Some(done), _) => parts.push(done.to_string()),
        _ => {}
    }
    if let Some(message) = text("message") {
        parts.push(message.to_owned());
    }
    if parts.is_empty() {
        progress.to_string()
    } else {
        parts.join(" ")
    }
}

fn summary(detail: &JobDetailData) -> Vec<Line<'static>> {
    let job = &detail.job;
    let mut lines = vec![
        Line::from(vec![
            Span::styled(
                format!(" {}  ", job.job_type),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::styled(job.status.to_string(), job_status_style(job.status)),
        ]),
        field("id", job.id.to_string()),
        field("queue", job.queue.clone()),
        field("resource key", or_dash(job.resource_key.as_deref())),
        field("organization", or_dash(job.organization_id)),
        field(
            "attempts",
            format!("{} of {}", job.attempts_used, job.max_attempts),
        ),
        field("priority", job.priority.to_string()),
        field("timeout", format!("{} s", job.timeout_seconds)),
        field("created", format_time(job.created_at)),
        field("next run", format_time(job.next_run_at)),
        field("finished", format_optional_time(job.finished_at)),
        field("worker", or_dash(job.worker_id.as_deref())),
        field("lease expires", format_optional_time(job.lease_expires_at)),
        field("idempotency key", or_dash(job.idempotency_key.as_deref())),
        field("workflow run", or_dash(job.workflow_run_id)),
        field(
            "last error",
            format!(
                "{} {}",
                job.last_error_code.as_deref().unwrap_or("-"),
                job.last_error_message.as_deref().unwrap_or("")
            ),
        ),
        field(
            "progress",
            job.progress
                .as_ref()
                .map_or_else(|| "-".to_owned(), progress_text),
        ),
        field("output", or_dash(job.output.as_ref())),
        field(
            "dead letters",
            if detail.dead_letters.is_empty() {
                "-".to_owned()
            } else {
                detail.dead_letters.len().to_string()
            },
        ),
        field("stage", job.stage.to_string()),
        field("run", job.run_number.to_string()),
        field("checkpoint", or_dash(job.checkpoint.as_ref())),
    ];
    // Why a pending job is not running: every rule that holds it, after its status.
    let held = detail
        .holds
        .iter()
        .map(|hold| field("held", hold.clone()))
        .collect::<Vec<_>>();
    lines.splice(1..1, held);
    lines
}

/// How far a job's stored progress says it is, from 0 to 1, when the value says: `completed`
/// (or `current`, `done`) of `total`, a `percent`, a `fraction` (or `ratio`), or a bare number
/// between 0 and 1. Anything else is shown as text only.
pub(crate) fn progress_ratio(progress: &Value) -> Option<f64> {
    let number = |key: &str| progress.get(key).and_then(Value::as_f64);
    let ratio = if let Some(fraction) = progress.as_f64() {
        fraction
    } else if let Some(total) = number("total").filter(|total| *total > 0.0) {
        ["completed", "current", "done"]
            .into_iter()
            .find_map(number)?
            / total
    } else if let Some(percent) = number("percent") {
        percent / 100.0
    } else {
        number("fraction").or_else(|| number("ratio"))?
    };
    ratio.is_finite().then_some(ratio.clamp(0.0, 1.0))
}

/// The gauge's label: stage, counts and message, as far as the value has them.
fn progress_label(progress: &Value, ratio: f64) -> String {
    let text = |key: &str| progress.get(key).and_then(Value::as_str);
    let mut parts = Vec::new();
    if let Some(stage) = text("stage") {
        parts.push(stage.to_owned());
    }
    let count = ["completed", "current", "done"]
        .into_iter()
        .find_map(|key| progress.get(key).and_then(Value::as_u64));
    match (count, progress.get("total").and_then(Value::as_u64)) {
        (Some(done), Some(total)) => parts.push(format!("{done}/{total}")),
        _ => parts.push(format!("{:.0}%", ratio * 100.0)),
    }
    if let Some(message) = text("message") {
        parts.push(message.to_owned());
    }
    parts.join("  ")
}

fn history_line(kind: &str, line: &HistoryLine) -> Line<'static> {
    Line::from(vec![
        Span::styled(
            format!(" {} ", format_time(line.at)),
            Style::new().fg(Color::DarkGray),
        ),
        Span::raw(format!(
            "{kind:<8} #{:<3} ",
            line.attempt
                .map_or_else(|| "-".to_owned(), |a| a.to_string())
        )),
        Span::styled(
            format!("{:<16} ", line.label),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(line.text.clone()),
    ])
}

fn matches(search: &Search, line: &HistoryLine) -> bool {
    search.matches(&line.text) || search.matches(&line.label)
}

fn history(search: &Search, detail: &JobDetailData) -> Vec<Line<'static>> {
    let mut lines: Vec<(chrono::DateTime<chrono::Utc>, Line<'static>)> = Vec::new();
    for (kind, rows) in [
        ("attempt", &detail.attempts),
        ("event", &detail.events),
        ("dead", &detail.dead_letters),
    ] {
        for row in rows.iter().filter(|row| matches(search, row)) {
            lines.push((row.at, history_line(kind, row)));
        }
    }
    lines.sort_by_key(|(at, _)| *at);
    if lines.is_empty() {
        return vec![Line::from(" no finished attempts or events yet")];
    }
    lines.into_iter().map(|(_, line)| line).collect()
}

fn logs(search: &Search, detail: &JobDetailData) -> Vec<Line<'static>> {
    let lines: Vec<Line<'static>> = detail
        .logs
        .iter()
        .filter(|row| matches(search, row))
        .map(|row| history_line("log", row))
        .collect();
    if lines.is_empty() {
        vec![Line::from(
            " no log lines (handlers write them with ctx.log / ctx.info)",
        )]
    } else {
        lines
    }
}
