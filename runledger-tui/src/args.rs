//! The command line: the terminal dashboard (the default) and the admin subcommands.

mod status;

use std::io::Write;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use clap_complete::Shell;
use runledger_engine::core::jobs::{JobId, JobStatus, WorkflowRunId, WorkflowRunStatus};
use uuid::Uuid;

pub(crate) use status::Status;

/// Default pause between refreshes.
pub(crate) const DEFAULT_REFRESH_MS: u64 = 2_000;
/// Default rows per list page.
pub(crate) const DEFAULT_LIMIT: i64 = 200;

/// The parsed command line.
#[derive(Debug, Parser)]
#[command(
    name = "runledger",
    version,
    about = "Runledger's operator tool: a read-only terminal dashboard (the default) and admin commands",
    after_help = "Without a subcommand, the dashboard starts (its flags above apply to it only). Press ? inside it for the keys."
)]
pub(crate) struct Cli {
    /// PostgreSQL URL of the database the workers use.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// Scope to one organization: the dashboard's lists and every command's reads and changes.
    #[arg(long, global = true, value_name = "UUID")]
    pub(crate) org: Option<Uuid>,
    /// Print commands' results as JSON (one document on stdout; errors as JSON on stderr).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Dashboard settings (when no subcommand is given).
    #[command(flatten)]
    pub(crate) tui: TuiArgs,
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

/// Settings of the terminal dashboard.
#[derive(Debug, Clone, Args)]
pub(crate) struct TuiArgs {
    /// Auto-refresh interval in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_REFRESH_MS,
          value_parser = clap::value_parser!(u64).range(200..=600_000))]
    pub(crate) refresh_ms: u64,
    /// Rows per list page.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT,
          value_parser = clap::value_parser!(i64).range(1..=1_000))]
    pub(crate) limit: i64,
    /// Do not validate the Runledger schema at startup.
    #[arg(long)]
    pub(crate) skip_schema_check: bool,
}

impl TuiArgs {
    pub(crate) fn refresh(&self) -> Duration {
        Duration::from_millis(self.refresh_ms)
    }
}

/// What to do.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The read-only terminal dashboard (the default).
    Tui(TuiArgs),
    /// Apply the bundled migrations (creates the `runledger` schema if needed).
    Migrate,
    /// Check, without writing, that the schema matches this version (exit status 3 if not).
    CheckSchema,
    /// Inspect, cancel and requeue jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Inspect and cancel workflow runs.
    #[command(subcommand)]
    Workflows(WorkflowsCommand),
    /// Complete or fail the external steps (gates) of workflow runs.
    #[command(subcommand)]
    Gates(GatesCommand),
    /// List, pause and resume schedules.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// List queue settings; pause, resume and limit queues.
    #[command(subcommand)]
    Queues(QueuesCommand),
    /// Delete finished jobs and workflow runs past their retention (as the workers' pruner does).
    Prune(PruneArgs),
    /// Per job type: backlog, leases, the last 24 hours' outcomes and durations; run counts.
    Stats,
    /// Print a completion script for a shell (e.g. `runledger completions bash`).
    Completions {
        /// The shell to complete in.
        shell: Shell,
    },
}

/// `jobs ...`
#[derive(Debug, Subcommand)]
pub(crate) enum JobsCommand {
    /// List jobs, newest first.
    List(JobListArgs),
    /// Show one job with its attempts, events, dead letters and last log lines.
    Show {
        /// The job id.
        id: Uuid,
    },
    /// Say why a job is not running: every rule that holds it now.
    Explain {
        /// The job id (or the id of a workflow step not released yet).
        id: Uuid,
    },
    /// Cancel a pending or leased direct job.
    Cancel {
        /// The job id.
        id: Uuid,
    },
    /// Put a dead-lettered or canceled direct job back in the queue, due now.
    Requeue {
        /// The job id.
        id: Uuid,
    },
}

