//! Dashboard: the last hour's charts, per-type queue metrics, durable enqueue intents and
//! workflow run counters.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};

use super::{Clock, format_duration, not_loaded_text, placeholder, render_table};
use crate::app::App;

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0}"))
}

pub(super) fn draw(frame: &mut Frame<'_>, area: Rect, block: Block<'_>, app: &App, clock: Clock) {
    let Some(loaded) = &app.dashboard else {
        return placeholder(frame, area, block, &not_loaded_text(app));
    };
    let rows = app.visible_metrics();
    let data = &loaded.data;
    let sum = |f: fn(&crate::model::MetricRow) -> i64| data.metrics.iter().map(f).sum::<i64>();
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
        Constraint::Length(super::charts::HEIGHT),
        Constraint::Min(1),
    ])
    .areas(inner);
    frame.render_widget(Paragraph::new(vec![summary, intent_line]), summary_area);
    super::charts::draw(frame, charts_area, &data.activity);
    if rows.is_empty() {
        let text = if data.metrics.is_empty() {
            "no job definitions yet"
        } else {
            "no job type matches the filter (c clears it)"
        };
        frame.render_widget(
            Paragraph::new(text).style(Style::new().fg(Color::DarkGray)),
            table_area,
        );
        return;
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
        app.selected_dashboard,
        rows.len(),
    );
}
