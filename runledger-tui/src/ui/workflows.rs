//! Workflows: runs newest first with their step progress, status and type filters.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Paragraph, Row, Table};

use super::{
    format_optional_time, format_time, not_loaded_text, placeholder, render_table, run_status_style,
};
use crate::app::App;

fn filter_line(app: &App) -> String {
    let f = &app.workflow_filter;
    let mut parts = vec![format!(
        "status: {}",
        f.status.map_or("all", |s| s.as_str())
    )];
    if let Some(text) = &f.type_contains {
        parts.push(format!("type ~ {text}"));
    }
    parts.push(format!("page {}", app.workflow_pages.len() + 1));
    format!(" {}", parts.join("  |  "))
}

pub(super) fn draw(frame: &mut Frame<'_>, area: Rect, block: Block<'_>, app: &App) {
    let Some(loaded) = &app.workflows else {
        return placeholder(frame, area, block, &not_loaded_text(app));
    };
    let data = &loaded.data;
    let block = block.title(format!(" {} runs ", data.total));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [filters, table_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(inner);
    frame.render_widget(
        Paragraph::new(filter_line(app)).style(Style::new().fg(Color::Cyan)),
        filters,
    );
    if data.runs.is_empty() {
        frame.render_widget(
            Paragraph::new(" no workflow runs match").style(Style::new().fg(Color::DarkGray)),
            table_area,
        );
        return;
    }
    let mut header = vec![
        "ID",
        "TYPE",
        "STATUS",
        "STEPS OK/FAIL/ALL",
        "CREATED",
        "FINISHED",
    ];
    if app.wide {
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
        if app.wide {
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
    if app.wide {
        widths.extend([Constraint::Length(36), Constraint::Min(10)]);
    }
    let table = Table::new(rows, widths);
    render_table(
        frame,
        table_area,
        table,
        header,
        app.selected_workflow,
        data.runs.len(),
    );
}
