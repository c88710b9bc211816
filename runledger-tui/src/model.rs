//! What the UI asks the poller for ([`Query`]) and what comes back ([`PollerEvent`]). Plain
//! data: the views render these and never touch the database.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use runledger_engine::core::jobs::{
    JobId, JobStage, JobStatus, WorkflowRunId, WorkflowRunStatus, WorkflowStepId, WorkflowStepKind,
    WorkflowStepStatus,
};
use runledger_engine::postgres::jobs::{
    JobActivityMinute, JobDefinition, JobDetail, JobIntentMetrics, JobMetrics, JobRecord,
    JobRuntimeConfig, JobSchedule, WorkflowRunRecord, WorkflowStepRecord,
};
use serde_json::Value;
use uuid::Uuid;

/// Counts above this are shown as "N+" (the queue count stops there).
pub(crate) const COUNT_CAP: i64 = 10_000;

/// Filters of the queue screen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QueueFilter {
    pub(crate) status: Option<JobStatus>,
    pub(crate) type_contains: Option<String>,
    pub(crate) search: Option<String>,
    pub(crate) workflow_run: Option<WorkflowRunId>,
}

impl QueueFilter {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Filters of the workflows screen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WorkflowFilter {
    pub(crate) status: Option<WorkflowRunStatus>,
    pub(crate) type_contains: Option<String>,
}

/// The data one screen needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ViewQuery {
    Dashboard,
    Queue {
        filter: QueueFilter,
        after: Option<JobId>,
    },
    Workflows {
        filter: WorkflowFilter,
        after: Option<WorkflowRunId>,
    },
    Definitions,
    Job(JobId),
    /// A run and a page of its steps, after the step `after`.
    Workflow {
        id: WorkflowRunId,
        after: Option<WorkflowStepId>,
    },
    /// Find out whether an id (from the `:` prompt) is a job or a workflow run.
    Lookup(Uuid),
}

/// Everything the poller needs to fetch the current screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    pub(crate) organization: Option<Uuid>,
    pub(crate) limit: i64,
    pub(crate) view: ViewQuery,
}

/// One row of the dashboard (a job type's metrics).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct MetricRow {
    pub(crate) job_type: String,
    pub(crate) enabled: bool,
    pub(crate) pending: i64,
    pub(crate) ready: i64,
    pub(crate) oldest_ready_at: Option<DateTime<Utc>>,
    pub(crate) leased: i64,
    pub(crate) stale_leases: i64,
    pub(crate) succeeded_24h: i64,
    pub(crate) dead_lettered_24h: i64,
    pub(crate) p50_ms: Option<f64>,
    pub(crate) p95_ms: Option<f64>,
    pub(crate) panicked_24h: i64,
}

impl From<JobMetrics> for MetricRow {
    fn from(m: JobMetrics) -> Self {
        Self {
            job_type: m.job_type,
            enabled: m.is_enabled,
            pending: m.pending,
            ready: m.pending_ready,
            oldest_ready_at: m.oldest_ready_at,
            leased: m.leased,
            stale_leases: m.stale_leases,
            succeeded_24h: m.succeeded_24h,
            dead_lettered_24h: m.dead_lettered_24h,
            p50_ms: m.p50_duration_ms,
            p95_ms: m.p95_duration_ms,
            panicked_24h: m.panicked_24h,
        }
    }
}

/// One minute of the dashboard's charts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ActivityPoint {
    pub(crate) succeeded: u64,
    pub(crate) dead_lettered: u64,
    pub(crate) queue_depth: u64,
}

impl From<JobActivityMinute> for ActivityPoint {
    fn from(m: JobActivityMinute) -> Self {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Self {
            succeeded: count(m.succeeded),
            dead_lettered: count(m.dead_lettered),
            queue_depth: count(m.queue_depth),
        }
    }
}

/// Durable enqueue intents, summed over job types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct IntentTotals {
    pub(crate) pending: i64,
    pub(crate) deferred: i64,
    pub(crate) oldest_pending_at: Option<DateTime<Utc>>,
    pub(crate) promoted_24h: i64,
    pub(crate) conflicted_24h: i64,
}

