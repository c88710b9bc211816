//! A search typed at `/` and applied here rather than in the database: rows whose text
//! contains it, ignoring case.

use crate::input::{Input, InputKind};

/// What `/` filters this screen's rows by; `None` shows every row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Search(pub(crate) Option<String>);

impl Search {
    /// Whether `text` contains the search, ignoring case (always, without a search).
    pub(crate) fn matches(&self, text: &str) -> bool {
        self.0
            .as_deref()
            .is_none_or(|search| text.to_lowercase().contains(&search.to_lowercase()))
    }

    /// The prompt that edits the search.
    pub(crate) fn prompt(&self) -> Input {
        Input::new(InputKind::Search, self.0.as_deref())
    }
}
