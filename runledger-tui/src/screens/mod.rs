//! The screens. Each file holds one screen: the data it shows, its selection, filters and
//! pages, the query it wants fetched, its keys and its drawing. The app stacks them, routes
//! keys and snapshots to them, and draws the frame around the one on top.
//!
//! A new tab is a new file here (and its `mod` line) with a type that implements [`Screen`],
//! plus its line in [`tabs`]. A screen that reads something no other screen reads also needs
//! its [`ViewQuery`] and [`Data`] variants (`model.rs`) and the read behind them
//! (`poller.rs`).

mod dashboard;
mod definitions;
mod job;
mod job_types;
mod list;
mod queue;
mod search;
mod workflow;
mod workflows;

use std::any::Any;
use std::fmt::Debug;
use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::KeyEvent;
use ratatui::layout::Rect;
use ratatui::widgets::Block;
use uuid::Uuid;

use dashboard::Dashboard;
use definitions::Definitions;
pub(crate) use job::JobDetail;
#[cfg(test)]
pub(crate) use job::{Pane, progress_ratio, progress_text};
pub(crate) use queue::Queue;
pub(crate) use workflow::WorkflowDetail;
pub(crate) use workflows::Workflows;

use crate::input::{Input, InputKind};
use crate::model::{Data, Query, Snapshot, ViewQuery};
use crate::ui::Context;

/// The top-level screens, in key order (`1`, `2`, …). A new tab is one line here.
pub(crate) fn tabs() -> Vec<Box<dyn Screen>> {
    vec![
        Box::new(Dashboard::default()),
        Box::new(Queue::default()),
        Box::new(Workflows::default()),
        Box::new(Definitions::default()),
    ]
}

/// One screen: what it shows and how it answers keys.
pub(crate) trait Screen: Any + Debug {
    /// Its name: the frame's title, and for a tab its name in the title bar and for `:`.
    fn title(&self) -> String;

    /// The keys the footer suggests.
    fn hints(&self) -> &'static str;

    /// What the poller should fetch while this screen is on top.
    fn query(&self) -> ViewQuery;

    /// Keeps the snapshot when it holds this screen's data; hands it back otherwise.
    fn absorb(&mut self, snapshot: Snapshot) -> Option<Snapshot>;

    /// The query the data on screen answers, and how long fetching it took.
    fn loaded(&self) -> Option<(&Query, Duration)>;

    /// Handles a key; `None` when the key means nothing on this screen, which leaves it to
    /// the app. `page_rows` is how far a page key moves.
    fn handle_key(&mut self, key: KeyEvent, page_rows: usize) -> Option<Action>;

    /// Applies what was typed at a prompt this screen opened (`None`: left blank). A screen
    /// that opens no prompt keeps this default.
    fn submit(&mut self, kind: InputKind, value: Option<String>) -> Action {
        let _ = (kind, value);
        Action::Done
    }

    /// The organization scope changed: start again from the first page.
    fn scope_changed(&mut self) {}

    /// Draws the screen inside `block`, which carries its title.
    fn draw(&self, frame: &mut Frame<'_>, area: Rect, block: Block<'_>, context: &Context<'_>);
}

/// What a screen asks of the app after a key or a prompt.
#[derive(Debug)]
pub(crate) enum Action {
    /// Nothing more: the screen has done what the key asked.
    Done,
    /// Open this screen on top of the current one.
    Open(Box<dyn Screen>),
    /// Show the Queue with only the jobs of this type.
    JobsOfType(String),
    /// Find out whether this id is a job or a workflow run, and open it.
    Lookup(Uuid),
    /// Open this prompt in the footer.
    Prompt(Input),
    /// Put this text on the clipboard.
    Copy(String),
    /// Show this message in the footer.
    Flash(String),
}

/// The data of one screen and the query it answers.
#[derive(Debug)]
pub(crate) struct Loaded<T> {
    pub(crate) data: T,
    pub(crate) query: Query,
    pub(crate) elapsed: Duration,
}

impl<T> Loaded<T> {
    /// Keeps in `slot` the snapshot's data when `pick` recognizes it as the screen's; hands
    /// the snapshot back otherwise.
    pub(crate) fn keep(
        slot: &mut Option<Self>,
        snapshot: Snapshot,
        pick: impl FnOnce(Data) -> Result<T, Data>,
    ) -> Option<Snapshot> {
        let Snapshot {
            query,
            data,
            fetched_at,
            elapsed,
        } = snapshot;
        match pick(data) {
            Ok(data) => {
                *slot = Some(Self {
                    data,
                    query,
                    elapsed,
                });
                None
            }
            Err(data) => Some(Snapshot {
                query,
                data,
                fetched_at,
                elapsed,
            }),
        }
    }

    /// What [`Screen::loaded`] reports.
    pub(crate) fn answered(slot: Option<&Self>) -> Option<(&Query, Duration)> {
        slot.map(|loaded| (&loaded.query, loaded.elapsed))
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
