//! The frame around the screen on top: the title bar with the tabs, the scope and the state
//! of the data; the footer with the prompt, a message or the screen's key hints; the help
//! overlay.

use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use super::App;
use crate::ui::{Clock, Context, format_duration, help};

/// Rows of chrome around a table (title, borders, header, footer): what a page key skips.
pub(crate) const CHROME_ROWS: u16 = 6;

/// Draws the whole screen.
pub(crate) fn draw(frame: &mut Frame<'_>, app: &App, clock: Clock) {
    let [title, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(title_line(app, clock)), title);
    let screen = app.top();
    let block = Block::bordered().title(format!(" {} ", screen.title()));
    let context = Context {
        clock,
        options: app.options,
        error: app
            .connection
            .error
            .as_ref()
            .map(|(error, _)| error.as_str()),
    };
    screen.draw(frame, body, block, &context);
    frame.render_widget(Paragraph::new(footer_line(app)), footer);
    if app.help {
        help::draw(frame, frame.area());
    }
}

/// The title bar: tabs, scope and the state of the data (live, loading, paused, stale,
/// reconnecting with the error).
fn title_line(app: &App, clock: Clock) -> Line<'static> {
    let mut spans = vec![Span::styled(
        " runledger ",
        Style::new().add_modifier(Modifier::BOLD),
    )];
    for (i, tab) in app.tabs.iter().enumerate() {
        let text = format!(" {} {} ", i + 1, tab.title());
        let style = if i == app.tab {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        spans.push(Span::styled(text, style));
    }
    let scope = match app.organization {
        Some(org) => format!(" | org {org}"),
        None => " | all orgs".to_owned(),
    };
    spans.push(Span::raw(scope));
    let (state, style) = data_state(app, clock.now);
    spans.push(Span::raw(" | "));
    spans.push(Span::styled(state, style));
    Line::from(spans)
}

/// A short description of how fresh the data is.
fn data_state(app: &App, now: Instant) -> (String, Style) {
    let age = app
        .connection
        .last_ok
        .map(|at| now.saturating_duration_since(at));
    let updated = age.map_or_else(String::new, |age| {
        format!(" (updated {} ago)", format_duration(age))
    });
    if let Some((error, attempt)) = &app.connection.error {
        return (
            format!("reconnecting, try {attempt}: {error}{updated}"),
            Style::new().fg(Color::Red),
        );
    }
    if !app.is_current() {
        return ("loading...".to_owned(), Style::new().fg(Color::Yellow));
    }
    if app.paused {
        return (format!("paused{updated}"), Style::new().fg(Color::Yellow));
    }
    let stale_after = (app.refresh * 3).max(Duration::from_secs(5));
    if age.is_some_and(|age| age > stale_after) {
        return (format!("stale{updated}"), Style::new().fg(Color::Yellow));
    }
    let took = app
        .current_elapsed()
        .map_or_else(String::new, |d| format!(" in {} ms", d.as_millis()));
    (format!("live{took}"), Style::new().fg(Color::Green))
}

fn footer_line(app: &App) -> Line<'static> {
    if let Some(input) = &app.input {
        return Line::from(vec![
            Span::styled(
                input.kind.prompt().to_owned(),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::raw(input.text.clone()),
            Span::styled("_", Style::new().add_modifier(Modifier::SLOW_BLINK)),
            Span::raw("   (Enter apply, Esc cancel)"),
        ]);
    }
    if let Some(flash) = &app.flash {
        return Line::from(Span::styled(
            format!(" {flash}"),
            Style::new().fg(Color::Cyan),
        ));
    }
    Line::from(Span::styled(
        app.top().hints(),
        Style::new().fg(Color::DarkGray),
    ))
}
