//! The application: the tabs and the detail screens stacked on the current one, the prompt,
//! the help overlay, the organization scope and the connection. It handles the keys that mean
//! the same on every screen, hands the others to the screen on top, absorbs the poller's
//! events and derives the [`Query`] the poller should run. What a screen shows and does lives
//! in `screens/`.

pub(crate) mod frame;

use std::any::Any;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use runledger_engine::core::jobs::{JobId, WorkflowRunId};
use uuid::Uuid;

use crate::input::{Edited, Input, InputKind};
use crate::model::{Command, Data, Found, PollerEvent, Query, Snapshot, ViewQuery};
use crate::screens::{self, Action, JobDetail, Queue, Screen, WorkflowDetail, Workflows};
use crate::ui::Options;

/// What the main loop must do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    Quit,
    /// Put this text on the clipboard (OSC 52).
    Copy(String),
    Poller(Command),
}

/// The connection as the UI sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Connection {
    pub(crate) last_ok: Option<Instant>,
    /// The last error and how many fetches in a row failed.
    pub(crate) error: Option<(String, u32)>,
}

/// Startup settings of the app.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AppConfig {
    pub(crate) organization: Option<Uuid>,
    pub(crate) limit: i64,
    pub(crate) refresh: Duration,
}

/// What is on screen and what holds across screens.
#[derive(Debug)]
pub(crate) struct App {
    /// The top-level screens, in key order.
    pub(crate) tabs: Vec<Box<dyn Screen>>,
    /// The tab shown (under the stack, when it is not empty).
    pub(crate) tab: usize,
    /// Detail screens opened over the tab, the one on top last.
    pub(crate) stack: Vec<Box<dyn Screen>>,
    /// An id typed at `:` that the poller is looking up as a job or a workflow run.
    pub(crate) lookup: Option<Uuid>,
    pub(crate) input: Option<Input>,
    pub(crate) help: bool,
    /// A one-line message in the footer (copied, not found, …).
    pub(crate) flash: Option<String>,
    pub(crate) options: Options,
    pub(crate) paused: bool,
    pub(crate) organization: Option<Uuid>,
    /// The last organization given, which `O` brings back.
    remembered_organization: Option<Uuid>,
    pub(crate) limit: i64,
    pub(crate) refresh: Duration,
    pub(crate) connection: Connection,
    /// Rows a page key moves (the visible table height).
    pub(crate) page_rows: usize,
}

impl App {
    pub(crate) fn new(config: AppConfig) -> Self {
        Self {
            tabs: screens::tabs(),
            tab: 0,
            stack: Vec::new(),
            lookup: None,
            input: None,
            help: false,
            flash: None,
            options: Options::default(),
            paused: false,
            organization: config.organization,
            remembered_organization: config.organization,
            limit: config.limit,
            refresh: config.refresh,
            connection: Connection::default(),
            page_rows: 10,
        }
    }

    /// The screen on top.
    pub(crate) fn top(&self) -> &dyn Screen {
        match self.stack.last() {
            Some(screen) => &**screen,
            None => &*self.tabs[self.tab],
        }
    }

    fn top_mut(&mut self) -> &mut dyn Screen {
        match self.stack.last_mut() {
            Some(screen) => &mut **screen,
            None => &mut *self.tabs[self.tab],
        }
    }

    /// What the poller should fetch for the screen on top.
    pub(crate) fn query(&self) -> Query {
        let view = match self.lookup {
            Some(id) => ViewQuery::Lookup(id),
            None => self.top().query(),
        };
        Query {
            organization: self.organization,
            limit: self.limit,
            view,
        }
    }

    /// Whether the screen on top shows data fetched for exactly the current query.
    pub(crate) fn is_current(&self) -> bool {
        self.lookup.is_none()
            && self
                .top()
                .loaded()
                .is_some_and(|(query, _)| *query == self.query())
    }

    /// The elapsed time of the fetch behind the screen on top, when it is current.
    pub(crate) fn current_elapsed(&self) -> Option<Duration> {
        if !self.is_current() {
            return None;
        }
        self.top().loaded().map(|(_, elapsed)| elapsed)
    }

    /// Absorbs one poller event. Returns `true` when the app should quit.
    pub(crate) fn apply(&mut self, event: PollerEvent) -> bool {
        match event {
            PollerEvent::Quit => return true,
            PollerEvent::Failed { error, attempt } => {
                self.connection.error = Some((error, attempt));
            }
            PollerEvent::Snapshot(snapshot) => self.apply_snapshot(*snapshot),
        }
        false
    }