impl IntentTotals {
    pub(crate) fn sum(rows: &[JobIntentMetrics]) -> Self {
        rows.iter().fold(Self::default(), |total, row| Self {
            pending: total.pending + row.pending,
            deferred: total.deferred + row.deferred,
            oldest_pending_at: match (total.oldest_pending_at, row.oldest_pending_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            promoted_24h: total.promoted_24h + row.promoted_24h,
            conflicted_24h: total.conflicted_24h + row.conflicted_24h,
        })
    }
}

/// Dashboard figures.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct DashboardData {
    /// The last hour, minute by minute, oldest first.
    pub(crate) activity: Vec<ActivityPoint>,
    pub(crate) metrics: Vec<MetricRow>,
    pub(crate) runs_running: i64,
    pub(crate) runs_waiting: i64,
    pub(crate) runs_with_errors: i64,
    pub(crate) intents: IntentTotals,
}

/// A job as the views show it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobRow {
    pub(crate) id: JobId,
    pub(crate) job_type: String,
    pub(crate) queue: String,
    pub(crate) resource_key: Option<String>,
    pub(crate) status: JobStatus,
    pub(crate) organization_id: Option<Uuid>,
    pub(crate) priority: i32,
    pub(crate) attempts_used: i32,
    pub(crate) max_attempts: i32,
    pub(crate) timeout_seconds: i32,
    pub(crate) worker_id: Option<String>,
    pub(crate) next_run_at: DateTime<Utc>,
    pub(crate) lease_expires_at: Option<DateTime<Utc>>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) finished_at: Option<DateTime<Utc>>,
    pub(crate) last_error_code: Option<String>,
    pub(crate) last_error_message: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) workflow_run_id: Option<WorkflowRunId>,
    pub(crate) payload: Value,
    pub(crate) progress: Option<Value>,
    pub(crate) output: Option<Value>,
    pub(crate) stage: JobStage,
    pub(crate) run_number: i32,
    pub(crate) checkpoint: Option<Value>,
}

impl JobRow {
    /// A job with an empty payload, for tests.
    #[cfg(test)]
    pub(crate) fn new(id: JobId, job_type: &str, status: JobStatus, at: DateTime<Utc>) -> Self {
        Self {
            id,
            job_type: job_type.to_owned(),
            queue: "default".to_owned(),
            resource_key: None,
            status,
            organization_id: None,
            priority: 0,
            attempts_used: 0,
            max_attempts: 5,
            timeout_seconds: 300,
            worker_id: None,
            next_run_at: at,
            lease_expires_at: None,
            created_at: at,
            finished_at: None,
            last_error_code: None,
            last_error_message: None,
            idempotency_key: None,
            workflow_run_id: None,
            payload: Value::Object(serde_json::Map::new()),
            progress: None,
            output: None,
            stage: JobStage::Queued,
            run_number: 1,
            checkpoint: None,
        }
    }
}

impl From<JobRecord> for JobRow {
    fn from(j: JobRecord) -> Self {
        Self {
            id: j.id,
            job_type: j.job_type,
            queue: j.queue,
            resource_key: j.resource_key,
            status: j.status,
            organization_id: j.organization_id,
            priority: j.priority,
            attempts_used: j.attempts_used,
            max_attempts: j.max_attempts,
            timeout_seconds: j.timeout_seconds,
            worker_id: j.worker_id,
            next_run_at: j.next_run_at,
            lease_expires_at: j.lease_expires_at,
            created_at: j.created_at,
            finished_at: j.finished_at,
            last_error_code: j.last_error_code,
            last_error_message: j.last_error_message,
            idempotency_key: j.idempotency_key,
            workflow_run_id: j.workflow_run_id,
            payload: j.payload,
            progress: j.progress,
            output: j.output,
            stage: j.stage,
            run_number: j.run_number,
            checkpoint: j.checkpoint,
        }
    }
}

/// One page of the queue.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct QueueData {
    pub(crate) jobs: Vec<JobRow>,
    pub(crate) next_cursor: Option<JobId>,
    /// Matching jobs, up to [`COUNT_CAP`].
    pub(crate) total: i64,
}

/// One line of a job's history (an attempt, an event, a dead letter or a log line).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistoryLine {
    pub(crate) at: DateTime<Utc>,
    pub(crate) attempt: Option<i32>,
    pub(crate) label: String,
    pub(crate) text: String,
}

/// A job with its history.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobDetailData {
    pub(crate) job: JobRow,
    pub(crate) attempts: Vec<HistoryLine>,
    pub(crate) events: Vec<HistoryLine>,
    pub(crate) dead_letters: Vec<HistoryLine>,
    pub(crate) logs: Vec<HistoryLine>,
    /// What holds a pending job, one line per rule (`explain_job`); empty otherwise.
    pub(crate) holds: Vec<String>,
}

