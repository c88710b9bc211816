//! Workflow detail: the run's summary and its steps with their prerequisites and statuses.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use runledger_engine::core::jobs::WorkflowRunId;

use super::{
    format_optional_time, format_time, json_text, not_loaded_text, placeholder, render_table,
    run_status_style, step_status_style,
};
use crate::app::App;

pub(super) fn draw(
    frame: &mut Frame<'_>,
    area: Rect,
    block: Block<'_>,
    app: &App,
    id: WorkflowRunId,
) {
    let loaded = app
        .workflow
        .as_ref()
        .filter(|l| l.data.as_ref().is_none_or(|d| d.run.id == id));
    let Some(loaded) = loaded else {
        return placeholder(frame, area, block, &not_loaded_text(app));
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
            ratatui::text::Span::styled(run.status.to_string(), run_status_style(run.status)),
            format!("  reason: {}", run.status_reason.as_deref().unwrap_or("-")).into(),
        ]),
        Line::from(format!(
            " created {}  finished {}  org {}",
            format_time(run.created_at),
            format_optional_time(run.finished_at),
            run.organization_id
                .map_or_else(|| "-".to_owned(), |o| o.to_string())
        )),
        Line::from(format!(" metadata {metadata}")),
        Line::from(format!(" result {result}")),
    ];
    frame.render_widget(Paragraph::new(summary), summary_area);
    if detail.steps.is_empty() {
        frame.render_widget(Paragraph::new(" this run has no steps"), steps_area);
        return;
    }
    let rows = detail.steps.iter().map(|step| {
        let deps = if step.dependencies.is_empty() {
            "-".to_owned()
        } else {
            step.dependencies
                .iter()
                .map(|(key, condition)| {
                    if condition == "TERMINAL" {
                        format!("{key}(any)")
                    } else {
                        key.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
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
        app.selected_step,
        detail.steps.len(),
    );
}
