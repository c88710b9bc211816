//! The background poller: turns the UI's current [`Query`] into database reads and sends the
//! results (or the failure) back as events. The UI thread never waits on the database.

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use runledger_engine::core::jobs::{JobId, JobStatus, WorkflowRunId, WorkflowRunStatus};
use runledger_engine::postgres::jobs::{
    JobListFilter, TenantScope, WorkflowRunCountFilter, WorkflowRunListFilter, count_jobs,
    count_workflow_runs, explain_job, get_job_activity, get_job_by_id, get_job_detail,
    get_job_intent_metrics, get_job_metrics, get_workflow_run, list_job_definitions,
    list_job_runtime_configs, list_job_schedules, list_jobs, list_workflow_run_step_counts,
    list_workflow_runs, list_workflow_steps_page,
};
use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::model::{
    COUNT_CAP, Command, DashboardData, Data, DefinitionRow, Found, IntentTotals, JobDetailData,
    PollerEvent, Query, QueueData, QueueFilter, RunRow, Snapshot, ViewQuery, WorkflowDetailData,
    WorkflowFilter, WorkflowsData,
};

/// Longest wait between retries after errors.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Settings of the poller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PollerConfig {
    /// Pause between automatic refreshes.
    pub(crate) refresh: Duration,
    /// Longest a fetch may take before it counts as failed.
    pub(crate) fetch_timeout: Duration,
}

/// Fetches whenever the query changes, a command asks for it, or the refresh interval passes
/// (unless paused). Returns when the UI drops its ends of the channels.
pub(crate) async fn run(
    pool: PgPool,
    mut queries: watch::Receiver<Query>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: Sender<PollerEvent>,
    config: PollerConfig,
) {
    let mut paused = false;
    let mut failures: u32 = 0;
    let mut next_at = tokio::time::Instant::now();
    loop {
        tokio::select! {
            changed = queries.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            command = commands.recv() => match command {
                None => return,
                Some(Command::SetPaused(value)) => {
                    paused = value;
                    if paused {
                        continue;
                    }
                }
                Some(Command::Refresh) => failures = 0,
            },
            () = tokio::time::sleep_until(next_at), if !paused => {}
        }
        let query = queries.borrow_and_update().clone();
        let started = Instant::now();
        let result = tokio::time::timeout(config.fetch_timeout, fetch(&pool, &query)).await;
        let event = match result {
            Ok(Ok(data)) => {
                failures = 0;
                next_at = tokio::time::Instant::now() + config.refresh;
                PollerEvent::Snapshot(Box::new(Snapshot {
                    query,
                    data,
                    fetched_at: Instant::now(),
                    elapsed: started.elapsed(),
                }))
            }
            Ok(Err(error)) => failed(&mut failures, &mut next_at, config, error),
            Err(_) => failed(
                &mut failures,
                &mut next_at,
                config,
                format!("no answer within {} s", config.fetch_timeout.as_secs_f32()),
            ),
        };
        if events.send(event).is_err() {
            return;
        }
    }
}

fn failed(
    failures: &mut u32,
    next_at: &mut tokio::time::Instant,
    config: PollerConfig,
    error: String,
) -> PollerEvent {
    *failures = failures.saturating_add(1);
    let backoff = Duration::from_millis(250)
        .saturating_mul(1 << (*failures).min(5))
        .min(MAX_BACKOFF)
        .min(config.refresh.max(Duration::from_millis(250)));
    *next_at = tokio::time::Instant::now() + backoff;
    PollerEvent::Failed {
        error,
        attempt: *failures,
    }
}

/// A short, single-line description of a read error for the title bar.
fn describe(err: &runledger_engine::postgres::Error) -> String {
    let detail = err.internal_message();
    let first = detail.lines().next().unwrap_or_default();
    format!("{}: {first}", err.code())
}

async fn fetch(pool: &PgPool, query: &Query) -> Result<Data, String> {
    fetch_data(pool, query).await.map_err(|err| describe(&err))
}

fn job_filter(filter: &QueueFilter, organization: Option<Uuid>, limit: i64) -> JobListFilter {
    let mut list = JobListFilter::new().limit(limit);
    list.status = filter.status;
    list.job_type_contains.clone_from(&filter.type_contains);
    list.search.clone_from(&filter.search);
    list.workflow_run_id = filter.workflow_run;
    list.organization_id = organization;
    list
}

fn run_count_filter(
    status: Option<WorkflowRunStatus>,
    filter: &WorkflowFilter,
    organization: Option<Uuid>,
) -> WorkflowRunCountFilter {
    WorkflowRunCountFilter {
        status,
        workflow_type_contains: filter.type_contains.clone(),
        organization_id: organization,
    }
}

