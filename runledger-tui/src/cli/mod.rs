//! The admin subcommands. Every change goes through the engine's API, so it is checked and
//! refused exactly as in Rust code, with the same stable error codes; reads open read-only
//! sessions.
//!
//! Exit status: 0 when the command did what it says, 1 when the engine refused it or the
//! database failed (the error's code on stderr), 2 for bad usage, 3 when `check-schema` finds
//! the schema missing or from another version.

mod jobs;
mod maintenance;
mod output;
mod queues;
mod schedules;
mod workflows;

use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use runledger_engine::postgres::jobs::TenantScope;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::runtime::Runtime;
use uuid::Uuid;

use crate::args::Command;
pub(crate) use output::Output;

/// Why a command did not succeed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The engine refused the request, or the database failed.
    Engine(runledger_engine::postgres::Error),
    /// The schema is missing or from another version.
    Schema(runledger_engine::postgres::SchemaCompatibilityError),
    /// The command line or the connection settings cannot work.
    Usage(String),
    /// The request was refused for a reason with its own code.
    Refused { code: &'static str, message: String },
}

impl From<runledger_engine::postgres::Error> for Failure {
    fn from(err: runledger_engine::postgres::Error) -> Self {
        Self::Engine(err)
    }
}

impl Failure {
    fn report(&self, out: Output) -> ExitCode {
        match self {
            Self::Engine(err) => {
                out.fail(err.code(), &err.to_string());
                if !out.json
                    && matches!(
                        err.category(),
                        runledger_engine::postgres::ErrorCategory::Storage
                    )
                {
                    eprintln!("  detail: {}", err.internal_message());
                }
                ExitCode::FAILURE
            }
            Self::Schema(err) => {
                out.fail(err.code(), &err.to_string());
                ExitCode::from(3)
            }
            Self::Usage(message) => {
                out.fail("cli.usage", message);
                ExitCode::from(2)
            }
            Self::Refused { code, message } => {
                out.fail(code, message);
                ExitCode::FAILURE
            }
        }
    }
}

/// What the commands share: the pool, the scope and the output.
pub(crate) struct Context {
    pub(crate) pool: PgPool,
    pub(crate) organization: Option<Uuid>,
    pub(crate) out: Output,
}

impl Context {
    /// The scope of reads and changes: one organization with `--org`, everything otherwise.
    pub(crate) fn scope(&self) -> TenantScope {
        self.organization
            .map_or(TenantScope::Admin, TenantScope::Organization)
    }
}

/// Whether a command only reads (its session is then read-only).
fn reads_only(command: &Command) -> bool {
    use crate::args::{JobsCommand, QueuesCommand, SchedulesCommand, WorkflowsCommand};
    match command {
        Command::Jobs(JobsCommand::List(_) | JobsCommand::Show { .. })
        | Command::Workflows(WorkflowsCommand::List(_) | WorkflowsCommand::Show { .. })
        | Command::Schedules(SchedulesCommand::List)
        | Command::Queues(QueuesCommand::List)
        | Command::CheckSchema
        | Command::Stats => true,
        Command::Prune(prune) => prune.dry_run,
        _ => false,
    }
}

/// What a session is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Session {
    /// The dashboard: read-only, every statement bounded by 10 s like its fetches.
    Dashboard,
    /// A command that only reads.
    Read,
    /// A command that changes something.
    Write,
}

/// A small lazy pool. Sessions plan every admin read for its actual filter values, so optional
/// filters keep using their indexes; `statement_timeout` bounds every statement (a prune works
/// in batches, each well under it).
pub(crate) fn connect(
    runtime: &Runtime,
    database_url: &str,
    session: Session,
) -> Result<PgPool, String> {
    let timeout = if session == Session::Dashboard {
        "10000"
    } else {
        "60000"
    };
    let mut options = PgConnectOptions::from_str(database_url)
        .map_err(|err| format!("invalid database URL: {err}"))?
        .application_name("runledger-cli")
        .options([
            ("plan_cache_mode", "force_custom_plan"),
            ("statement_timeout", timeout),
        ]);
    if session != Session::Write {
        options = options.options([("default_transaction_read_only", "on")]);
    }
    let _entered = runtime.enter();
    Ok(PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy_with(options))
}

/// Runs one admin command and reports how it went.
pub(crate) fn run(
    runtime: &Runtime,
    database_url: &str,
    organization: Option<Uuid>,
    out: Output,
    command: &Command,
) -> ExitCode {
    let session = if reads_only(command) {
        Session::Read
    } else {
        Session::Write
    };
    let pool = match connect(runtime, database_url, session) {
        Ok(pool) => pool,
        Err(message) => return Failure::Usage(message).report(out),
    };
    let context = Context {
        pool,
        organization,
        out,
    };
    let result = runtime.block_on(async {
        match command {
            // Handled before any database is named.
            Command::Tui(_) | Command::Completions { .. } => Ok(()),
            Command::Migrate => maintenance::migrate(&context).await,
            Command::CheckSchema => maintenance::check_schema(&context).await,
            Command::Prune(args) => maintenance::prune(&context, args).await,
            Command::Stats => maintenance::stats(&context).await,
            Command::Jobs(command) => jobs::run(&context, command).await,
            Command::Workflows(command) => workflows::run(&context, command).await,
            Command::Gates(command) => workflows::gates(&context, command).await,
            Command::Schedules(command) => schedules::run(&context, command).await,
            Command::Queues(command) => queues::run(&context, command).await,
        }
    });
    runtime.block_on(context.pool.close());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(out),
    }
}
