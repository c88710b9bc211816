//! `runledger-tui`: a read-only terminal dashboard for Runledger operators.
//!
//! It connects to the database your workers use and shows, refreshed in the background:
//!
//! - **Dashboard** (1): per job type, pending (and due) jobs, the oldest due job's wait, leased
//!   jobs and stale leases, successes and dead letters of the last 24 hours, p50/p95 duration;
//!   workflow runs running, waiting for an external step, and completed with errors.
//! - **Queue** (2): jobs newest first, filtered by status (`f`), type (`t`), search (`/`) or
//!   workflow run (`w`), in keyset pages. Enter opens the **job detail**: panes Summary,
//!   Attempts+Events, Logs and Payload (`[` / `]`).
//! - **Workflows** (3): runs with step progress; Enter opens the **workflow detail** with every
//!   step, its prerequisites and status.
//! - **Definitions** (4): job definitions with their runtime config and schedules.
//!
//! ```sh
//! DATABASE_URL=postgres://user:pass@host/db cargo run -p runledger-tui -- --org <uuid>
//! ```
//!
//! Flags: `--database-url` (or `DATABASE_URL`), `--org`, `--refresh-ms`, `--limit`,
//! `--skip-schema-check`. Press `?` for every key. The session is read-only
//! (`default_transaction_read_only`); the title shows whether the data is live, loading,
//! paused, stale or reconnecting (with the error), and the UI never waits on the database.
//!
//! Exit status: 0 on quit (also after SIGTERM, SIGHUP or a hang-up of the terminal), 2 for bad
//! flags, 3 when the schema check fails, 1 for terminal errors.

mod app;
mod args;
mod model;
mod poller;
mod terminal;
mod ui;

use std::io::Write;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyEvent, KeyEventKind};
use runledger_engine::postgres::ensure_schema_compatible;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, watch};

use crate::app::{App, AppConfig, Effect};
use crate::args::{Args, Parsed};
use crate::model::PollerEvent;
use crate::poller::PollerConfig;
use crate::terminal::TerminalGuard;
use crate::ui::{CHROME_ROWS, Clock};

/// Longest a fetch (or the startup schema check) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let parsed = args::parse(std::env::args().skip(1), std::env::var("DATABASE_URL").ok());
    let args = match parsed {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Help) => {
            let _ = writeln!(std::io::stdout(), "{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            let _ = writeln!(
                std::io::stdout(),
                "runledger-tui {}",
                env!("CARGO_PKG_VERSION")
            );
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("runledger-tui: {message}\n\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("runledger-tui: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let pool = match connect(&runtime, &args) {
        Ok(pool) => pool,
        Err(message) => {
            eprintln!("runledger-tui: {message}");
            return ExitCode::from(2);
        }
    };
    if !args.skip_schema_check
        && let Err(message) = runtime.block_on(check_schema(&pool))
    {
        eprintln!("runledger-tui: {message}");
        return ExitCode::from(3);
    }
    match run_ui(&runtime, pool, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("runledger-tui: terminal error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A small lazy pool: the UI starts (and shows "reconnecting") even if the database is down
/// when the schema check is skipped. Sessions are read-only and plan every admin read for its
/// actual filter values, so optional filters keep using their indexes.
fn connect(runtime: &Runtime, args: &Args) -> Result<PgPool, String> {
    let options = PgConnectOptions::from_str(&args.database_url)
        .map_err(|err| format!("invalid database URL: {err}"))?
        .application_name("runledger-tui")
        .options([
            ("default_transaction_read_only", "on"),
            ("plan_cache_mode", "force_custom_plan"),
            ("statement_timeout", "10000"),
        ]);
    let _entered = runtime.enter();
    Ok(PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy_with(options))
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

fn run_ui(runtime: &Runtime, pool: PgPool, args: &Args) -> std::io::Result<()> {
    let mut app = App::new(AppConfig {
        organization: args.organization,
        limit: args.limit,
        refresh: args.refresh,
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
            refresh: args.refresh,
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
        guard
            .terminal
            .draw(|frame| ui::draw(frame, app, Clock::now()))?;
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
