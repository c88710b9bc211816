//! The help overlay (`?`): every key and what it does.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

/// Keys and their effect, in the order shown.
pub(crate) const KEYS: &[(&str, &str)] = &[
    (
        "1-4, Tab, Shift+Tab",
        "switch screen: Dashboard, Queue, Workflows, Definitions",
    ),
    (
        "j/k, Down/Up",
        "move the selection (scroll in job detail); past the end turns the page",
    ),
    ("g / G", "first / last row"),
    ("PgUp / PgDn", "move by a page"),
    (
        "Enter, l",
        "open: job or run detail; on Dashboard/Definitions the jobs of that type",
    ),
    ("h, Esc", "back to the previous screen"),
    (
        "[ ], Left/Right",
        "switch job detail panes: Summary, Attempts+Events, Logs, Payload",
    ),
    (
        "/",
        "search: Queue by id, run id, idempotency key or error code; elsewhere filter rows",
    ),
    (
        "t",
        "job type filter (Queue); workflow type filter on Workflows",
    ),
    (
        "w",
        "Queue: only the selected job's workflow run (again: all); else workflow type filter",
    ),
    ("f", "cycle the status filter (Queue, Workflows)"),
    ("c", "clear the filters of this screen"),
    (
        "v",
        "toggle payload wrapping on detail screens; wide tables on lists",
    ),
    ("R", "toggle raw / pretty payload"),
    (
        "y",
        "copy the selected id (or job type) to the clipboard (OSC 52)",
    ),
    ("p", "pause / resume auto-refresh"),
    (
        "r, .",
        "refresh now, even when paused, skipping the error backoff",
    ),
    (
        ":",
        "command: <uuid> jump to job or run, job/run <uuid>, org <uuid>|all, 1-4, q",
    ),
    (
        "o",
        "edit the organization scope (empty: all organizations)",
    ),
    (
        "O",
        "toggle organization scope: all orgs <-> the last org given",
    ),
    ("?", "this help (any key closes it)"),
    ("q, Ctrl+C", "quit"),
];

pub(crate) fn draw(frame: &mut Frame<'_>, area: Rect) {
    let width = area.width.saturating_sub(4).min(100);
    let height = (KEYS.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let lines: Vec<Line<'static>> = KEYS
        .iter()
        .map(|(keys, what)| {
            Line::from(vec![
                Span::styled(
                    format!(" {keys:<20}"),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(*what),
            ])
        })
        .collect();
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Keys (any key closes) ")),
        popup,
    );
}
