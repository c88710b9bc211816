//! `runledger` (package `runledger-cli`): the operator tool for Runledger. Without a subcommand
//! it is a read-only terminal dashboard; its subcommands are an admin CLI for scripts and
//! operators.
//!
//! The dashboard connects to the database your workers use and shows, refreshed in the
//! background:
//!
//! - **Dashboard** (1): throughput, dead letters and queue depth over the last hour as charts;
//!   per job type, pending (and due) jobs, the oldest due job's wait, leased jobs and stale
//!   leases, successes and dead letters of the last 24 hours, p50/p95 duration; workflow runs
//!   running, waiting for an external step, and completed with errors.
//! - **Queue** (2): jobs newest first, filtered by status (`f`), type (`t`), search (`/`) or
//!   workflow run (`w`), in keyset pages. Enter opens the **job detail**: panes Summary (with
//!   the job's progress as a gauge), Attempts+Events, Logs and Payload (`[` / `]`).
//! - **Workflows** (3): runs with step progress; Enter opens the **workflow detail** with every
//!   step, its prerequisites and status.
//! - **Definitions** (4): job definitions with their runtime config and schedules.
//!
//! ```sh
//! DATABASE_URL=postgres://user:pass@host/db cargo run -p runledger-cli -- --org <uuid>
//! cargo run -p runledger-cli -- jobs list --status dead_lettered --json
//! ```
//!
//! `--help` lists the flags and subcommands (`migrate`, `check-schema`, `jobs`, `workflows`,
//! `gates`, `schedules`, `queues`, `prune`, `stats`, `completions`). Press `?` in the dashboard for every key. The
//! dashboard's session is read-only (`default_transaction_read_only`); the title shows whether
//! the data is live, loading, paused, stale or reconnecting (with the error), and the UI never
//! waits on the database.
//!
//! Exit status: 0 on success (the dashboard: on quit, also after SIGTERM, SIGHUP or a hang-up
//! of the terminal), 1 when a command was refused or failed (or a terminal error), 2 for bad
//! flags, 3 when the schema check fails.

#![forbid(unsafe_code)]

mod app;
mod args;
mod cli;
mod input;
mod model;
mod poller;
mod screens;
mod terminal;
mod ui;

use std::process::ExitCode;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use clap::Parser;
use ratatui::crossterm::event::{self, Event, KeyEvent, KeyEventKind};
use runledger_engine::postgres::ensure_schema_compatible;
use sqlx::PgPool;
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, watch};

use crate::app::frame::{self, CHROME_ROWS};
use crate::app::{App, AppConfig, Effect};
use crate::args::{Cli, Command, TuiArgs};
use crate::cli::Output;
use crate::model::PollerEvent;
use crate::poller::PollerConfig;
use crate::terminal::TerminalGuard;
use crate::ui::Clock;

/// Longest a fetch (or the startup schema check) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    // Help, version and bad flags end here (exit status 0, 0 and 2).
    let cli = Cli::parse();
    if let Some(Command::Completions { shell }) = cli.command {
        args::print_completions(shell);
        return ExitCode::SUCCESS;
    }
    let out = Output { json: cli.json };
    let Some(database_url) = cli.database_url.filter(|url| !url.trim().is_empty()) else {
        out.fail(
            "cli.usage",
            "no database: pass --database-url or set DATABASE_URL",
        );
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("runledger: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let tui = match &cli.command {
        None => cli.tui,
        Some(Command::Tui(tui)) => tui.clone(),
        Some(command) => return cli::run(&runtime, &database_url, cli.org, out, command),
    };
    dashboard(&runtime, &database_url, cli.org, &tui)
}

/// Runs the terminal dashboard.
fn dashboard(
    runtime: &Runtime,
    database_url: &str,
    organization: Option<uuid::Uuid>,
    args: &TuiArgs,
) -> ExitCode {
    // A small lazy pool: the UI starts (and shows "reconnecting") even if the database is
    // down when the schema check is skipped.
    let pool = match cli::connect(runtime, database_url, cli::Session::Dashboard) {
        Ok(pool) => pool,
        Err(message) => {
            eprintln!("runledger: {message}");
            return ExitCode::from(2);
        }
    };
    if !args.skip_schema_check
        && let Err(message) = runtime.block_on(check_schema(&pool))
    {
        eprintln!("runledger: {message}");
        return ExitCode::from(3);
    }
    match run_ui(runtime, pool, organization, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("runledger: terminal error: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn check_schema(pool: &PgPool) -> Result<(), String> {
    match tokio::time::timeout(FETCH_TIMEOUT, ensure_schema_compatible(pool)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(format!(
            "schema check failed ({}): {}\n  detail: {}\n  Apply the Runledger migrations (runledger_engine::postgres::migrate) \
             or pass --skip-schema-check.",
            err.code(),
            err,
            err.internal_message()
        )),
        Err(_) => Err(format!(
            "schema check failed: the database did not answer within {} s",
            FETCH_TIMEOUT.as_secs()
        )),
    }
}

/// Forwards SIGTERM and SIGHUP as a clean quit, so the terminal is restored.
async fn forward_signals(events: std_mpsc::Sender<PollerEvent>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut hangup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = hangup.recv() => {}
        }
        let _ = events.send(PollerEvent::Quit);
    }
    #[cfg(not(unix))]
    drop(events);
}

