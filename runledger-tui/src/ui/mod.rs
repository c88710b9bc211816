//! What the screens draw with: the clock and display options a frame is drawn with, the
//! formats of times, counts and JSON, status colours, tables and placeholders. The screens
//! draw themselves (`screens/`); the app draws the frame around them (`app/frame.rs`).

pub(crate) mod charts;
pub(crate) mod help;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use runledger_engine::core::jobs::{JobStatus, WorkflowRunStatus, WorkflowStepStatus};

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

/// Display toggles that hold across screens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Options {
    /// `v` on lists: wide tables.
    pub(crate) wide: bool,
    /// `R`: raw (compact) rather than pretty JSON payloads.
    pub(crate) raw_json: bool,
    /// `v` on detail screens: long payload lines wrap rather than being cut at the edge.
    pub(crate) wrap: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            wide: false,
            raw_json: false,
            wrap: true,
        }
    }
}

/// What a screen's drawing needs from outside the screen.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub(crate) clock: Clock,
    pub(crate) options: Options,
    /// The error that keeps data from arriving, if any.
    pub(crate) error: Option<&'a str>,
}

impl Context<'_> {
    /// The text shown where data has not arrived yet: loading, or the error that prevents it.
    pub(crate) fn not_loaded_text(&self) -> String {
        match self.error {
            Some(error) => format!("cannot load: {error}"),
            None => "loading...".to_owned(),
        }
    }
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

/// Draws `table` with a bold `header` and row `selected` highlighted.
pub(crate) fn render_table<'a, H>(
    frame: &mut Frame<'_>,
    area: Rect,
    table: Table<'a>,
    header: H,
    selected: usize,
) where
    H: IntoIterator,
    H::Item: Into<Cell<'a>>,
{
    let table = table
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(selected_style());
    let mut state = TableState::default().with_selected(Some(selected));
    frame.render_stateful_widget(table, area, &mut state);
}

/// Draws `block` with the line of filters `parts` at its top (the page last); returns the
/// area below that line.
pub(crate) fn filter_line(
    frame: &mut Frame<'_>,
    area: Rect,
    block: Block<'_>,
    parts: &[String],
) -> Rect {
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [filters, rest] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(inner);
    frame.render_widget(
        Paragraph::new(format!(" {}", parts.join("  |  "))).style(Style::new().fg(Color::Cyan)),
        filters,
    );
    rest
}

/// A dim line where a list has no rows, saying why.
pub(crate) fn empty_list(frame: &mut Frame<'_>, area: Rect, text: &str) {
    frame.render_widget(
        Paragraph::new(text.to_owned()).style(Style::new().fg(Color::DarkGray)),
        area,
    );
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
