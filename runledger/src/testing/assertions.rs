//! Typed reads and assertions of what a test enqueued.

use std::fmt::Debug;

use sqlx::PgPool;

use super::error::TestingError;
use crate::engine::core::jobs::JobStatus;
use crate::engine::postgres::jobs::{
    JobListFilter, MAX_PAGE_SIZE, WorkflowRunListFilter, WorkflowRunRecord, list_jobs,
    list_workflow_runs,
};
use crate::{Job, Workflow};

/// The payloads of the `J` jobs waiting to run (`PENDING`, due or delayed; workflow steps
/// included once released), oldest first.
///
/// ```no_run
/// # use runledger::prelude::*;
/// # #[job] async fn send_email(to: String) -> Result<(), JobError> { Ok(()) }
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::testing::TestingError> {
/// SendEmail { to: "ada@example.com".into() }.enqueue(&pool).await?;
/// let waiting: Vec<SendEmail> = runledger::testing::enqueued::<SendEmail>(&pool).await?;
/// assert_eq!(waiting[0].to, "ada@example.com");
/// # Ok(()) }
/// ```
pub async fn enqueued<J: Job>(pool: &PgPool) -> Result<Vec<J>, TestingError> {
    let mut payloads = Vec::new();
    let mut filter = JobListFilter::new()
        .status(JobStatus::Pending)
        .job_type(J::NAME);
    filter.limit = MAX_PAGE_SIZE;
    loop {
        let page = list_jobs(pool, &filter).await?;
        for job in page.jobs {
            let payload =
                serde_json::from_value(job.payload).map_err(|e| TestingError::PayloadInvalid {
                    job_type: J::NAME.to_owned(),
                    message: e.to_string(),
                })?;
            payloads.push(payload);
        }
        match page.next_cursor {
            Some(cursor) => filter.after = Some(cursor),
            None => break,
        }
    }
    payloads.reverse();
    Ok(payloads)
}

/// Asserts that a `J` job whose payload satisfies `matches` is waiting to run; on failure the
/// panic message lists the `J` payloads that are waiting.
///
/// ```no_run
/// # use runledger::prelude::*;
/// # #[job] async fn send_email(to: String) -> Result<(), JobError> { Ok(()) }
/// # async fn demo(pool: sqlx::PgPool) {
/// runledger::testing::assert_enqueued::<SendEmail>(&pool, |job| job.to.ends_with("@example.com"))
///     .await;
/// # }
/// ```
#[track_caller]
pub fn assert_enqueued<'a, J: Job + Debug>(
    pool: &'a PgPool,
    matches: impl Fn(&J) -> bool + Send + 'a,
) -> impl Future<Output = ()> + Send + 'a {
    let caller = std::panic::Location::caller();
    async move {
        let waiting = match enqueued::<J>(pool).await {
            Ok(waiting) => waiting,
            Err(err) => panic!(
                "{caller}: reading the enqueued `{}` jobs failed: {err}",
                J::NAME
            ),
        };
        assert!(
            waiting.iter().any(&matches),
            "{caller}: no enqueued `{}` job matches; waiting: {waiting:#?}",
            J::NAME
        );
    }
}

/// The runs of workflow `W` (every status), oldest first.
///
/// ```no_run
/// # async fn demo<W: runledger::Workflow>(pool: sqlx::PgPool) -> Result<(), runledger::testing::TestingError> {
/// for run in runledger::testing::enqueued_workflows::<W>(&pool).await? {
///     println!("{} is {:?}", run.id, run.status);
/// }
/// # Ok(()) }
/// ```
pub async fn enqueued_workflows<W: Workflow>(
    pool: &PgPool,
) -> Result<Vec<WorkflowRunRecord>, TestingError> {
    let mut runs = Vec::new();
    let mut filter = WorkflowRunListFilter {
        workflow_type_contains: Some(W::NAME.to_owned()),
        limit: 1_000,
        ..WorkflowRunListFilter::default()
    };
    loop {
        let page = list_workflow_runs(pool, &filter).await?;
        let Some(last) = page.last().map(|run| run.id) else {
            break;
        };
        let full = i64::try_from(page.len()).is_ok_and(|len| len == filter.limit);
        runs.extend(page.into_iter().filter(|run| run.workflow_type == W::NAME));
        if !full {
            break;
        }
        filter.after = Some(last);
    }
    runs.reverse();
    Ok(runs)
}

/// Asserts that a run of workflow `W` satisfying `matches` exists; on failure the panic message
/// lists the runs of `W` with their status.
///
/// ```no_run
/// # async fn demo<W: runledger::Workflow>(pool: sqlx::PgPool) {
/// use runledger::engine::core::jobs::WorkflowRunStatus;
///
/// runledger::testing::assert_workflow_enqueued::<W>(&pool, |run| {
///     run.status == WorkflowRunStatus::Running
/// })
/// .await;
/// # }
/// ```
#[track_caller]
pub fn assert_workflow_enqueued<'a, W: Workflow>(
    pool: &'a PgPool,
    matches: impl Fn(&WorkflowRunRecord) -> bool + Send + 'a,
) -> impl Future<Output = ()> + Send + 'a {
    let caller = std::panic::Location::caller();
    async move {
        let runs = match enqueued_workflows::<W>(pool).await {
            Ok(runs) => runs,
            Err(err) => panic!("{caller}: reading the `{}` runs failed: {err}", W::NAME),
        };
        let seen: Vec<_> = runs.iter().map(|run| (run.id, run.status)).collect();
        assert!(
            runs.iter().any(&matches),
            "{caller}: no `{}` run matches; runs: {seen:?}",
            W::NAME
        );
    }
}
