//! Queue: jobs newest first, with status, type, search and workflow-run filters, keyset pages.

use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Constraint, Rect};
use ratatui::widgets::{Block, Row, Table};
use runledger_engine::core::jobs::{JobId, JobStatus};

use super::job::JobDetail;
use super::list::{Movement, Paged, cycle};
use super::screen::{Action, Loaded, Screen};
use crate::input::{Input, InputKind};
use crate::model::{COUNT_CAP, Data, JobRow, Query, QueueData, QueueFilter, Snapshot, ViewQuery};
use crate::ui::{
    Context, empty_list, filter_line, format_count, format_time, job_status_style, placeholder,
    render_table,
};

/// The order `f` cycles through, after "all".
const STATUSES: [JobStatus; 5] = [
    JobStatus::Pending,
    JobStatus::Leased,
    JobStatus::Succeeded,
    JobStatus::DeadLettered,
    JobStatus::Canceled,
];

/// The queue screen.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    pub(crate) filter: QueueFilter,
    pub(crate) pages: Paged<JobId>,
    data: Option<Loaded<QueueData>>,
}

impl Queue {
    /// Only the jobs of `job_type`, from the first page, every other filter cleared.
    pub(crate) fn show_type(&mut self, job_type: String) {
        self.filter = QueueFilter {
            type_contains: Some(job_type),
            ..QueueFilter::default()
        };
        self.pages.reset();
    }

    /// The prompt that edits the job type filter.
    pub(crate) fn type_prompt(&self) -> Input {
        Input::new(InputKind::JobType, self.filter.type_contains.as_deref())
    }

    fn jobs(&self) -> &[JobRow] {
        self.data.as_ref().map_or(&[], |loaded| &loaded.data.jobs)
    }

    fn selected(&self) -> Option<&JobRow> {
        let jobs = self.jobs();
        jobs.get(self.pages.selection.index(jobs.len()))
    }

    /// `w`: only the selected job's workflow run, or all jobs again. `None` when there is
    /// neither a run filter to drop nor a run to filter by.
    fn toggle_run(&mut self) -> Option<Action> {
        self.filter.workflow_run = match self.filter.workflow_run {
            Some(_) => None,
            None => Some(self.selected()?.workflow_run_id?),
        };
        self.pages.reset();
        Some(Action::Done)
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
        if let Some(text) = &f.search {
            parts.push(format!("search: {text}"));
        }
        if let Some(run) = f.workflow_run {
            parts.push(format!("run: {run}"));
        }
        parts.push(format!("page {}", self.pages.number()));
        parts
    }
}

impl Screen for Queue {
    fn title(&self) -> String {
        "Queue".to_owned()
    }

    fn hints(&self) -> &'static str {
        " Enter open  / search  t type  f status  w run  c clear  v wide  y copy  ? help"
    }

    fn query(&self) -> ViewQuery {
        ViewQuery::Queue {
            filter: self.filter.clone(),
            after: self.pages.after(),
        }
    }

    fn absorb(&mut self, snapshot: Snapshot) -> Option<Snapshot> {
        Loaded::keep(&mut self.data, snapshot, |data| match data {
            Data::Queue(data) => Ok(data),
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
            self.pages.apply(movement, self.jobs().len(), next);
            return Some(Action::Done);
        }
        match key.code {
            KeyCode::Enter | KeyCode::Char('l') => {
                let id = self.selected()?.id;
                return Some(Action::Open(Box::new(JobDetail::new(id))));
            }
            KeyCode::Char('/') => {
                let search = self.filter.search.as_deref();
                return Some(Action::Prompt(Input::new(InputKind::Search, search)));
            }
            KeyCode::Char('w') => return self.toggle_run(),
            KeyCode::Char('y') => return Some(Action::Copy(self.selected()?.id.to_string())),
            KeyCode::Char('f') => self.filter.status = cycle(&STATUSES, self.filter.status),
            KeyCode::Char('c') => self.filter = QueueFilter::default(),
            _ => return None,
        }
        // A new filter: from the first page.
        self.pages.reset();
        Some(Action::Done)
    }

    fn submit(&mut self, kind: InputKind, value: Option<String>) -> Action {
        match kind {
            InputKind::Search => self.filter.search = value,
            InputKind::JobType => self.filter.type_contains = value,
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
        let block = block.title(format!(
            " {} matching ",
            format_count(data.total, COUNT_CAP)
        ));
        let table_area = filter_line(frame, area, block, &self.filter_parts());
        if data.jobs.is_empty() {
            let text = if self.filter.is_empty() {
                " the queue is empty"
            } else {
                " no job matches these filters (c clears them)"
            };
            return empty_list(frame, table_area, text);
        }
        let mut header = vec![
            "ID",
            "TYPE",
            "QUEUE",
            "STATUS",
            "TRIES",
            "CREATED",
            "NEXT/FINISHED",
            "ERROR",
        ];
        if wide {
            header.extend(["ORG", "WORKER", "RUN", "RESOURCE"]);
        }
        let rows = data.jobs.iter().map(|job| {
            let when = match job.finished_at {
                Some(at) => format_time(at),
                None => format_time(job.next_run_at),
            };
            let mut cells = vec![
                job.id.to_string(),
                job.job_type.clone(),
                job.queue.clone(),
                job.status.to_string(),
                format!("{}/{}", job.attempts_used, job.max_attempts),
                format_time(job.created_at),
                when,
                job.last_error_code.clone().unwrap_or_default(),
            ];
            if wide {
                cells.push(
                    job.organization_id
                        .map(|o| o.to_string())
                        .unwrap_or_default(),
                );
                cells.push(job.worker_id.clone().unwrap_or_default());
                cells.push(
                    job.workflow_run_id
                        .map(|r| r.to_string())
                        .unwrap_or_default(),
                );
                cells.push(job.resource_key.clone().unwrap_or_default());
            }
            Row::new(cells).style(job_status_style(job.status))
        });
        let mut widths = vec![
            Constraint::Length(36),
            Constraint::Min(14),
            Constraint::Min(8),
            Constraint::Length(13),
            Constraint::Length(5),
            Constraint::Length(14),
            Constraint::Length(14),
            Constraint::Min(10),
        ];
        if wide {
            widths.extend([
                Constraint::Length(36),
                Constraint::Length(12),
                Constraint::Length(36),
                Constraint::Min(10),
            ]);
        }
        let table = Table::new(rows, widths);
        render_table(
            frame,
            table_area,
            table,
            header,
            self.pages.selection.index(data.jobs.len()),
        );
    }
}