    /// Gives the snapshot to the screen on top, or else to the tab it belongs to.
    fn apply_snapshot(&mut self, mut snapshot: Snapshot) {
        self.connection.last_ok = Some(snapshot.fetched_at);
        self.connection.error = None;
        if let Data::Lookup(found) = snapshot.data {
            if self
                .lookup
                .is_some_and(|id| snapshot.query.view == ViewQuery::Lookup(id))
            {
                self.lookup = None;
                self.open_found(found);
            }
            return;
        }
        for screen in self.stack.last_mut().into_iter().chain(&mut self.tabs) {
            match screen.absorb(snapshot) {
                None => return,
                Some(unwanted) => snapshot = unwanted,
            }
        }
    }

    fn open_found(&mut self, found: Found) {
        match found {
            Found::Job(job) => self.open(Box::new(JobDetail::new(job))),
            Found::Workflow(run) => self.open(Box::new(WorkflowDetail::new(run))),
            Found::Nothing(id) => self.flash = Some(format!("no job or workflow run has id {id}")),
        }
    }

    /// Puts `screen` on top, unless the same screen is there already.
    fn open(&mut self, screen: Box<dyn Screen>) {
        if self.top().query() != screen.query() {
            self.stack.push(screen);
        }
    }

    fn switch_tab(&mut self, index: usize) {
        self.tab = index;
        self.stack.clear();
        self.lookup = None;
    }

    /// Switches to the tab of type `S` and returns it.
    fn show<S: Screen>(&mut self) -> Option<&mut S> {
        let index = self
            .tabs
            .iter()
            .position(|tab| (&**tab as &dyn Any).is::<S>())?;
        self.switch_tab(index);
        (&mut *self.tabs[index] as &mut dyn Any).downcast_mut()
    }

    /// Esc / `h`: cancels a lookup, or closes the screen on top.
    fn back(&mut self) {
        if self.lookup.take().is_none() {
            self.stack.pop();
        }
    }

