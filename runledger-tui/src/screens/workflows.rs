//! Workflows: runs newest first with their step progress, status and type filters.

use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Constraint, Rect};
use ratatui::widgets::{Block, Row, Table};
use runledger_engine::core::jobs::{WorkflowRunId, WorkflowRunStatus};
use uuid::Uuid;

use super::list::{Movement, Paged, cycle};
use super::screen::{Action, Loaded, Screen};
use super::workflow::WorkflowDetail;
use crate::input::{Input, InputKind};
use crate::model::{Data, Query, RunRow, Snapshot, ViewQuery, WorkflowFilter, WorkflowsData};
use crate::ui::{
    Context, empty_list, filter_line, format_optional_time, format_time, placeholder, render_table,
    run_status_style,
};

/// The order `f` cycles through, after "all".
const STATUSES: [WorkflowRunStatus; 5] = [
    WorkflowRunStatus::Running,
    WorkflowRunStatus::WaitingForExternal,
    WorkflowRunStatus::Succeeded,
    WorkflowRunStatus::CompletedWithErrors,
    WorkflowRunStatus::Canceled,
];

/// The workflows screen.
#[derive(Debug, Default)]
pub(crate) struct Workflows {
    pub(crate) filter: WorkflowFilter,
    pub(crate) pages: Paged<WorkflowRunId>,
    data: Option<Loaded<WorkflowsData>>,
}

impl Workflows {
    /// The prompt that edits the workflow type filter.
    pub(crate) fn type_prompt(&self) -> Input {
        Input::new(
            InputKind::WorkflowType,
            self.filter.type_contains.as_deref(),
        )
    }

    fn runs(&self) -> &[RunRow] {
        self.data.as_ref().map_or(&[], |loaded| &loaded.data.runs)
    }

    fn selected(&self) -> Option<&RunRow> {
        let runs = self.runs();
        runs.get(self.pages.selection.index(runs.len()))
    }

    /// The filters in force and the page, for the line above the list.
    fn filter_parts(&self) -> Vec<String> {
        let f = &self.filter;
        let mut parts = vec![format!(
            "status: {}",
            f.status.map_or("all", |s| s.as_str())
        )];
        if let Some(text) = &f.type_contains {
            parts.push(format!("type ~ {text}"));
        }
        parts.push(format!("page {}", self.pages.number()));
        parts
    }
}

impl Screen for Workflows {
    fn title(&self) -> String {
        "Workflows".to_owned()
    }

    fn hints(&self) -> &'static str {
        " Enter open  / search  w type  f status  c clear  v wide  y copy  ? help"
    }

    fn query(&self) -> ViewQuery {
        ViewQuery::Workflows {
            filter: self.filter.clone(),
            after: self.pages.after(),
        }
    }

    fn absorb(&mut self, snapshot: Snapshot) -> Option<Snapshot> {
        Loaded::keep(&mut self.data, snapshot, |data| match data {
            Data::Workflows(data) => Ok(data),
            other => Err(other),
        })
    }

    fn loaded(&self) -> Option<(&Query, Duration)> {
        Loaded::answered(self.data.as_ref())
    }

    fn handle_key(&mut self, key: KeyEvent, page_rows: usize) -> Option<Action> {
        if let Some(movement) = Movement::of(key, page_rows) {
            let next = self
                .data
                .as_ref()
                .and_then(|loaded| loaded.data.next_cursor);
            self.pages.apply(movement, self.runs().len(), next);
            return Some(Action::Done);
        }
        match key.code {
            KeyCode::Enter | KeyCode::Char('l') => {
                let id = self.selected()?.id;
                return Some(Action::Open(Box::new(WorkflowDetail::new(id))));
            }
            KeyCode::Char('/') => {
                return Some(Action::Prompt(Input::new(InputKind::Search, None)));
            }
            KeyCode::Char('t') => return Some(Action::Prompt(self.type_prompt())),
            KeyCode::Char('y') => return Some(Action::Copy(self.selected()?.id.to_string())),
            KeyCode::Char('f') => self.filter.status = cycle(&STATUSES, self.filter.status),
            KeyCode::Char('c') => self.filter = WorkflowFilter::default(),
            _ => return None,
        }
        // A new filter: from the first page.
        self.pages.reset();
        Some(Action::Done)
    }

    /// `/` takes a run id to open or a workflow type to filter by.
    fn submit(&mut self, kind: InputKind, value: Option<String>) -> Action {
        match kind {
            InputKind::Search => {
                if let Some(Ok(id)) = value.as_deref().map(Uuid::parse_str) {
                    return Action::Lookup(id);
                }
                self.filter.type_contains = value;
            }
            InputKind::WorkflowType => self.filter.type_contains = value,
            _ => return Action::Done,
        }
        self.pages.reset();
        Action::Done
    }

    fn scope_changed(&mut self) {
        self.pages.reset();
    }

    fn draw(&self, frame: &mut Frame<'_>, area: Rect, block: Block<'_>, context: &Context<'_>) {
        let Some(loaded) = &self.data else {
            return placeholder(frame, area, block, &context.not_loaded_text());
        };
        let wide = context.options.wide;
        let data = &loaded.data;
        let block = block.title(format!(" {} runs ", data.total));
        let table_area = filter_line(frame, area, block, &self.filter_parts());
        if data.runs.is_empty() {
            return empty_list(frame, table_area, " no workflow runs match");
        }
        let mut header = vec![
            "ID",
            "TYPE",
            "STATUS",
            "STEPS OK/FAIL/ALL",
            "CREATED",
            "FINISHED",
        ];
        if wide {
            header.extend(["ORG", "REASON"]);
        }
        let rows = data.runs.iter().map(|run| {
            let progress = run.progress.map_or_else(
                || "-".to_owned(),
                |(ok, failed, total)| format!("{ok}/{failed}/{total}"),
            );
            let mut cells = vec![
                run.id.to_string(),
                run.workflow_type.clone(),
                run.status.to_string(),
                progress,
                format_time(run.created_at),
                format_optional_time(run.finished_at),
            ];
            if wide {
                cells.push(
                    run.organization_id
                        .map(|o| o.to_string())
                        .unwrap_or_default(),
                );
                cells.push(run.status_reason.clone().unwrap_or_default());
            }
            Row::new(cells).style(run_status_style(run.status))
        });
        let mut widths = vec![
            Constraint::Length(36),
            Constraint::Min(14),
            Constraint::Length(21),
            Constraint::Length(17),
            Constraint::Length(14),
            Constraint::Length(14),
        ];
        if wide {
            widths.extend([Constraint::Length(36), Constraint::Min(10)]);
        }
        let table = Table::new(rows, widths);
        render_table(
            frame,
            table_area,
            table,
            header,
            self.pages.selection.index(data.runs.len()),
        );
    }
}
