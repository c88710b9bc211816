//! Definitions: every job type's settings, runtime config and schedules.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Row, Table};

use super::{json_text, not_loaded_text, placeholder, render_table};
use crate::app::App;

pub(super) fn draw(frame: &mut Frame<'_>, area: Rect, block: Block<'_>, app: &App) {
    let Some(loaded) = &app.definitions else {
        return placeholder(frame, area, block, &not_loaded_text(app));
    };
    let rows = app.visible_definitions();
    if rows.is_empty() {
        let text = if loaded.data.is_empty() {
            "no job definitions yet"
        } else {
            "no job type matches the filter (c clears it)"
        };
        return placeholder(frame, area, block, text);
    }
    let body = rows.iter().map(|d| {
        let schedules = d
            .schedules
            .iter()
            .map(|(name, cron, active)| {
                format!("{name} [{cron}]{}", if *active { "" } else { " (paused)" })
            })
            .collect::<Vec<_>>()
            .join(", ");
        let row = Row::new([
            d.job_type.clone(),
            if d.enabled { "yes" } else { "no" }.to_owned(),
            d.version.to_string(),
            d.max_attempts.to_string(),
            format!("{}s", d.timeout_seconds),
            d.priority.to_string(),
            format!("{}..{}", d.retry_ms.0, d.retry_ms.1),
            d.runtime_config
                .as_ref()
                .map_or_else(|| "-".to_owned(), |c| json_text(c, true)),
            schedules,
        ]);
        if d.enabled {
            row
        } else {
            row.style(Style::new().fg(Color::DarkGray))
        }
    });
    let table = Table::new(
        body,
        [
            Constraint::Min(16),
            Constraint::Length(3),
            Constraint::Length(4),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Length(4),
            Constraint::Length(16),
            Constraint::Min(10),
            Constraint::Min(10),
        ],
    )
    .block(block);
    let header = [
        "TYPE",
        "ON",
        "VER",
        "TRIES",
        "TIMEOUT",
        "PRIO",
        "RETRY MS",
        "RUNTIME CONFIG",
        "SCHEDULES",
    ];
    render_table(
        frame,
        area,
        table,
        header,
        app.selected_definition,
        rows.len(),
    );
}