/// Filters of `jobs list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct JobListArgs {
    /// Only jobs in this status.
    #[arg(long, value_enum, ignore_case = true)]
    pub(crate) status: Option<Status<JobStatus>>,
    /// Only job types containing this text.
    #[arg(long = "type", value_name = "TEXT")]
    pub(crate) job_type: Option<String>,
    /// A job id, run id, idempotency key or error code to look for.
    #[arg(long)]
    pub(crate) search: Option<String>,
    /// Only the jobs of this workflow run.
    #[arg(long, value_name = "RUN_ID")]
    pub(crate) workflow_run: Option<Uuid>,
    /// Most jobs to list.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1_000))]
    pub(crate) limit: i64,
    /// Continue after this job id (the previous page's `next_cursor`).
    #[arg(long, value_name = "JOB_ID")]
    pub(crate) after: Option<Uuid>,
}

/// `workflows ...`
#[derive(Debug, Subcommand)]
pub(crate) enum WorkflowsCommand {
    /// List workflow runs, newest first, with their step counts.
    List(RunListArgs),
    /// Show one run with its steps, a page at a time.
    Show {
        /// The run id.
        id: Uuid,
        /// Most steps to show.
        #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        limit: i64,
        /// Continue after this step id (the previous page's `next_cursor`).
        #[arg(long, value_name = "STEP_ID")]
        after: Option<Uuid>,
    },
    /// Cancel a run: its open steps and their jobs end canceled.
    Cancel {
        /// The run id.
        id: Uuid,
    },
}

/// Filters of `workflows list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct RunListArgs {
    /// Only runs in this status.
    #[arg(long, value_enum, ignore_case = true)]
    pub(crate) status: Option<Status<WorkflowRunStatus>>,
    /// Only workflow types containing this text.
    #[arg(long = "type", value_name = "TEXT")]
    pub(crate) workflow_type: Option<String>,
    /// Most runs to list.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1_000))]
    pub(crate) limit: i64,
    /// Continue after this run id (the previous page's `next_cursor`).
    #[arg(long, value_name = "RUN_ID")]
    pub(crate) after: Option<Uuid>,
}

/// `gates ...`
#[derive(Debug, Subcommand)]
pub(crate) enum GatesCommand {
    /// Complete a waiting gate successfully, releasing the steps after it.
    Complete {
        /// The workflow run id.
        run: Uuid,
        /// The gate's step key.
        step: String,
        /// The gate's output, as JSON.
        #[arg(long, value_parser = parse_json)]
        output: Option<serde_json::Value>,
    },
    /// Fail a waiting gate: steps that needed it to succeed are canceled.
    Fail {
        /// The workflow run id.
        run: Uuid,
        /// The gate's step key.
        step: String,
        /// The error code stored on the step.
        #[arg(long, default_value = "gate.failed")]
        code: String,
        /// The error message stored on the step.
        #[arg(long)]
        message: Option<String>,
    },
}

/// `schedules ...`
#[derive(Debug, Subcommand)]
pub(crate) enum SchedulesCommand {
    /// List every schedule.
    List,
    /// Stop a schedule from firing.
    Pause {
        /// The schedule's name.
        name: String,
    },
    /// Let a paused schedule fire again (its job type must be enabled).
    Resume {
        /// The schedule's name.
        name: String,
    },
}

/// `queues ...`
#[derive(Debug, Subcommand)]
pub(crate) enum QueuesCommand {
    /// List the queues an operator changed (paused, resumed or limited).
    List,
    /// Stop workers from claiming the queue's jobs (running ones finish; enqueues go on).
    Pause {
        /// The queue's name.
        name: String,
    },
    /// Let workers claim the queue's jobs again.
    Resume {
        /// The queue's name.
        name: String,
    },
    /// Set the most jobs of the queue running at once across all workers.
    Limit {
        /// The queue's name.
        name: String,
        /// The limit (at least 1); omit it with --none.
        #[arg(required_unless_present = "none", value_parser = clap::value_parser!(i32).range(1..))]
        limit: Option<i32>,
        /// Remove the queue's limit.
        #[arg(long, conflicts_with = "limit")]
        none: bool,
    },
}

