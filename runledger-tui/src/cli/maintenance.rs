//! `migrate`, `check-schema`, `prune` and `stats`.

use std::collections::BTreeMap;
use std::time::Duration;

use runledger_engine::core::jobs::{Retention, WorkflowRunStatus};
use runledger_engine::postgres::jobs::{
    JobMetrics, PruneCounts, WorkflowRunCountFilter, count_prunable, count_workflow_runs,
    get_job_metrics,
};
use runledger_engine::postgres::{ensure_schema_compatible, migrate as apply_migrations};
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::pruner::{Pruner, PrunerConfig};
use serde::Serialize;

use super::output::{self, METRICS_HEADER, keyed, table};
use super::{Context, Failure};
use crate::args::PruneArgs;

/// What `prune` deleted, or `prune --dry-run` would delete.
#[derive(Serialize)]
struct PruneReport {
    dry_run: bool,
    /// Transactions the prune ran (not for a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    batches: Option<usize>,
    #[serde(flatten)]
    counts: PruneCounts,
}

/// What `stats` prints: the metrics per job type and the runs per unfinished status.
#[derive(Serialize)]
struct Stats<'a> {
    job_types: &'a [JobMetrics],
    workflow_runs: BTreeMap<String, i64>,
}

pub(super) async fn migrate(context: &Context) -> Result<(), Failure> {
    apply_migrations(&context.pool)
        .await
        .map_err(Failure::Schema)?;
    context.out.print(&keyed("schema", "up to date"), || {
        "migrations applied; the schema is up to date".to_owned()
    })
}

pub(super) async fn check_schema(context: &Context) -> Result<(), Failure> {
    ensure_schema_compatible(&context.pool)
        .await
        .map_err(Failure::Schema)?;
    context.out.print(&keyed("schema", "compatible"), || {
        "the schema matches this version".to_owned()
    })
}

/// The workers' retention (`JOBS_RETAIN_*`, through the flags' env fallbacks), with the flags
/// given.
fn retention(args: &PruneArgs) -> Retention {
    let seconds =
        |value: Option<u64>, default: Duration| value.map_or(default, Duration::from_secs);
    let defaults = Retention::default();
    Retention::default()
        .succeeded(seconds(args.retain_succeeded_seconds, defaults.succeeded))
        .dead_lettered(seconds(
            args.retain_dead_lettered_seconds,
            defaults.dead_lettered,
        ))
        .canceled(seconds(args.retain_canceled_seconds, defaults.canceled))
}

pub(super) async fn prune(context: &Context, args: &PruneArgs) -> Result<(), Failure> {
    let retention = retention(args);
    if args.dry_run {
        let due = count_prunable(&context.pool, &retention).await?;
        let report = PruneReport {
            dry_run: true,
            batches: None,
            counts: due,
        };
        return context.out.print(&report, || {
            format!("would delete\n{}", output::prune_counts_text(&due))
        });
    }
    let config = PrunerConfig::from_jobs_config(&JobsConfig::default()).retention(retention);
    let pruner = Pruner::new(context.pool.clone(), config).map_err(|err| Failure::Refused {
        code: err.code(),
        message: err.to_string(),
    })?;
    let pass = pruner.run_once().await?;
    if pass.locked_out {
        return Err(Failure::Refused {
            code: "prune.locked_out",
            message: "another pruner is working right now; try again later".to_owned(),
        });
    }
    let report = PruneReport {
        dry_run: false,
        batches: Some(pass.batches),
        counts: pass.deleted,
    };
    context.out.print(&report, || {
        format!("deleted\n{}", output::prune_counts_text(&pass.deleted))
    })
}

pub(super) async fn stats(context: &Context) -> Result<(), Failure> {
    let metrics = get_job_metrics(&context.pool, context.organization).await?;
    let mut runs = BTreeMap::new();
    for status in [
        WorkflowRunStatus::Running,
        WorkflowRunStatus::WaitingForExternal,
        WorkflowRunStatus::CompletedWithErrors,
    ] {
        let filter = WorkflowRunCountFilter {
            status: Some(status),
            workflow_type_contains: None,
            organization_id: context.organization,
        };
        let count = count_workflow_runs(&context.pool, &filter).await?;
        runs.insert(status.as_str().to_ascii_lowercase(), count);
    }
    let stats = Stats {
        job_types: &metrics,
        workflow_runs: runs,
    };
    context.out.print(&stats, || {
        let rows: Vec<_> = metrics.iter().map(output::metrics_row).collect();
        let runs: Vec<String> = stats
            .workflow_runs
            .iter()
            .map(|(status, n)| format!("{status} {n}"))
            .collect();
        format!(
            "{}\nworkflow runs: {}",
            table(METRICS_HEADER, &rows),
            runs.join(", ")
        )
    })
}
