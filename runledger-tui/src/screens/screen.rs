//! What a screen is to the app: the [`Screen`] trait, the [`Action`]s a screen asks for, and
//! the [`Loaded`] data a screen keeps with the query it answers.

use std::any::Any;
use std::fmt::Debug;
use std::time::Duration;

use ratatui::Frame;
use ratatui::crossterm::event::KeyEvent;
use ratatui::layout::Rect;
use ratatui::widgets::Block;
use uuid::Uuid;

use crate::input::{Input, InputKind};
use crate::model::{Data, Query, Snapshot, ViewQuery};
use crate::ui::Context;

/// One screen: what it shows and how it answers keys. `Any` lets the app find a tab by its
/// type (`t` opens the Queue's type filter from any screen).
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
