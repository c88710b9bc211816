//! The dashboard's charts: successes, dead letters and queue depth over the last hour, one
//! sparkline each, a bar per minute.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Sparkline};

use crate::model::ActivityPoint;

/// Rows the charts take.
pub(super) const HEIGHT: u16 = 5;

/// Draws the three charts side by side in `area`.
pub(super) fn draw(frame: &mut Frame<'_>, area: Rect, activity: &[ActivityPoint]) {
    let series: [(&str, fn(&ActivityPoint) -> u64, Color, bool); 3] = [
        ("succeeded/min", |p| p.succeeded, Color::Green, false),
        ("dead-lettered/min", |p| p.dead_lettered, Color::Red, false),
        ("queue depth", |p| p.queue_depth, Color::Cyan, true),
    ];
    let areas = Layout::horizontal([Constraint::Ratio(1, 3); 3]).split(area);
    for ((name, value, color, is_level), area) in series.into_iter().zip(areas.iter()) {
        let data: Vec<u64> = activity.iter().map(value).collect();
        let max = data.iter().copied().max().unwrap_or(0);
        let summary = if is_level {
            format!("now {}", data.last().copied().unwrap_or(0))
        } else {
            format!("{} in 1h, peak {max}", data.iter().sum::<u64>())
        };
        let block = Block::bordered()
            .title(format!(" {name} · {summary} "))
            .border_style(Style::new().fg(Color::DarkGray));
        // The most recent minutes when the area is narrower than the hour.
        let width = usize::from(area.width.saturating_sub(2));
        let shown = &data[data.len().saturating_sub(width)..];
        frame.render_widget(
            Sparkline::default()
                .block(block)
                .data(shown)
                .max(max.max(1))
                .style(Style::new().fg(color)),
            *area,
        );
    }
}
