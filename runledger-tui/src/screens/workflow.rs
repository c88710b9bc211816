//! Workflow detail: the run's summary and its steps with their prerequisites and statuses.

use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table};
use runledger_engine::core::jobs::{WorkflowRunId, WorkflowStepId};

use super::job::JobDetail;
use super::list::{Movement, Paged};
use super::screen::{Action, Loaded, Screen};
use crate::model::{
    Data, Query, Snapshot, StepRow, ViewQuery, WorkflowDetailData, prerequisites_cell,
};
use crate::ui::{
    Context, format_optional_time, format_time, json_text, placeholder, render_table,
    run_status_style, step_status_style,
};

/// The detail screen of one workflow run.
#[derive(Debug)]
pub(crate) struct WorkflowDetail {
    id: WorkflowRunId,
    /// The page of steps shown and the selected step.
    pages: Paged<WorkflowStepId>,
    /// `None` inside: no run has this id.
    data: Option<Loaded<Option<Box<WorkflowDetailData>>>>,
}

impl WorkflowDetail {
    pub(crate) fn new(id: WorkflowRunId) -> Self {
        Self {
            id,
            pages: Paged::default(),
            data: None,
        }
    }

    fn steps(&self) -> &[StepRow] {
        self.data
            .as_ref()
            .and_then(|loaded| loaded.data.as_deref())
            .map_or(&[], |detail| &detail.steps)
    }

    fn selected(&self) -> Option<&StepRow> {
        let steps = self.steps();
        steps.get(self.pages.selection.index(steps.len()))
    }
}

impl Screen for WorkflowDetail {
    fn title(&self) -> String {
        format!("Workflow run {}", self.id)
    }

    fn hints(&self) -> &'static str {
        " h back  j/k move  Enter open step job  v raw/pretty  y copy  ? help  q quit"
    }

    fn query(&self) -> ViewQuery {
        ViewQuery::Workflow {
            id: self.id,
            after: self.pages.after(),
        }
    }

    fn absorb(&mut self, snapshot: Snapshot) -> Option<Snapshot> {
        if snapshot.query.view != self.query() {
            return Some(snapshot);
        }
        Loaded::keep(&mut self.data, snapshot, |data| match data {
            Data::Workflow(data) => Ok(data),
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
                .and_then(|loaded| loaded.data.as_ref())
                .and_then(|detail| detail.next_cursor);
            self.pages.apply(movement, self.steps().len(), next);
            return Some(Action::Done);
        }
        match key.code {
            KeyCode::Enter | KeyCode::Char('l') => Some(match self.selected()?.job_id {
                Some(job) => Action::Open(Box::new(JobDetail::new(job))),
                None => Action::Flash("this step has no job yet".to_owned()),
            }),
            // The step's job, or the run when the step has none.
            KeyCode::Char('y') => {
                Some(Action::Copy(match self.selected().and_then(|s| s.job_id) {
                    Some(job) => job.to_string(),
                    None => self.id.to_string(),
                }))
            }
            _ => None,
        }
    }

    fn draw(&self, frame: &mut Frame<'_>, area: Rect, block: Block<'_>, context: &Context<'_>) {
        let Some(loaded) = &self.data else {
            return placeholder(frame, area, block, &context.not_loaded_text());
        };
        let Some(detail) = &loaded.data else {
            return placeholder(frame, area, block, "no workflow run has this id");
        };
        let run = &detail.run;
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let [summary_area, steps_area] =
            Layout::vertical([Constraint::Length(4), Constraint::Min(1)]).areas(inner);
        let metadata = json_text(&run.metadata, true);
        let result = run
            .result
            .as_ref()
            .map_or_else(|| "-".to_owned(), |r| json_text(r, true));
        let summary = vec![
            Line::from(vec![
                format!(" {}  ", run.workflow_type).into(),
                Span::styled(run.status.to_string(), run_status_style(run.status)),
                format!("  reason: {}", run.status_reason.as_deref().unwrap_or("-")).into(),
            ]),
            Line::from(format!(
                " created {}  finished {}  org {}",
                format_time(run.created_at),
                format_optional_time(run.finished_at),
                run.organization_id
                    .map_or_else(|| "-".to_owned(), |o| o.to_string())
            )),
            Line::from(format!(
                " steps {}  page {}  metadata {metadata}",
                run.progress.map_or_else(
                    || "-".to_owned(),
                    |(succeeded, failed, total)| format!(
                        "{succeeded} succeeded, {failed} failed of {total}"
                    )
                ),
                self.pages.number()
            )),
            Line::from(format!(" result {result}")),
        ];
        frame.render_widget(Paragraph::new(summary), summary_area);
        if detail.steps.is_empty() {
            frame.render_widget(Paragraph::new(" this run has no steps"), steps_area);
            return;
        }
        let rows = detail.steps.iter().map(|step| {
            let deps = prerequisites_cell(
                &step.dependencies,
                step.dependency_count,
                ", ",
                |key, condition| {
                    if condition == "TERMINAL" {
                        format!("{key}(any)")
                    } else {
                        key.to_owned()
                    }
                },
            );
            Row::new([
                step.key.clone(),
                step.kind.clone(),
                step.status.to_string(),
                deps,
                step.job_id.map(|j| j.to_string()).unwrap_or_default(),
                step.error.clone().unwrap_or_default(),
            ])
            .style(step_status_style(step.status))
        });
        let table = Table::new(
            rows,
            [
                Constraint::Min(10),
                Constraint::Min(12),
                Constraint::Length(20),
                Constraint::Min(12),
                Constraint::Length(36),
                Constraint::Min(10),
            ],
        );
        let header = ["STEP", "JOB TYPE", "STATUS", "AFTER", "JOB", "ERROR"];
        render_table(
            frame,
            steps_area,
            table,
            header,
            self.pages.selection.index(detail.steps.len()),
        );
    }
}
