//! A list of job types, one row each, as the Dashboard and Definitions show it: `/` filters
//! the rows by type, Enter shows the Queue of the selected type, `y` copies it.

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use super::list::{Movement, Selection};
use super::screen::Action;
use super::search::Search;
use crate::input::InputKind;

/// The keys the footer suggests on a job type list.
pub(crate) const HINTS: &str =
    " 1-4 screens  Enter jobs of type  / filter  : jump to id  p pause  o org  ? help  q quit";

/// The search and the selected row of a job type list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobTypes {
    pub(crate) search: Search,
    pub(crate) selection: Selection,
}

impl JobTypes {
    /// Handles a key on a list showing the job types `shown`.
    pub(crate) fn handle_key(
        &mut self,
        key: KeyEvent,
        page_rows: usize,
        shown: &[String],
    ) -> Option<Action> {
        if let Some(movement) = Movement::of(key, page_rows) {
            self.selection.apply(movement, shown.len());
            return Some(Action::Done);
        }
        let selected = shown.get(self.selection.index(shown.len()));
        match key.code {
            KeyCode::Enter | KeyCode::Char('l') => Some(Action::JobsOfType(selected?.clone())),
            KeyCode::Char('y') => Some(Action::Copy(selected?.clone())),
            KeyCode::Char('/') => Some(Action::Prompt(self.search.prompt())),
            KeyCode::Char('c') => {
                self.search = Search::default();
                Some(Action::Done)
            }
            _ => None,
        }
    }

    /// Applies the search typed at `/`.
    pub(crate) fn submit(&mut self, kind: InputKind, value: Option<String>) -> Action {
        if kind == InputKind::Search {
            self.search = Search(value);
        }
        Action::Done
    }
}
