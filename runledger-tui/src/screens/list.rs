//! Moving through lists: the movement keys, the selected row, keyset pages, and the values a
//! status filter cycles through.

use ratatui::crossterm::event::{KeyCode, KeyEvent};

/// A movement key: by some rows, or to either end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Movement {
    By(isize),
    First,
    Last,
}

impl Movement {
    /// `j`/`k` and the arrows move a row, the page keys `page_rows` rows, `g`/`G` and
    /// Home/End to either end.
    pub(crate) fn of(key: KeyEvent, page_rows: usize) -> Option<Self> {
        let page = isize::try_from(page_rows.max(1)).unwrap_or(isize::MAX);
        Some(match key.code {
            KeyCode::Char('j') | KeyCode::Down => Movement::By(1),
            KeyCode::Char('k') | KeyCode::Up => Movement::By(-1),
            KeyCode::PageDown => Movement::By(page),
            KeyCode::PageUp => Movement::By(-page),
            KeyCode::Char('g') | KeyCode::Home => Movement::First,
            KeyCode::Char('G') | KeyCode::End => Movement::Last,
            _ => return None,
        })
    }
}

/// Where a movement left the selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    Within,
    /// A key down on the last row.
    PastLast,
    /// A key up on the first row.
    BeforeFirst,
}

/// The selected row of a list whose length changes with every snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Selection {
    /// The row as last set; `usize::MAX` stands for the last row.
    pub(crate) row: usize,
}

impl Selection {
    /// The selected row of a list of `len` rows.
    pub(crate) fn index(self, len: usize) -> usize {
        self.row.min(len.saturating_sub(1))
    }

    /// Applies a movement to a list of `len` rows.
    pub(crate) fn apply(&mut self, movement: Movement, len: usize) -> Moved {
        let delta = match movement {
            Movement::First => {
                self.row = 0;
                return Moved::Within;
            }
            Movement::Last => {
                self.row = usize::MAX;
                return Moved::Within;
            }
            Movement::By(delta) => delta,
        };
        let current = self.index(len);
        let target = current.checked_add_signed(delta);
        match target {
            Some(target) if target >= len && len > 0 => {
                self.row = len - 1;
                if current == len - 1 {
                    Moved::PastLast
                } else {
                    Moved::Within
                }
            }
            Some(target) => {
                self.row = target;
                Moved::Within
            }
            None => {
                self.row = 0;
                if current == 0 {
                    Moved::BeforeFirst
                } else {
                    Moved::Within
                }
            }
        }
    }
}

/// A list fetched in keyset pages: the selected row and the cursors of the pages before the
/// current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paged<C> {
    pub(crate) selection: Selection,
    pub(crate) cursors: Vec<C>,
}

impl<C> Default for Paged<C> {
    fn default() -> Self {
        Self {
            selection: Selection::default(),
            cursors: Vec::new(),
        }
    }
}

impl<C: Copy> Paged<C> {
    /// The cursor the current page starts after.
    pub(crate) fn after(&self) -> Option<C> {
        self.cursors.last().copied()
    }

    /// The current page's number, from 1.
    pub(crate) fn number(&self) -> usize {
        self.cursors.len() + 1
    }

    /// Back to the first row of the first page.
    pub(crate) fn reset(&mut self) {
        self.cursors.clear();
        self.selection = Selection::default();
    }

    /// Applies a movement to a page of `len` rows. Past its last row it turns to the page
    /// after `next` (when there is one), before its first row to the previous page.
    pub(crate) fn apply(&mut self, movement: Movement, len: usize, next: Option<C>) {
        match self.selection.apply(movement, len) {
            Moved::Within => {}
            Moved::PastLast => {
                if let Some(cursor) = next {
                    self.cursors.push(cursor);
                    self.selection = Selection::default();
                }
            }
            Moved::BeforeFirst => {
                if self.cursors.pop().is_some() {
                    self.selection.row = usize::MAX;
                }
            }
        }
    }
}

/// The next value of a cycling filter: none → first → … → last → none.
pub(crate) fn cycle<T: Copy + PartialEq>(all: &[T], current: Option<T>) -> Option<T> {
    match current {
        None => all.first().copied(),
        Some(value) => {
            let i = all.iter().position(|v| *v == value)?;
            all.get(i + 1).copied()
        }
    }
}