async fn fetch_data(
    pool: &PgPool,
    query: &Query,
) -> Result<Data, runledger_engine::postgres::Error> {
    let org = query.organization;
    // Detail views and lookups see what the lists see: one organization with `--org`,
    // everything otherwise.
    let scope = org.map_or(TenantScope::Admin, TenantScope::Organization);
    Ok(match &query.view {
        ViewQuery::Dashboard => {
            let metrics = get_job_metrics(pool, org).await?;
            let intents = IntentTotals::sum(&get_job_intent_metrics(pool, org).await?);
            let none = WorkflowFilter::default();
            let count = |status| run_count_filter(Some(status), &none, org);
            let activity = get_job_activity(pool, org).await?;
            Data::Dashboard(DashboardData {
                activity: activity.into_iter().map(Into::into).collect(),
                metrics: metrics.into_iter().map(Into::into).collect(),
                runs_running: count_workflow_runs(pool, &count(WorkflowRunStatus::Running)).await?,
                runs_waiting: count_workflow_runs(
                    pool,
                    &count(WorkflowRunStatus::WaitingForExternal),
                )
                .await?,
                runs_with_errors: count_workflow_runs(
                    pool,
                    &count(WorkflowRunStatus::CompletedWithErrors),
                )
                .await?,
                intents,
            })
        }
        ViewQuery::Queue { filter, after } => {
            let mut list = job_filter(filter, org, query.limit);
            list.after = *after;
            let page = list_jobs(pool, &list).await?;
            let total = count_jobs(pool, &list, Some(COUNT_CAP)).await?;
            Data::Queue(QueueData {
                next_cursor: page.next_cursor,
                jobs: page.jobs.into_iter().map(Into::into).collect(),
                total,
            })
        }
        ViewQuery::Workflows { filter, after } => {
            let list = WorkflowRunListFilter {
                status: filter.status,
                workflow_type_contains: filter.type_contains.clone(),
                organization_id: org,
                after: *after,
                limit: query.limit,
            };
            let runs = list_workflow_runs(pool, &list).await?;
            let total =
                count_workflow_runs(pool, &run_count_filter(filter.status, filter, org)).await?;
            let ids: Vec<WorkflowRunId> = runs.iter().map(|run| run.id).collect();
            let progress = list_workflow_run_step_counts(pool, &ids).await?;
            let next_cursor = if runs.len() as i64 >= query.limit {
                runs.last().map(|run| run.id)
            } else {
                None
            };
            let runs = runs
                .into_iter()
                .map(|run| {
                    let mut row = RunRow::from(run);
                    row.progress = progress
                        .iter()
                        .find(|counts| counts.run_id == row.id)
                        .map(|c| (c.succeeded, c.failed, c.total));
                    row
                })
                .collect();
            Data::Workflows(WorkflowsData {
                runs,
                total,
                next_cursor,
            })
        }
        ViewQuery::Definitions => {
            let definitions = list_job_definitions(pool).await?;
            let configs = list_job_runtime_configs(pool).await?;
            let schedules = list_job_schedules(pool).await?;
            Data::Definitions(
                definitions
                    .into_iter()
                    .map(|d| DefinitionRow::build(d, &configs, &schedules))
                    .collect(),
            )
        }
        ViewQuery::Job(id) => match get_job_detail(pool, *id, scope).await? {
            Some(detail) => {
                let pending = detail.job.status == JobStatus::Pending;
                let mut data = JobDetailData::from(detail);
                if pending && let Some(explanation) = explain_job(pool, *id, scope).await? {
                    data.holds = explanation.holds.iter().map(ToString::to_string).collect();
                }
                Data::Job(Some(Box::new(data)))
            }
            None => Data::Job(None),
        },
        ViewQuery::Workflow { id, after } => match get_workflow_run(pool, *id, scope).await? {
            Some(run) => {
                let steps = list_workflow_steps_page(pool, *id, scope, *after, query.limit).await?;
                let counts = list_workflow_run_step_counts(pool, &[*id]).await?;
                let next_cursor = if steps.len() as i64 >= query.limit {
                    steps.last().map(|step| step.id)
                } else {
                    None
                };
                let mut run = RunRow::from(run);
                run.progress = counts.first().map(|c| (c.succeeded, c.failed, c.total));
                Data::Workflow(Some(Box::new(WorkflowDetailData {
                    run,
                    steps: steps.into_iter().map(Into::into).collect(),
                    next_cursor,
                })))
            }
            None => Data::Workflow(None),
        },
        ViewQuery::Lookup(id) => {
            let found = if get_job_by_id(pool, JobId(*id), scope).await?.is_some() {
                Found::Job(JobId(*id))
            } else if get_workflow_run(pool, WorkflowRunId(*id), scope)
                .await?
                .is_some()
            {
                Found::Workflow(WorkflowRunId(*id))
            } else {
                Found::Nothing(*id)
            };
            Data::Lookup(found)
        }
    })
}