/// `prune ...`: the retention the workers use, from the same variables.
#[derive(Debug, Clone, Args)]
pub(crate) struct PruneArgs {
    /// Only count what would be deleted.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Keep succeeded jobs and runs this long, in seconds.
    #[arg(long, env = "JOBS_RETAIN_SUCCEEDED_SECONDS", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=i32::MAX as u64))]
    pub(crate) retain_succeeded_seconds: Option<u64>,
    /// Keep dead-lettered jobs (and runs completed with errors) this long, in seconds.
    #[arg(long, env = "JOBS_RETAIN_DEAD_LETTERED_SECONDS", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=i32::MAX as u64))]
    pub(crate) retain_dead_lettered_seconds: Option<u64>,
    /// Keep canceled jobs and runs this long, in seconds.
    #[arg(long, env = "JOBS_RETAIN_CANCELED_SECONDS", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=i32::MAX as u64))]
    pub(crate) retain_canceled_seconds: Option<u64>,
}

fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"))
}

/// Prints the completion script of `shell` for this command line.
pub(crate) fn print_completions(shell: Shell) {
    let mut command = Cli::command();
    let name = command.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, name, &mut script);
    let _ = std::io::stdout().write_all(&script);
}

/// A job id from the command line.
pub(crate) fn job_id(id: Uuid) -> JobId {
    JobId(id)
}

/// A run id from the command line.
pub(crate) fn run_id(id: Uuid) -> WorkflowRunId {
    WorkflowRunId(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("runledger").chain(args.iter().copied()))
    }

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_subcommand_starts_the_dashboard_with_its_defaults() {
        let cli = parse(&["--database-url", "postgres://x/db"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.database_url.as_deref(), Some("postgres://x/db"));
        assert_eq!(cli.tui.refresh(), Duration::from_millis(DEFAULT_REFRESH_MS));
        assert_eq!(cli.tui.limit, DEFAULT_LIMIT);
        assert!(!cli.tui.skip_schema_check);
    }

    #[test]
    fn dashboard_flags_are_parsed_in_both_spellings() {
        let org = "00000000-0000-0000-0000-000000000001";
        let cli = parse(&[
            &format!("--org={org}"),
            "--refresh-ms",
            "500",
            "--limit=50",
            "--skip-schema-check",
        ])
        .unwrap();
        assert_eq!(cli.org, Some(Uuid::parse_str(org).unwrap()));
        assert_eq!(cli.tui.refresh(), Duration::from_millis(500));
        assert_eq!(cli.tui.limit, 50);
        assert!(cli.tui.skip_schema_check);
    }

    #[test]
    fn bad_input_is_refused_with_the_flag_named() {
        for (args, flag) in [
            (&["--org", "nope"][..], "--org"),
            (&["--limit", "0"][..], "--limit"),
            (&["--refresh-ms", "10"][..], "--refresh-ms"),
            (&["jobs", "list", "--status", "done"][..], "--status"),
            (
                &[
                    "gates",
                    "complete",
                    "00000000-0000-0000-0000-000000000001",
                    "approve",
                    "--output",
                    "{",
                ][..],
                "--output",
            ),
        ] {
            let err = parse(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
            assert!(err.to_string().contains(flag), "{args:?}: {err}");
        }
        assert!(parse(&["--bogus"]).is_err());
    }

    #[test]
    fn subcommands_take_their_arguments() {
        let cli = parse(&[
            "--json",
            "jobs",
            "list",
            "--status",
            "dead_lettered",
            "--type",
            "emails",
        ])
        .unwrap();
        assert!(cli.json);
        let Some(Command::Jobs(JobsCommand::List(list))) = cli.command else {
            panic!("expected jobs list");
        };
        assert_eq!(list.status, Some(Status(JobStatus::DeadLettered)));
        assert_eq!(list.job_type.as_deref(), Some("emails"));
        let cli = parse(&["prune", "--dry-run", "--retain-succeeded-seconds", "60"]).unwrap();
        let Some(Command::Prune(prune)) = cli.command else {
            panic!("expected prune");
        };
        assert!(prune.dry_run);
        assert_eq!(prune.retain_succeeded_seconds, Some(60));
    }
}
