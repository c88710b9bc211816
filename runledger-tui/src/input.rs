//! The prompt in the footer: what it asks for and what was typed so far. The app owns the
//! open prompt; a screen opens the prompts that edit its own filters and receives what they
//! submit.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Which prompt is open in the footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputKind {
    Search,
    JobType,
    WorkflowType,
    Command,
    Organization,
}

impl InputKind {
    pub(crate) fn prompt(self) -> &'static str {
        match self {
            InputKind::Search => "/",
            InputKind::JobType => "job type contains: ",
            InputKind::WorkflowType => "workflow type contains: ",
            InputKind::Command => ":",
            InputKind::Organization => "organization id (empty = all): ",
        }
    }
}

/// An open prompt and what was typed so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Input {
    pub(crate) kind: InputKind,
    pub(crate) text: String,
}

/// What a key did to an open prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Edited {
    /// Still typing.
    Typing,
    /// Esc: closed, nothing applied.
    Canceled,
    /// Enter: apply the text, trimmed (`None` when blank).
    Submitted(Option<String>),
}

impl Input {
    /// A prompt of `kind` that starts with `text` (the value it edits).
    pub(crate) fn new(kind: InputKind, text: Option<&str>) -> Self {
        Self {
            kind,
            text: text.unwrap_or_default().to_owned(),
        }
    }

    /// Applies one key: Enter submits, Esc cancels, Backspace and Ctrl+U erase.
    pub(crate) fn edit(&mut self, key: KeyEvent) -> Edited {
        match key.code {
            KeyCode::Esc => return Edited::Canceled,
            KeyCode::Enter => {
                let text = self.text.trim();
                return Edited::Submitted((!text.is_empty()).then(|| text.to_owned()));
            }
            KeyCode::Backspace => {
                self.text.pop();
            }
            KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                self.text.clear();
            }
            KeyCode::Char(c) => self.text.push(c),
            _ => {}
        }
        Edited::Typing
    }
}
