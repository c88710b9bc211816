//! Application state and key handling. The [`App`] turns keys into state changes and
//! [`Effect`]s, derives the [`Query`] the poller should run, and absorbs the poller's events.

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use runledger_engine::core::jobs::{JobId, JobStatus, WorkflowRunId, WorkflowRunStatus};
use uuid::Uuid;

use crate::model::{
    Command, DashboardData, Data, DefinitionRow, Found, JobDetailData, PollerEvent, Query,
    QueueData, QueueFilter, Snapshot, ViewQuery, WorkflowDetailData, WorkflowFilter, WorkflowsData,
};

/// The four top-level screens, in key order (1–4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tab {
    Dashboard,
    Queue,
    Workflows,
    Definitions,
}

impl Tab {
    pub(crate) const ALL: [Tab; 4] = [Tab::Dashboard, Tab::Queue, Tab::Workflows, Tab::Definitions];

    pub(crate) fn title(self) -> &'static str {
        match self {
            Tab::Dashboard => "Dashboard",
            Tab::Queue => "Queue",
            Tab::Workflows => "Workflows",
            Tab::Definitions => "Definitions",
        }
    }

    fn index(self) -> usize {
        Tab::ALL.iter().position(|tab| *tab == self).unwrap_or(0)
    }

    fn shifted(self, forward: bool) -> Tab {
        let len = Tab::ALL.len();
        let next = if forward {
            (self.index() + 1) % len
        } else {
            (self.index() + len - 1) % len
        };
        Tab::ALL[next]
    }
}

/// A detail screen opened on top of a tab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    Job(JobId),
    Workflow(WorkflowRunId),
}

/// What is on screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Screen {
    Tab(Tab),
    Job(JobId),
    Workflow(WorkflowRunId),
}

/// The panes of the job detail screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pane {
    Summary,
    History,
    Logs,
    Payload,
}

impl Pane {
    pub(crate) const ALL: [Pane; 4] = [Pane::Summary, Pane::History, Pane::Logs, Pane::Payload];

    pub(crate) fn title(self) -> &'static str {
        match self {
            Pane::Summary => "Summary",
            Pane::History => "Attempts+Events",
            Pane::Logs => "Logs",
            Pane::Payload => "Payload",
        }
    }

    fn shifted(self, forward: bool) -> Pane {
        let i = Pane::ALL.iter().position(|p| *p == self).unwrap_or(0);
        let len = Pane::ALL.len();
        Pane::ALL[if forward {
            (i + 1) % len
        } else {
            (i + len - 1) % len
        }]
    }
}

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

/// What the main loop must do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    Quit,
    /// Put this text on the clipboard (OSC 52).
    Copy(String),
    Poller(Command),
}

/// Data of one screen and the query it answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Loaded<T> {
    pub(crate) data: T,
    pub(crate) query: Query,
    pub(crate) elapsed: Duration,
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

/// Everything the UI shows and remembers.
#[derive(Debug, Clone)]
pub(crate) struct App {
    pub(crate) tab: Tab,
    pub(crate) stack: Vec<Detail>,
    pub(crate) queue_filter: QueueFilter,
    /// Keyset cursors of the queue pages before the current one.
    pub(crate) queue_pages: Vec<JobId>,
    pub(crate) workflow_filter: WorkflowFilter,
    pub(crate) workflow_pages: Vec<WorkflowRunId>,
    /// Client-side filter of the dashboard, definitions and detail lines.
    pub(crate) local_search: Option<String>,
    pub(crate) selected_dashboard: usize,
    pub(crate) selected_queue: usize,
    pub(crate) selected_workflow: usize,
    pub(crate) selected_definition: usize,
    pub(crate) selected_step: usize,
    pub(crate) pane: Pane,
    pub(crate) detail_scroll: u16,
    /// `v` on lists: wide tables.
    pub(crate) wide: bool,
    /// `R`: raw (compact) rather than pretty JSON payloads.
    pub(crate) raw_json: bool,
    /// `v` on detail screens: long payload lines wrap rather than being cut at the edge.
    pub(crate) wrap: bool,
    pub(crate) input: Option<Input>,
    pub(crate) help: bool,
    pub(crate) paused: bool,
    pub(crate) organization: Option<Uuid>,
    remembered_organization: Option<Uuid>,
    pub(crate) limit: i64,
    pub(crate) refresh: Duration,
    pub(crate) lookup: Option<Uuid>,
    pub(crate) dashboard: Option<Loaded<DashboardData>>,
    pub(crate) queue: Option<Loaded<QueueData>>,
    pub(crate) workflows: Option<Loaded<WorkflowsData>>,
    pub(crate) definitions: Option<Loaded<Vec<DefinitionRow>>>,
    pub(crate) job: Option<Loaded<Option<Box<JobDetailData>>>>,
    pub(crate) workflow: Option<Loaded<Option<Box<WorkflowDetailData>>>>,
    pub(crate) connection: Connection,
    /// A one-line message in the footer (copied, not found, …).
    pub(crate) flash: Option<String>,
    /// Rows a page key moves (the visible table height).
    pub(crate) page_rows: usize,
}