fn or_dash(value: Option<&str>) -> &str {
    value.unwrap_or("-")
}

impl From<JobDetail> for JobDetailData {
    fn from(detail: JobDetail) -> Self {
        let attempts = detail
            .attempts
            .into_iter()
            .map(|a| HistoryLine {
                at: a.finished_at,
                attempt: Some(a.attempt),
                label: a.outcome.to_string(),
                text: match a.failure_kind {
                    Some(kind) => format!(
                        "{kind} {} {} (worker {}, {} ms)",
                        or_dash(a.error_code.as_deref()),
                        or_dash(a.error_message.as_deref()),
                        a.worker_id,
                        (a.finished_at - a.leased_at).num_milliseconds()
                    ),
                    None => format!(
                        "worker {}, {} ms",
                        a.worker_id,
                        (a.finished_at - a.leased_at).num_milliseconds()
                    ),
                },
            })
            .collect();
        let events = detail
            .events
            .into_iter()
            .map(|e| HistoryLine {
                at: e.created_at,
                attempt: e.attempt,
                label: e.event_type.to_string(),
                text: e.details.to_string(),
            })
            .collect();
        let dead_letters = detail
            .dead_letters
            .into_iter()
            .map(|d| HistoryLine {
                at: d.dead_lettered_at,
                attempt: Some(d.attempt),
                label: d.failure_kind.to_string(),
                text: format!(
                    "{} {}",
                    or_dash(d.error_code.as_deref()),
                    or_dash(d.error_message.as_deref())
                ),
            })
            .collect();
        let logs = detail
            .logs
            .into_iter()
            .map(|l| {
                let fields = match &l.fields {
                    Value::Object(map) if map.is_empty() => String::new(),
                    other => format!(" {other}"),
                };
                HistoryLine {
                    at: l.created_at,
                    attempt: l.attempt,
                    label: l.level.to_string(),
                    text: format!("{}{fields}", l.message),
                }
            })
            .collect();
        Self {
            job: detail.job.into(),
            attempts,
            events,
            dead_letters,
            logs,
            holds: Vec::new(),
        }
    }
}

/// A workflow run as the views show it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunRow {
    pub(crate) id: WorkflowRunId,
    pub(crate) workflow_type: String,
    pub(crate) status: WorkflowRunStatus,
    pub(crate) organization_id: Option<Uuid>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) finished_at: Option<DateTime<Utc>>,
    pub(crate) status_reason: Option<String>,
    /// (succeeded, failed, total) steps, when known.
    pub(crate) progress: Option<(i64, i64, i64)>,
    pub(crate) metadata: Value,
    pub(crate) result: Option<Value>,
}

impl From<WorkflowRunRecord> for RunRow {
    fn from(r: WorkflowRunRecord) -> Self {
        Self {
            id: r.id,
            workflow_type: r.workflow_type,
            status: r.status,
            organization_id: r.organization_id,
            created_at: r.created_at,
            finished_at: r.finished_at,
            status_reason: r.status_reason,
            progress: None,
            metadata: r.metadata,
            result: r.result,
        }
    }
}

/// One page of workflow runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct WorkflowsData {
    pub(crate) runs: Vec<RunRow>,
    pub(crate) total: i64,
    pub(crate) next_cursor: Option<WorkflowRunId>,
}

/// A step as the views show it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepRow {
    pub(crate) key: String,
    pub(crate) kind: String,
    pub(crate) status: WorkflowStepStatus,
    pub(crate) job_id: Option<JobId>,
    /// Prerequisite keys with their condition, the first of them on a large run.
    pub(crate) dependencies: Vec<(String, String)>,
    /// How many prerequisites in all.
    pub(crate) dependency_count: i64,
    pub(crate) error: Option<String>,
}

/// What a step runs, as the screens and the CLI show it: its job type, `external` for a gate,
/// `fan-out` for a fan-out step.
pub(crate) fn step_runs(step: &WorkflowStepRecord) -> String {
    match (step.kind, &step.job_type) {
        (WorkflowStepKind::External, _) => "external".to_owned(),
        (WorkflowStepKind::FanOut, _) => "fan-out".to_owned(),
        (_, job_type) => job_type.clone().unwrap_or_default(),
    }
}