fn run_ui(
    runtime: &Runtime,
    pool: PgPool,
    organization: Option<uuid::Uuid>,
    args: &TuiArgs,
) -> std::io::Result<()> {
    let mut app = App::new(AppConfig {
        organization,
        limit: args.limit,
        refresh: args.refresh(),
    });
    let (query_tx, query_rx) = watch::channel(app.query());
    let (command_tx, command_rx) = mpsc::unbounded_channel();
    let (event_tx, event_rx) = std_mpsc::channel();
    let poller = runtime.spawn(poller::run(
        pool,
        query_rx,
        command_rx,
        event_tx.clone(),
        PollerConfig {
            refresh: args.refresh(),
            fetch_timeout: FETCH_TIMEOUT,
        },
    ));
    let signals = runtime.spawn(forward_signals(event_tx));
    let mut guard = TerminalGuard::enter()?;
    let keys = read_keys();
    let result = event_loop(
        &mut guard,
        &mut app,
        &query_tx,
        &command_tx,
        &event_rx,
        &keys,
    );
    if let Ok(Ending::HungUp) = result {
        // No terminal is left to restore, and writing to it would only fail.
        std::mem::forget(guard);
    } else {
        drop(guard);
    }
    poller.abort();
    signals.abort();
    result.map(|_| ())
}

/// Why the UI loop ended.
enum Ending {
    /// `q`, SIGTERM or SIGHUP.
    Quit,
    /// The terminal went away.
    HungUp,
}

/// Reads key presses on a thread of their own and hands them over. Reading the terminal can
/// block (or, after a hang-up, spin inside the terminal library without returning), so the
/// UI thread never reads it: it keeps handling signals, snapshots and hang-ups whatever the
/// reader does, and the process ends without waiting for the reader.
fn read_keys() -> std_mpsc::Receiver<KeyEvent> {
    let (keys_tx, keys_rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(event) = event::read() {
            if let Event::Key(key) = event
                && key.kind == KeyEventKind::Press
                && keys_tx.send(key).is_err()
            {
                return;
            }
        }
    });
    keys_rx
}

/// Whether the terminal has hung up (its window closed, its tmux session killed): a hung-up
/// terminal refuses even the window-size query.
fn terminal_hung_up() -> bool {
    ratatui::crossterm::terminal::window_size().is_err()
}

fn event_loop(
    guard: &mut TerminalGuard,
    app: &mut App,
    queries: &watch::Sender<model::Query>,
    commands: &mpsc::UnboundedSender<model::Command>,
    events: &std_mpsc::Receiver<PollerEvent>,
    keys: &std_mpsc::Receiver<KeyEvent>,
) -> std::io::Result<Ending> {
    loop {
        while let Ok(event) = events.try_recv() {
            if app.apply(event) {
                return Ok(Ending::Quit);
            }
        }
        if terminal_hung_up() {
            return Ok(Ending::HungUp);
        }
        let size = guard.terminal.size()?;
        app.page_rows = usize::from(size.height.saturating_sub(CHROME_ROWS));
        guard.terminal.draw(|f| frame::draw(f, app, Clock::now()))?;
        if let Ok(key) = keys.recv_timeout(Duration::from_millis(100)) {
            for effect in app.handle_key(key) {
                match effect {
                    Effect::Quit => return Ok(Ending::Quit),
                    Effect::Copy(text) => {
                        terminal::copy_to_clipboard(guard.terminal.backend_mut(), &text)?;
                    }
                    Effect::Poller(command) => {
                        let _ = commands.send(command);
                    }
                }
            }
        }
        let query = app.query();
        queries.send_if_modified(|current| {
            let changed = *current != query;
            if changed {
                *current = query;
            }
            changed
        });
    }
}
