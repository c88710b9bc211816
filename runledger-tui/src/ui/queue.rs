//! Queue: jobs newest first, with status, type, search and workflow-run filters, keyset pages.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Paragraph, Row, Table};

use super::{
    format_count, format_time, job_status_style, not_loaded_text, placeholder, render_table,
};
use crate::app::App;
use crate::model::COUNT_CAP;

fn filter_line(app: &App) -> String {
    let f = &app.queue_filter;
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
    parts.push(format!("page {}", app.queue_pages.len() + 1));
    format!(" {}", parts.join("  |  "))
}

pub(super) fn draw(frame: &mut Frame<'_>, area: Rect, block: Block<'_>, app: &App) {
    let Some(loaded) = &app.queue else {
        return placeholder(frame, area, block, &not_loaded_text(app));
    };
    let data = &loaded.data;
    let block = block.title(format!(
        " {} matching ",
        format_count(data.total, COUNT_CAP)
    ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [filters, table_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(inner);
    frame.render_widget(
        Paragraph::new(filter_line(app)).style(Style::new().fg(Color::Cyan)),
        filters,
    );
    if data.jobs.is_empty() {
        let text = if app.queue_filter.is_empty() {
            " the queue is empty"
        } else {
            " no job matches these filters (c clears them)"
        };
        frame.render_widget(
            Paragraph::new(text).style(Style::new().fg(Color::DarkGray)),
            table_area,
        );
        return;
    }
    let mut header = vec![
        "ID",
        "TYPE",
        "STATUS",
        "TRIES",
        "CREATED",
        "NEXT/FINISHED",
        "ERROR",
    ];
    if app.wide {
        header.extend(["ORG", "WORKER", "RUN"]);
    }
    let rows = data.jobs.iter().map(|job| {
        let when = match job.finished_at {
            Some(at) => format_time(at),
            None => format_time(job.next_run_at),
        };
        let mut cells = vec![
            job.id.to_string(),
            job.job_type.clone(),
            job.status.to_string(),
            format!("{}/{}", job.attempts_used, job.max_attempts),
            format_time(job.created_at),
            when,
            job.last_error_code.clone().unwrap_or_default(),
        ];
        if app.wide {
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
        }
        Row::new(cells).style(job_status_style(job.status))
    });
    let mut widths = vec![
        Constraint::Length(36),
        Constraint::Min(14),
        Constraint::Length(13),
        Constraint::Length(5),
        Constraint::Length(14),
        Constraint::Length(14),
        Constraint::Min(10),
    ];
    if app.wide {
        widths.extend([
            Constraint::Length(36),
            Constraint::Length(12),
            Constraint::Length(36),
        ]);
    }
    let table = Table::new(rows, widths);
    render_table(
        frame,
        table_area,
        table,
        header,
        app.selected_queue,
        data.jobs.len(),
    );
}
