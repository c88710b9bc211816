//! Definitions: every job type's settings, runtime config and schedules.

use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::KeyEvent;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Row, Table};

use super::job_types::{HINTS, JobTypes};
use super::screen::{Action, Loaded, Screen};
use crate::input::InputKind;
use crate::model::{Data, DefinitionRow, Query, Snapshot, ViewQuery};
use crate::ui::{Context, json_text, placeholder, render_table};

/// The definitions screen.
#[derive(Debug, Default)]
pub(crate) struct Definitions {
    pub(crate) types: JobTypes,
    data: Option<Loaded<Vec<DefinitionRow>>>,
}

impl Definitions {
    /// The job types the search lets through.
    fn visible(&self) -> Vec<&DefinitionRow> {
        self.data.as_ref().map_or_else(Vec::new, |loaded| {
            loaded
                .data
                .iter()
                .filter(|d| self.types.search.matches(&d.job_type))
                .collect()
        })
    }
}

impl Screen for Definitions {
    fn title(&self) -> String {
        "Definitions".to_owned()
    }

    fn hints(&self) -> &'static str {
        HINTS
    }

    fn query(&self) -> ViewQuery {
        ViewQuery::Definitions
    }

    fn absorb(&mut self, snapshot: Snapshot) -> Option<Snapshot> {
        Loaded::keep(&mut self.data, snapshot, |data| match data {
            Data::Definitions(data) => Ok(data),
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
            .map(|d| d.job_type.clone())
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
        let rows = self.visible();
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
            self.types.selection.index(rows.len()),
        );
    }
}