/// Prerequisites named in a step's row before the rest are only counted: a fan-out has one per
/// child.
const PREREQUISITES_SHOWN: usize = 5;

/// A step's prerequisites as one cell: the first few, each written by `name` (key, condition),
/// joined by `separator`, then how many more; `-` for none.
pub(crate) fn prerequisites_cell(
    dependencies: &[(String, String)],
    total: i64,
    separator: &str,
    name: impl Fn(&str, &str) -> String,
) -> String {
    if dependencies.is_empty() {
        return "-".to_owned();
    }
    let shown: Vec<String> = dependencies
        .iter()
        .take(PREREQUISITES_SHOWN)
        .map(|(key, condition)| name(key, condition))
        .collect();
    let more = total - shown.len() as i64;
    let mut cell = shown.join(separator);
    if more > 0 {
        cell.push_str(&format!("{separator}+{more} more"));
    }
    cell
}

impl From<WorkflowStepRecord> for StepRow {
    fn from(s: WorkflowStepRecord) -> Self {
        let kind = step_runs(&s);
        Self {
            key: s.step_key,
            kind,
            status: s.status,
            job_id: s.job_id,
            dependencies: s.dependencies,
            dependency_count: s.dependency_count,
            error: s.last_error_code.or(s.status_reason),
        }
    }
}

/// A run and one page of its steps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkflowDetailData {
    pub(crate) run: RunRow,
    pub(crate) steps: Vec<StepRow>,
    /// The last step of a full page, where the next one starts.
    pub(crate) next_cursor: Option<WorkflowStepId>,
}

/// A job definition with its runtime config and schedules.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct DefinitionRow {
    pub(crate) job_type: String,
    pub(crate) enabled: bool,
    pub(crate) version: i32,
    pub(crate) max_attempts: i32,
    pub(crate) timeout_seconds: i32,
    pub(crate) priority: i32,
    pub(crate) retry_ms: (i64, i64),
    pub(crate) runtime_config: Option<Value>,
    /// Schedule names with their cron expression and whether they are active.
    pub(crate) schedules: Vec<(String, String, bool)>,
}

impl DefinitionRow {
    pub(crate) fn build(
        definition: JobDefinition,
        configs: &[JobRuntimeConfig],
        schedules: &[JobSchedule],
    ) -> Self {
        Self {
            runtime_config: configs
                .iter()
                .find(|c| c.job_type == definition.job_type)
                .map(|c| c.config.clone()),
            schedules: schedules
                .iter()
                .filter(|s| s.job_type == definition.job_type)
                .map(|s| {
                    // A schedule in another zone than UTC shows it: `0 9 * * * (Europe/Berlin)`.
                    let cron = if s.time_zone == "UTC" {
                        s.cron_expr.clone()
                    } else {
                        format!("{} ({})", s.cron_expr, s.time_zone)
                    };
                    (s.name.clone(), cron, s.is_active)
                })
                .collect(),
            job_type: definition.job_type,
            enabled: definition.is_enabled,
            version: definition.version,
            max_attempts: definition.max_attempts,
            timeout_seconds: definition.timeout_seconds,
            priority: definition.priority,
            retry_ms: (
                definition.retry_base_delay_ms,
                definition.retry_max_delay_ms,
            ),
        }
    }
}

/// What an id typed at the `:` prompt turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    Job(JobId),
    Workflow(WorkflowRunId),
    Nothing(Uuid),
}

/// The result of one fetch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Data {
    Dashboard(DashboardData),
    Queue(QueueData),
    Workflows(WorkflowsData),
    Definitions(Vec<DefinitionRow>),
    /// `None`: no such job.
    Job(Option<Box<JobDetailData>>),
    /// `None`: no such run.
    Workflow(Option<Box<WorkflowDetailData>>),
    Lookup(Found),
}

/// A successful fetch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    pub(crate) query: Query,
    pub(crate) data: Data,
    pub(crate) fetched_at: Instant,
    pub(crate) elapsed: Duration,
}

/// What the poller reports to the UI.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PollerEvent {
    Snapshot(Box<Snapshot>),
    /// A fetch failed or timed out; the poller retries after a backoff.
    Failed {
        error: String,
        attempt: u32,
    },
    /// SIGTERM or SIGHUP: leave cleanly.
    Quit,
}

/// What the UI asks of the poller besides a new query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    /// Fetch now, even when paused, and forget the error backoff.
    Refresh,
    /// Stop or resume the periodic refresh.
    SetPaused(bool),
}