    /// Handles one key press and returns what the main loop must do.
    pub(crate) fn handle_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return vec![Effect::Quit];
        }
        if let Some(input) = &mut self.input {
            let kind = input.kind;
            return match input.edit(key) {
                Edited::Typing => Vec::new(),
                Edited::Canceled => {
                    self.input = None;
                    Vec::new()
                }
                Edited::Submitted(value) => {
                    self.input = None;
                    self.submit(kind, value)
                }
            };
        }
        if self.help {
            self.help = false;
            return if key.code == KeyCode::Char('q') {
                vec![Effect::Quit]
            } else {
                Vec::new()
            };
        }
        self.flash = None;
        let tabs = self.tabs.len();
        match key.code {
            KeyCode::Char('q') => return vec![Effect::Quit],
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char(c) if c.is_ascii_digit() => {
                if let Some(index) = self.tab_named(&c.to_string()) {
                    self.switch_tab(index);
                }
            }
            KeyCode::Tab => self.switch_tab((self.tab + 1) % tabs),
            KeyCode::BackTab => self.switch_tab((self.tab + tabs - 1) % tabs),
            KeyCode::Esc | KeyCode::Char('h') => self.back(),
            KeyCode::Char('v') if self.stack.is_empty() => self.options.wide ^= true,
            KeyCode::Char('v') => self.options.wrap ^= true,
            KeyCode::Char('R') => self.options.raw_json ^= true,
            KeyCode::Char('r' | '.') => return vec![Effect::Poller(Command::Refresh)],
            KeyCode::Char('p') => {
                self.paused = !self.paused;
                return vec![Effect::Poller(Command::SetPaused(self.paused))];
            }
            KeyCode::Char(':') => self.input = Some(Input::new(InputKind::Command, None)),
            KeyCode::Char('o') => self.input = Some(self.organization_prompt()),
            KeyCode::Char('O') => self.toggle_organization(),
            _ => {
                let page_rows = self.page_rows;
                return match self.top_mut().handle_key(key, page_rows) {
                    Some(action) => self.perform(action),
                    None => {
                        self.unclaimed_key(key);
                        Vec::new()
                    }
                };
            }
        }
        Vec::new()
    }

    /// The keys a screen leaves: `t` edits the Queue's job type filter and `w` the Workflows'
    /// type filter from anywhere; `f` says where it works.
    fn unclaimed_key(&mut self, key: KeyEvent) {
        match key.code {
            KeyCode::Char('t') => self.input = self.show::<Queue>().map(|q| q.type_prompt()),
            KeyCode::Char('w') => self.input = self.show::<Workflows>().map(|w| w.type_prompt()),
            KeyCode::Char('f') => {
                self.flash = Some("f filters the Queue and Workflows screens".to_owned());
            }
            _ => {}
        }
    }

    /// Does what a screen asked.
    fn perform(&mut self, action: Action) -> Vec<Effect> {
        match action {
            Action::Done => {}
            Action::Open(screen) => self.open(screen),
            Action::JobsOfType(job_type) => {
                if let Some(queue) = self.show::<Queue>() {
                    queue.show_type(job_type);
                }
            }
            Action::Lookup(id) => self.lookup = Some(id),
            Action::Prompt(input) => self.input = Some(input),
            Action::Copy(text) => {
                self.flash = Some(format!("copied {text}"));
                return vec![Effect::Copy(text)];
            }
            Action::Flash(message) => self.flash = Some(message),
        }
        Vec::new()
    }

    /// Applies a submitted prompt: the app's own (`:` and the organization), or the screen's.
    fn submit(&mut self, kind: InputKind, value: Option<String>) -> Vec<Effect> {
        match kind {
            InputKind::Command => self.run_command(value.as_deref().unwrap_or_default()),
            InputKind::Organization => {
                match value.as_deref().map(Uuid::parse_str) {
                    None => self.organization = None,
                    Some(Ok(org)) => self.set_organization(org),
                    Some(Err(_)) => {
                        self.flash = Some(format!("not a UUID: {}", value.unwrap_or_default()));
                    }
                }
                self.scope_changed();
                Vec::new()
            }
            _ => {
                let action = self.top_mut().submit(kind, value);
                self.perform(action)
            }
        }
    }

    fn organization_prompt(&self) -> Input {
        let current = self.organization.map(|org| org.to_string());
        Input::new(InputKind::Organization, current.as_deref())
    }

    fn set_organization(&mut self, org: Uuid) {
        self.organization = Some(org);
        self.remembered_organization = Some(org);
    }

    /// `O`: all organizations, or back to the last one given (asked for when there is none).
    fn toggle_organization(&mut self) {
        if self.organization.is_some() {
            self.organization = None;
        } else if self.remembered_organization.is_some() {
            self.organization = self.remembered_organization;
        } else {
            self.input = Some(self.organization_prompt());
        }
        self.scope_changed();
    }

    /// Lists of another scope start again from their first page.
    fn scope_changed(&mut self) {
        for tab in &mut self.tabs {
            tab.scope_changed();
        }
    }

    /// The tab a `:` command names, by number or by name.
    fn tab_named(&self, word: &str) -> Option<usize> {
        self.tabs.iter().zip(1..).position(|(tab, number)| {
            number.to_string() == word || tab.title().to_lowercase() == word
        })
    }

    /// The `:` command palette.
    fn run_command(&mut self, line: &str) -> Vec<Effect> {
        let mut words = line.split_whitespace();
        let (Some(word), arg) = (words.next(), words.next()) else {
            return Vec::new();
        };
        let parse = |text: Option<&str>| text.and_then(|t| Uuid::parse_str(t).ok());
        if let Some(index) = self.tab_named(word) {
            self.switch_tab(index);
            return Vec::new();
        }
        match (word, arg) {
            ("q" | "quit", _) => return vec![Effect::Quit],
            ("r" | "refresh", _) => return vec![Effect::Poller(Command::Refresh)],
            ("job", arg) => match parse(arg) {
                Some(id) => self.open(Box::new(JobDetail::new(JobId(id)))),
                None => self.flash = Some("usage: :job <uuid>".to_owned()),
            },
            ("run", arg) => match parse(arg) {
                Some(id) => self.open(Box::new(WorkflowDetail::new(WorkflowRunId(id)))),
                None => self.flash = Some("usage: :run <uuid>".to_owned()),
            },
            ("org", Some("all")) => self.organization = None,
            ("org", arg) => match parse(arg) {
                Some(org) => self.set_organization(org),
                None => self.flash = Some("usage: :org <uuid> | :org all".to_owned()),
            },
            (other, None) => match Uuid::parse_str(other) {
                Ok(id) => self.lookup = Some(id),
                Err(_) => self.flash = Some(format!("unknown command: {other}")),
            },
            (other, Some(_)) => self.flash = Some(format!("unknown command: {other}")),
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