const JOB_STATUSES: [JobStatus; 5] = [
    JobStatus::Pending,
    JobStatus::Leased,
    JobStatus::Succeeded,
    JobStatus::DeadLettered,
    JobStatus::Canceled,
];

const RUN_STATUSES: [WorkflowRunStatus; 5] = [
    WorkflowRunStatus::Running,
    WorkflowRunStatus::WaitingForExternal,
    WorkflowRunStatus::Succeeded,
    WorkflowRunStatus::CompletedWithErrors,
    WorkflowRunStatus::Canceled,
];

/// The next value of a cycling filter: none → first → … → last → none.
fn cycle<T: Copy + PartialEq>(all: &[T], current: Option<T>) -> Option<T> {
    match current {
        None => all.first().copied(),
        Some(value) => {
            let i = all.iter().position(|v| *v == value)?;
            all.get(i + 1).copied()
        }
    }
}

fn non_blank(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

impl App {
    pub(crate) fn new(config: AppConfig) -> Self {
        Self {
            tab: Tab::Dashboard,
            stack: Vec::new(),
            queue_filter: QueueFilter::default(),
            queue_pages: Vec::new(),
            workflow_filter: WorkflowFilter::default(),
            workflow_pages: Vec::new(),
            local_search: None,
            selected_dashboard: 0,
            selected_queue: 0,
            selected_workflow: 0,
            selected_definition: 0,
            selected_step: 0,
            pane: Pane::Summary,
            detail_scroll: 0,
            wide: false,
            raw_json: false,
            wrap: true,
            input: None,
            help: false,
            paused: false,
            organization: config.organization,
            remembered_organization: config.organization,
            limit: config.limit,
            refresh: config.refresh,
            lookup: None,
            dashboard: None,
            queue: None,
            workflows: None,
            definitions: None,
            job: None,
            workflow: None,
            connection: Connection::default(),
            flash: None,
            page_rows: 10,
        }
    }

    pub(crate) fn screen(&self) -> Screen {
        match self.stack.last() {
            Some(Detail::Job(id)) => Screen::Job(*id),
            Some(Detail::Workflow(id)) => Screen::Workflow(*id),
            None => Screen::Tab(self.tab),
        }
    }

    /// What the poller should fetch for the current screen.
    pub(crate) fn query(&self) -> Query {
        let view = if let Some(id) = self.lookup {
            ViewQuery::Lookup(id)
        } else {
            match self.screen() {
                Screen::Job(id) => ViewQuery::Job(id),
                Screen::Workflow(id) => ViewQuery::Workflow(id),
                Screen::Tab(Tab::Dashboard) => ViewQuery::Dashboard,
                Screen::Tab(Tab::Queue) => ViewQuery::Queue {
                    filter: self.queue_filter.clone(),
                    after: self.queue_pages.last().copied(),
                },
                Screen::Tab(Tab::Workflows) => ViewQuery::Workflows {
                    filter: self.workflow_filter.clone(),
                    after: self.workflow_pages.last().copied(),
                },
                Screen::Tab(Tab::Definitions) => ViewQuery::Definitions,
            }
        };
        Query {
            organization: self.organization,
            limit: self.limit,
            view,
        }
    }

    /// Whether the current screen shows data fetched for exactly the current query.
    pub(crate) fn is_current(&self) -> bool {
        let query = self.query();
        let answered = |q: Option<&Query>| q == Some(&query);
        match self.screen() {
            _ if self.lookup.is_some() => false,
            Screen::Tab(Tab::Dashboard) => answered(self.dashboard.as_ref().map(|l| &l.query)),
            Screen::Tab(Tab::Queue) => answered(self.queue.as_ref().map(|l| &l.query)),
            Screen::Tab(Tab::Workflows) => answered(self.workflows.as_ref().map(|l| &l.query)),
            Screen::Tab(Tab::Definitions) => answered(self.definitions.as_ref().map(|l| &l.query)),
            Screen::Job(_) => answered(self.job.as_ref().map(|l| &l.query)),
            Screen::Workflow(_) => answered(self.workflow.as_ref().map(|l| &l.query)),
        }
    }

    /// The elapsed time of the fetch behind the current screen, when it is current.
    pub(crate) fn current_elapsed(&self) -> Option<Duration> {
        if !self.is_current() {
            return None;
        }
        match self.screen() {
            Screen::Tab(Tab::Dashboard) => self.dashboard.as_ref().map(|l| l.elapsed),
            Screen::Tab(Tab::Queue) => self.queue.as_ref().map(|l| l.elapsed),
            Screen::Tab(Tab::Workflows) => self.workflows.as_ref().map(|l| l.elapsed),
            Screen::Tab(Tab::Definitions) => self.definitions.as_ref().map(|l| l.elapsed),
            Screen::Job(_) => self.job.as_ref().map(|l| l.elapsed),
            Screen::Workflow(_) => self.workflow.as_ref().map(|l| l.elapsed),
        }
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

    fn apply_snapshot(&mut self, snapshot: Snapshot) {
        self.connection.last_ok = Some(snapshot.fetched_at);
        self.connection.error = None;
        let Snapshot {
            query,
            data,
            elapsed,
            ..
        } = snapshot;
        fn loaded<T>(data: T, query: Query, elapsed: Duration) -> Option<Loaded<T>> {
            Some(Loaded {
                data,
                query,
                elapsed,
            })
        }
        match data {
            Data::Dashboard(d) => self.dashboard = loaded(d, query, elapsed),
            Data::Queue(d) => self.queue = loaded(d, query, elapsed),
            Data::Workflows(d) => self.workflows = loaded(d, query, elapsed),
            Data::Definitions(d) => self.definitions = loaded(d, query, elapsed),
            Data::Job(d) => self.job = loaded(d, query, elapsed),
            Data::Workflow(d) => self.workflow = loaded(d, query, elapsed),
            Data::Lookup(found) => {
                let ViewQuery::Lookup(id) = query.view else {
                    return;
                };
                if self.lookup != Some(id) {
                    return;
                }
                self.lookup = None;
                match found {
                    Found::Job(job) => self.open(Detail::Job(job)),
                    Found::Workflow(run) => self.open(Detail::Workflow(run)),
                    Found::Nothing(id) => {
                        self.flash = Some(format!("no job or workflow run has id {id}"));
                    }
                }
            }
        }
    }

    fn open(&mut self, detail: Detail) {
        if self.stack.last() != Some(&detail) {
            self.stack.push(detail);
        }
        self.detail_scroll = 0;
        self.selected_step = 0;
        if matches!(detail, Detail::Job(_)) {
            self.pane = Pane::Summary;
        }
    }

    fn switch_tab(&mut self, tab: Tab) {
        self.tab = tab;
        self.stack.clear();
        self.lookup = None;
    }

    /// Rows of the list on screen, for moving the selection.
    fn list_len(&self) -> usize {
        match self.screen() {
            Screen::Tab(Tab::Dashboard) => self.visible_metrics().len(),
            Screen::Tab(Tab::Queue) => self.queue.as_ref().map_or(0, |l| l.data.jobs.len()),
            Screen::Tab(Tab::Workflows) => self.workflows.as_ref().map_or(0, |l| l.data.runs.len()),
            Screen::Tab(Tab::Definitions) => self.visible_definitions().len(),
            Screen::Workflow(_) => self
                .workflow
                .as_ref()
                .and_then(|l| l.data.as_ref())
                .map_or(0, |d| d.steps.len()),
            Screen::Job(_) => 0,
        }
    }

    fn selection_mut(&mut self) -> Option<&mut usize> {
        match self.screen() {
            Screen::Tab(Tab::Dashboard) => Some(&mut self.selected_dashboard),
            Screen::Tab(Tab::Queue) => Some(&mut self.selected_queue),
            Screen::Tab(Tab::Workflows) => Some(&mut self.selected_workflow),
            Screen::Tab(Tab::Definitions) => Some(&mut self.selected_definition),
            Screen::Workflow(_) => Some(&mut self.selected_step),
            Screen::Job(_) => None,
        }
    }

    /// The selected row of a list of `len` rows.
    pub(crate) fn clamp(selected: usize, len: usize) -> usize {
        selected.min(len.saturating_sub(1))
    }

    pub(crate) fn visible_metrics(&self) -> Vec<&crate::model::MetricRow> {
        let search = self.local_search.as_deref().map(str::to_lowercase);
        self.dashboard
            .as_ref()
            .map(|l| {
                l.data
                    .metrics
                    .iter()
                    .filter(|m| {
                        search
                            .as_deref()
                            .is_none_or(|s| m.job_type.to_lowercase().contains(s))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(crate) fn visible_definitions(&self) -> Vec<&DefinitionRow> {
        let search = self.local_search.as_deref().map(str::to_lowercase);
        self.definitions
            .as_ref()
            .map(|l| {
                l.data
                    .iter()
                    .filter(|d| {
                        search
                            .as_deref()
                            .is_none_or(|s| d.job_type.to_lowercase().contains(s))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Moves the selection by `delta` rows, turning the keyset page at either end of the
    /// queue and workflow lists.
    fn move_by(&mut self, delta: isize) {
        if let Screen::Job(_) = self.screen() {
            let scroll = i64::from(self.detail_scroll) + delta as i64;
            self.detail_scroll = u16::try_from(scroll.max(0)).unwrap_or(u16::MAX);
            return;
        }
        let len = self.list_len();
        let screen = self.screen();
        let Some(selected) = self.selection_mut() else {
            return;
        };
        let current = App::clamp(*selected, len);
        let target = current as isize + delta;
        if target >= len as isize && len > 0 {
            *selected = len - 1;
            if current == len - 1 {
                self.next_page(screen);
            }
        } else if target < 0 {
            *selected = 0;
            if current == 0 {
                self.previous_page(screen);
            }
        } else {
            *selected = target as usize;
        }
    }

    fn next_page(&mut self, screen: Screen) {
        match screen {
            Screen::Tab(Tab::Queue) => {
                if let Some(cursor) = self.queue.as_ref().and_then(|l| l.data.next_cursor) {
                    self.queue_pages.push(cursor);
                    self.selected_queue = 0;
                }
            }
            Screen::Tab(Tab::Workflows) => {
                if let Some(cursor) = self.workflows.as_ref().and_then(|l| l.data.next_cursor) {
                    self.workflow_pages.push(cursor);
                    self.selected_workflow = 0;
                }
            }
            _ => {}
        }
    }

    fn previous_page(&mut self, screen: Screen) {
        match screen {
            Screen::Tab(Tab::Queue) if self.queue_pages.pop().is_some() => {
                self.selected_queue = usize::MAX;
            }
            Screen::Tab(Tab::Workflows) if self.workflow_pages.pop().is_some() => {
                self.selected_workflow = usize::MAX;
            }
            _ => {}
        }
    }

    fn selected_job(&self) -> Option<&crate::model::JobRow> {
        let jobs = &self.queue.as_ref()?.data.jobs;
        jobs.get(App::clamp(self.selected_queue, jobs.len()))
    }

    fn selected_run(&self) -> Option<&crate::model::RunRow> {
        let runs = &self.workflows.as_ref()?.data.runs;
        runs.get(App::clamp(self.selected_workflow, runs.len()))
    }

    fn selected_step(&self) -> Option<&crate::model::StepRow> {
        let steps = &self.workflow.as_ref()?.data.as_ref()?.steps;
        steps.get(App::clamp(self.selected_step, steps.len()))
    }

    /// The id `y` copies on the current screen.
    fn selected_id(&self) -> Option<String> {
        match self.screen() {
            Screen::Job(id) => Some(id.to_string()),
            Screen::Workflow(id) => Some(
                self.selected_step()
                    .and_then(|step| step.job_id)
                    .map_or_else(|| id.to_string(), |job| job.to_string()),
            ),
            Screen::Tab(Tab::Queue) => self.selected_job().map(|job| job.id.to_string()),
            Screen::Tab(Tab::Workflows) => self.selected_run().map(|run| run.id.to_string()),
            Screen::Tab(Tab::Dashboard) => {
                let rows = self.visible_metrics();
                rows.get(App::clamp(self.selected_dashboard, rows.len()))
                    .map(|m| m.job_type.clone())
            }
            Screen::Tab(Tab::Definitions) => {
                let rows = self.visible_definitions();
                rows.get(App::clamp(self.selected_definition, rows.len()))
                    .map(|d| d.job_type.clone())
            }
        }
    }

    /// Enter / `l`.
    fn open_selected(&mut self) {
        match self.screen() {
            Screen::Tab(Tab::Queue) => {
                if let Some(id) = self.selected_job().map(|job| job.id) {
                    self.open(Detail::Job(id));
                }
            }
            Screen::Tab(Tab::Workflows) => {
                if let Some(id) = self.selected_run().map(|run| run.id) {
                    self.open(Detail::Workflow(id));
                }
            }
            Screen::Workflow(_) => match self.selected_step().map(|step| step.job_id) {
                Some(Some(id)) => self.open(Detail::Job(id)),
                Some(None) => self.flash = Some("this step has no job yet".to_owned()),
                None => {}
            },
            Screen::Tab(Tab::Dashboard | Tab::Definitions) => {
                if let Some(job_type) = self.selected_id() {
                    self.queue_filter = QueueFilter {
                        type_contains: Some(job_type),
                        ..QueueFilter::default()
                    };
                    self.queue_pages.clear();
                    self.selected_queue = 0;
                    self.switch_tab(Tab::Queue);
                }
            }
            Screen::Job(_) => {}
        }
    }

    fn back(&mut self) {
        if self.lookup.take().is_some() {
            return;
        }
        if self.stack.pop().is_some() {
            self.detail_scroll = 0;
        }
    }

    fn open_input(&mut self, kind: InputKind) {
        let text = match kind {
            InputKind::Search => match self.screen() {
                Screen::Tab(Tab::Queue) => self.queue_filter.search.clone(),
                _ => self.local_search.clone(),
            },
            InputKind::JobType => self.queue_filter.type_contains.clone(),
            InputKind::WorkflowType => self.workflow_filter.type_contains.clone(),
            InputKind::Organization => self.organization.map(|org| org.to_string()),
            InputKind::Command => None,
        };
        self.input = Some(Input {
            kind,
            text: text.unwrap_or_default(),
        });
    }

    fn submit_input(&mut self, input: &Input) -> Vec<Effect> {
        let value = non_blank(&input.text);
        match input.kind {
            InputKind::Search => match self.screen() {
                Screen::Tab(Tab::Queue) => {
                    self.queue_filter.search = value;
                    self.reset_queue_page();
                }
                Screen::Tab(Tab::Workflows) => match value.as_deref().map(Uuid::parse_str) {
                    Some(Ok(id)) => self.lookup = Some(id),
                    _ => {
                        self.workflow_filter.type_contains = value;
                        self.reset_workflow_page();
                    }
                },
                _ => self.local_search = value,
            },
            InputKind::JobType => {
                self.queue_filter.type_contains = value;
                self.reset_queue_page();
            }
            InputKind::WorkflowType => {
                self.workflow_filter.type_contains = value;
                self.reset_workflow_page();
            }
            InputKind::Organization => {
                match value.as_deref().map(Uuid::parse_str) {
                    None => self.organization = None,
                    Some(Ok(org)) => {
                        self.organization = Some(org);
                        self.remembered_organization = Some(org);
                    }
                    Some(Err(_)) => {
                        self.flash = Some(format!("not a UUID: {}", input.text.trim()));
                    }
                }
                self.reset_queue_page();
                self.reset_workflow_page();
            }
            InputKind::Command => return self.run_command(value.as_deref().unwrap_or_default()),
        }
        Vec::new()
    }

    fn reset_queue_page(&mut self) {
        self.queue_pages.clear();
        self.selected_queue = 0;
    }

    fn reset_workflow_page(&mut self) {
        self.workflow_pages.clear();
        self.selected_workflow = 0;
    }

    /// The `:` command palette.
    fn run_command(&mut self, line: &str) -> Vec<Effect> {
        let mut words = line.split_whitespace();
        let (Some(word), arg) = (words.next(), words.next()) else {
            return Vec::new();
        };
        let parse = |text: Option<&str>| text.and_then(|t| Uuid::parse_str(t).ok());
        match (word, arg) {
            ("q" | "quit", _) => return vec![Effect::Quit],
            ("1" | "dashboard", _) => self.switch_tab(Tab::Dashboard),
            ("2" | "queue", _) => self.switch_tab(Tab::Queue),
            ("3" | "workflows", _) => self.switch_tab(Tab::Workflows),
            ("4" | "definitions", _) => self.switch_tab(Tab::Definitions),
            ("r" | "refresh", _) => return vec![Effect::Poller(Command::Refresh)],
            ("job", arg) => match parse(arg) {
                Some(id) => self.open(Detail::Job(JobId(id))),
                None => self.flash = Some("usage: :job <uuid>".to_owned()),
            },
            ("run", arg) => match parse(arg) {
                Some(id) => self.open(Detail::Workflow(WorkflowRunId(id))),
                None => self.flash = Some("usage: :run <uuid>".to_owned()),
            },
            ("org", Some("all")) => self.organization = None,
            ("org", arg) => match parse(arg) {
                Some(org) => {
                    self.organization = Some(org);
                    self.remembered_organization = Some(org);
                }
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

    fn edit_input(&mut self, key: KeyEvent) -> Vec<Effect> {
        let Some(input) = self.input.as_mut() else {
            return Vec::new();
        };
        match key.code {
            KeyCode::Esc => self.input = None,
            KeyCode::Enter => {
                if let Some(input) = self.input.take() {
                    return self.submit_input(&input);
                }
            }
            KeyCode::Backspace => {
                input.text.pop();
            }
            KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                input.text.clear();
            }
            KeyCode::Char(c) => input.text.push(c),
            _ => {}
        }
        Vec::new()
    }

    /// Handles one key press and returns what the main loop must do.
    pub(crate) fn handle_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return vec![Effect::Quit];
        }
        if self.input.is_some() {
            return self.edit_input(key);
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
        let screen = self.screen();
        match key.code {
            KeyCode::Char('q') => return vec![Effect::Quit],
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char(c @ '1'..='4') => {
                let index = c as usize - '1' as usize;
                self.switch_tab(Tab::ALL[index]);
            }
            KeyCode::Tab => self.switch_tab(self.tab.shifted(true)),
            KeyCode::BackTab => self.switch_tab(self.tab.shifted(false)),
            KeyCode::Char('j') | KeyCode::Down => self.move_by(1),
            KeyCode::Char('k') | KeyCode::Up => self.move_by(-1),
            KeyCode::PageDown => self.move_by(self.page_rows.max(1) as isize),
            KeyCode::PageUp => self.move_by(-(self.page_rows.max(1) as isize)),
            KeyCode::Char('g') | KeyCode::Home => {
                if let Some(selected) = self.selection_mut() {
                    *selected = 0;
                } else {
                    self.detail_scroll = 0;
                }
            }
            KeyCode::Char('G') | KeyCode::End => {
                if let Some(selected) = self.selection_mut() {
                    *selected = usize::MAX;
                } else {
                    self.detail_scroll = u16::MAX / 2;
                }
            }
            KeyCode::Enter | KeyCode::Char('l') => self.open_selected(),
            KeyCode::Esc | KeyCode::Char('h') => self.back(),
            KeyCode::Char(']') | KeyCode::Right => {
                if let Screen::Job(_) = screen {
                    self.pane = self.pane.shifted(true);
                    self.detail_scroll = 0;
                }
            }
            KeyCode::Char('[') | KeyCode::Left => {
                if let Screen::Job(_) = screen {
                    self.pane = self.pane.shifted(false);
                    self.detail_scroll = 0;
                }
            }
            KeyCode::Char('/') => self.open_input(InputKind::Search),
            KeyCode::Char('t') => {
                if screen == Screen::Tab(Tab::Workflows) {
                    self.open_input(InputKind::WorkflowType);
                } else {
                    self.switch_tab(Tab::Queue);
                    self.open_input(InputKind::JobType);
                }
            }
            KeyCode::Char('w') => self.workflow_key(screen),
            KeyCode::Char('f') => match screen {
                Screen::Tab(Tab::Queue) => {
                    self.queue_filter.status = cycle(&JOB_STATUSES, self.queue_filter.status);
                    self.reset_queue_page();
                }
                Screen::Tab(Tab::Workflows) => {
                    self.workflow_filter.status = cycle(&RUN_STATUSES, self.workflow_filter.status);
                    self.reset_workflow_page();
                }
                _ => self.flash = Some("f filters the Queue and Workflows screens".to_owned()),
            },
            KeyCode::Char('c') => match screen {
                Screen::Tab(Tab::Queue) => {
                    self.queue_filter = QueueFilter::default();
                    self.reset_queue_page();
                }
                Screen::Tab(Tab::Workflows) => {
                    self.workflow_filter = WorkflowFilter::default();
                    self.reset_workflow_page();
                }
                _ => self.local_search = None,
            },
            KeyCode::Char('v') => match screen {
                Screen::Tab(_) => self.wide = !self.wide,
                Screen::Job(_) | Screen::Workflow(_) => self.wrap = !self.wrap,
            },
            KeyCode::Char('R') => self.raw_json = !self.raw_json,
            KeyCode::Char('r' | '.') => return vec![Effect::Poller(Command::Refresh)],
            KeyCode::Char('p') => {
                self.paused = !self.paused;
                return vec![Effect::Poller(Command::SetPaused(self.paused))];
            }
            KeyCode::Char('y') => {
                if let Some(id) = self.selected_id() {
                    self.flash = Some(format!("copied {id}"));
                    return vec![Effect::Copy(id)];
                }
            }
            KeyCode::Char(':') => self.open_input(InputKind::Command),
            KeyCode::Char('o') => self.open_input(InputKind::Organization),
            KeyCode::Char('O') => {
                if self.organization.is_some() {
                    self.organization = None;
                } else if self.remembered_organization.is_some() {
                    self.organization = self.remembered_organization;
                } else {
                    self.open_input(InputKind::Organization);
                }
                self.reset_queue_page();
                self.reset_workflow_page();
            }
            _ => {}
        }
        Vec::new()
    }

    /// `w`: on the queue, show only the selected job's workflow run (again: all jobs);
    /// elsewhere, edit the workflow type filter of the Workflows screen.
    fn workflow_key(&mut self, screen: Screen) {
        if screen == Screen::Tab(Tab::Queue) {
            if self.queue_filter.workflow_run.is_some() {
                self.queue_filter.workflow_run = None;
                self.reset_queue_page();
                return;
            }
            if let Some(run) = self.selected_job().and_then(|job| job.workflow_run_id) {
                self.queue_filter.workflow_run = Some(run);
                self.reset_queue_page();
                return;
            }
        }
        self.switch_tab(Tab::Workflows);
        self.open_input(InputKind::WorkflowType);
    }
}

#[cfg(test)]
mod tests;
