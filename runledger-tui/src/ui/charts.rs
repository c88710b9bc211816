//! The dashboard's charts: successes, dead letters and queue depth over the last hour, one
//! sparkline each, a bar per minute.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Sparkline};

use crate::model::ActivityPoint;

/// Rows the charts take.
pub(crate) const HEIGHT: u16 = 5;

/// One chart: its name, the value it plots, its colour, and whether it is a level (shown with
/// its current value) rather than a count per minute (shown with its total and peak).
struct Series {
    name: &'static str,
    value: fn(&ActivityPoint) -> u64,
    color: Color,
    is_level: bool,
}

const SERIES: [Series; 3] = [
    Series {
        name: "succeeded/min",
        value: |p| p.succeeded,
        color: Color::Green,
        is_level: false,
    },
    Series {
        name: "dead-lettered/min",
        value: |p| p.dead_lettered,
        color: Color::Red,
        is_level: false,
    },
    Series {
        name: "queue depth",
        value: |p| p.queue_depth,
        color: Color::Cyan,
        is_level: true,
    },
];

/// Draws the three charts side by side in `area`.
pub(crate) fn draw(frame: &mut Frame<'_>, area: Rect, activity: &[ActivityPoint]) {
    let areas = Layout::horizontal([Constraint::Ratio(1, 3); 3]).split(area);
    for (series, area) in SERIES.iter().zip(areas.iter()) {
        let Series {
            name,
            value,
            color,
            is_level,
        } = *series;
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
