//! Dashboard: the last hour's charts, per-type queue metrics, durable enqueue intents and
//! workflow run counters.

use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::KeyEvent;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};

use super::job_types::{HINTS, JobTypes};
use super::screen::{Action, Loaded, Screen};
use crate::input::InputKind;
use crate::model::{DashboardData, Data, MetricRow, Query, Snapshot, ViewQuery};
use crate::ui::{Context, charts, empty_list, format_duration, placeholder, render_table};

/// The dashboard screen.
#[derive(Debug, Default)]
pub(crate) struct Dashboard {
    pub(crate) types: JobTypes,
    data: Option<Loaded<DashboardData>>,
}

impl Dashboard {
    /// The job types the search lets through.
    fn visible(&self) -> Vec<&MetricRow> {
        self.data.as_ref().map_or_else(Vec::new, |loaded| {
            loaded
                .data
                .metrics
                .iter()
                .filter(|m| self.types.search.matches(&m.job_type))
                .collect()
        })
    }
}

impl Screen for Dashboard {
    fn title(&self) -> String {
        "Dashboard".to_owned()
    }

    fn hints(&self) -> &'static str {
        HINTS
    }

    fn query(&self) -> ViewQuery {
        ViewQuery::Dashboard
    }

    fn absorb(&mut self, snapshot: Snapshot) -> Option<Snapshot> {
        Loaded::keep(&mut self.data, snapshot, |data| match data {
            Data::Dashboard(data) => Ok(data),
            other => Err(other),
        })
    }

    fn loaded(&self) -> Option<(&Query, Duration)> {
        Loaded::answered(self.data.as_ref())
    }

    fn handle_key(&mut self, key: KeyEvent, page_rows: usize) -> Option<Action> {
        let shown: Vec<String> = self
            .visible()
            .into_iter()
            .map(|m| m.job_type.clone())
            .collect();
        self.types.handle_key(key, page_rows, &shown)
    }

    fn submit(&mut self, kind: InputKind, value: Option<String>) -> Action {
        self.types.submit(kind, value)
    }

    fn draw(&self, frame: &mut Frame<'_>, area: Rect, block: Block<'_>, context: &Context<'_>) {
        let Some(loaded) = &self.data else {
            return placeholder(frame, area, block, &context.not_loaded_text());
        };
        let clock = context.clock;
        let rows = self.visible();
        let data = &loaded.data;
        let sum = |f: fn(&MetricRow) -> i64| data.metrics.iter().map(f).sum::<i64>();
        let summary = Line::from(format!(
            " pending {}  ready {}  leased {}  stale leases {}  succeeded 24h {}  dead-lettered 24h {}  panicked 24h {}  |  runs: running {}  waiting {}  with errors {}",
            sum(|m| m.pending),
            sum(|m| m.ready),
            sum(|m| m.leased),
            sum(|m| m.stale_leases),
            sum(|m| m.succeeded_24h),
            sum(|m| m.dead_lettered_24h),
            sum(|m| m.panicked_24h),
            data.runs_running,
            data.runs_waiting,
            data.runs_with_errors,
        ));
        let intents = &data.intents;
        let oldest_intent = intents.oldest_pending_at.map_or_else(
            || "-".to_owned(),
            |at| format_duration((clock.utc - at).to_std().unwrap_or_default()),
        );
        let intent_line = Line::from(format!(
            " intents: pending {}  oldest {}  deferred {}  promoted 24h {}  conflicted 24h {}",
            intents.pending,
            oldest_intent,
            intents.deferred,
            intents.promoted_24h,
            intents.conflicted_24h,
        ));
        let intent_line = if intents.conflicted_24h > 0 || intents.deferred > 0 {
            intent_line.style(Style::new().fg(Color::Red))
        } else {
            intent_line
        };
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let [summary_area, charts_area, table_area] = Layout::vertical([
            Constraint::Length(3),
            Constraint::Length(charts::HEIGHT),
            Constraint::Min(1),
        ])
        .areas(inner);
        frame.render_widget(Paragraph::new(vec![summary, intent_line]), summary_area);
        charts::draw(frame, charts_area, &data.activity);
        if rows.is_empty() {
            let text = if data.metrics.is_empty() {
                "no job definitions yet"
            } else {
                "no job type matches the filter (c clears it)"
            };
            return empty_list(frame, table_area, text);
        }
        let header = [
            "TYPE", "ON", "PENDING", "READY", "OLDEST", "LEASED", "STALE", "OK 24H", "DEAD 24H",
            "P50 MS", "P95 MS",
        ];
        let body = rows.iter().map(|m| {
            let oldest = m.oldest_ready_at.map_or_else(
                || "-".to_owned(),
                |at| format_duration((clock.utc - at).to_std().unwrap_or_default()),
            );
            let row = Row::new([
                m.job_type.clone(),
                if m.enabled { "yes" } else { "no" }.to_owned(),
                m.pending.to_string(),
                m.ready.to_string(),
                oldest,
                m.leased.to_string(),
                m.stale_leases.to_string(),
                m.succeeded_24h.to_string(),
                m.dead_lettered_24h.to_string(),
                ms(m.p50_ms),
                ms(m.p95_ms),
            ]);
            if m.stale_leases > 0 || m.dead_lettered_24h > 0 || m.panicked_24h > 0 {
                row.style(Style::new().fg(Color::Red))
            } else {
                row
            }
        });
        let widths = [
            Constraint::Min(16),
            Constraint::Length(3),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(7),
        ];
        let table = Table::new(body, widths);
        render_table(
            frame,
            table_area,
            table,
            header,
            self.types.selection.index(rows.len()),
        );
    }
}

/// Milliseconds, whole.
fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0}"))
}
