//! Scoped handles on workflow runs: cheap status probes and waiting for the declared result.

use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::core::jobs::{WorkflowRunEnqueue, WorkflowRunId, WorkflowRunStatus};
use crate::postgres::error::Error;
use crate::postgres::jobs::workflows::{
    WORKFLOW_RUN_CHANNEL, WorkflowRunHandleScope, WorkflowRunRecord, enqueue_workflow_run,
    get_workflow_run,
};

/// How long [`WorkflowRunHandle::get_result`] waits by default.
pub const DEFAULT_RESULT_WAIT: Duration = Duration::from_secs(300);
/// How often a waiter re-reads the run when no notification arrives.
pub const DEFAULT_RESULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How to wait for a result.
///
/// ```
/// use std::time::Duration;
/// use runledger_engine::postgres::jobs::WorkflowRunWaitOptions;
///
/// let options = WorkflowRunWaitOptions { timeout: Some(Duration::from_secs(5)), ..Default::default() };
/// assert_eq!(WorkflowRunWaitOptions::default().timeout, Some(Duration::from_secs(300)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkflowRunWaitOptions {
    /// Longest wait; `None` waits until the run finishes, however long that is.
    pub timeout: Option<Duration>,
    /// Re-read interval when no notification arrives (notifications are the fast path;
    /// polling is the correctness path).
    pub poll_interval: Duration,
}

impl Default for WorkflowRunWaitOptions {
    fn default() -> Self {
        Self {
            timeout: Some(DEFAULT_RESULT_WAIT),
            poll_interval: DEFAULT_RESULT_POLL_INTERVAL,
        }
    }
}

/// Why a handle call failed. Each variant has a stable [`code`](Self::code).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowRunHandleError {
    /// The run declares no result step.
    #[error("the workflow declares no result step")]
    ResultNotDeclared,
    /// The run does not exist in the handle's scope.
    #[error("workflow run not found")]
    RunNotFound,
    /// The run succeeded but its result step stored no output.
    #[error("the workflow succeeded without a result")]
    ResultMissing,
    /// The run ended without succeeding.
    #[error("the workflow ended {status} without a result")]
    ResultUnsuccessfulTerminal {
        /// How it ended.
        status: WorkflowRunStatus,
    },
    /// The run was still going when the wait timed out.
    #[error("the workflow did not finish within the wait timeout")]
    ResultWaitTimeout,
    /// Reading the run failed.
    #[error("reading the workflow run failed")]
    Storage(Box<Error>),
}

impl WorkflowRunHandleError {
    /// Stable error code, e.g. `workflow.result_wait_timeout`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::ResultNotDeclared => "workflow.result_not_declared",
            Self::RunNotFound => "workflow.run_not_found",
            Self::ResultMissing => "workflow.result_missing",
            Self::ResultUnsuccessfulTerminal { .. } => "workflow.result_unsuccessful_terminal",
            Self::ResultWaitTimeout => "workflow.result_wait_timeout",
            Self::Storage(_) => "workflow.handle_storage_error",
        }
    }
}

impl From<Error> for WorkflowRunHandleError {
    fn from(err: Error) -> Self {
        match err {
            Error::WorkflowRunNotFound { .. } => Self::RunNotFound,
            other => Self::Storage(Box::new(other)),
        }
    }
}

impl From<sqlx::Error> for WorkflowRunHandleError {
    fn from(err: sqlx::Error) -> Self {
        Self::Storage(Box::new(Error::from(err)))
    }
}

/// A run seen through a scope: a run of another organization is simply not found.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, run: runledger_engine::core::jobs::WorkflowRunEnqueue<'_>)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use runledger_engine::postgres::jobs::enqueue_workflow_run_handle;
///
/// let handle = enqueue_workflow_run_handle(&pool, &run).await?;
/// let result = handle.get_result(Default::default()).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct WorkflowRunHandle {
    pool: PgPool,
    run_id: WorkflowRunId,
    scope: WorkflowRunHandleScope,
}

/// Enqueues a run (see [`enqueue_workflow_run`]) and returns a handle scoped to the run's
/// organization (or [`WorkflowRunHandleScope::Global`] for a run without one).
pub async fn enqueue_workflow_run_handle(
    pool: &PgPool,
    run: &WorkflowRunEnqueue<'_>,
) -> Result<WorkflowRunHandle, Error> {
    let enqueued = enqueue_workflow_run(pool, run).await?;
    let scope = match run.organization_id {
        Some(org) => WorkflowRunHandleScope::Organization(org),
        None => WorkflowRunHandleScope::Global,
    };
    Ok(WorkflowRunHandle::new(pool, enqueued.id, scope))
}

impl WorkflowRunHandle {
    /// A handle on `run_id` seen through `scope` (no database access until used).
    pub fn new(pool: &PgPool, run_id: WorkflowRunId, scope: WorkflowRunHandleScope) -> Self {
        Self {
            pool: pool.clone(),
            run_id,
            scope,
        }
    }

    /// The run's id.
    pub fn id(&self) -> WorkflowRunId {
        self.run_id
    }

    /// The run's current status.
    pub async fn get_status(&self) -> Result<WorkflowRunStatus, WorkflowRunHandleError> {
        Ok(self.get_run().await?.status)
    }

    /// The run's stored record.
    pub async fn get_run(&self) -> Result<WorkflowRunRecord, WorkflowRunHandleError> {
        get_workflow_run(&self.pool, self.run_id, self.scope)
            .await?
            .ok_or(WorkflowRunHandleError::RunNotFound)
    }

    /// Waits (per `options`) for the run to finish and returns the declared result step's
    /// output. Woken by a notification when the run finishes; re-reads every
    /// `poll_interval` regardless. Each waiter holds one LISTEN connection while it waits.
    pub async fn get_result(
        &self,
        options: WorkflowRunWaitOptions,
    ) -> Result<Value, WorkflowRunHandleError> {
        let run = self.wait(options, true).await?;
        match run.status {
            WorkflowRunStatus::Succeeded => run.result.ok_or(WorkflowRunHandleError::ResultMissing),
            status => Err(WorkflowRunHandleError::ResultUnsuccessfulTerminal { status }),
        }
    }

    /// Waits (per `options`) for the run to finish, whatever its outcome, and returns its final
    /// row; for runs without a declared result. Woken like [`get_result`](Self::get_result);
    /// fails with `workflow.result_wait_timeout` when `options.timeout` runs out.
    pub async fn wait_finished(
        &self,
        options: WorkflowRunWaitOptions,
    ) -> Result<WorkflowRunRecord, WorkflowRunHandleError> {
        self.wait(options, false).await
    }

    /// Re-reads the run until it is terminal; with `needs_result`, a run without a declared
    /// result fails at once with `ResultNotDeclared`.
    ///
    /// The whole wait takes one connection from the pool: the listener's, which also reads the
    /// run. It listens before its first read, so a finish in between is not missed. A read on a
    /// connection of its own just before the listener took one made the pool open a new
    /// connection whenever the first had not yet been handed back (sqlx gives connections back
    /// from a background task): 20 to 90 ms added to a wait that began right after an enqueue,
    /// as the bench's 1 -> 1,000 -> 1 workflow did.
    async fn wait(
        &self,
        options: WorkflowRunWaitOptions,
        needs_result: bool,
    ) -> Result<WorkflowRunRecord, WorkflowRunHandleError> {
        let deadline = options.timeout.map(|timeout| Instant::now() + timeout);
        let mut listener = self.listen().await;
        loop {
            let run = self.read_run(&mut listener).await?;
            if needs_result && run.result_step_key.is_none() {
                return Err(WorkflowRunHandleError::ResultNotDeclared);
            }
            if run.status.is_terminal() {
                return Ok(run);
            }
            let mut wait = options.poll_interval;
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(WorkflowRunHandleError::ResultWaitTimeout);
                }
                wait = wait.min(left);
            }
            self.wait_for_notification(&mut listener, wait).await;
        }
    }

    /// Reads the run on the listener's connection; when that fails (the connection broke), the
    /// wait polls on the pool from then on.
    async fn read_run(
        &self,
        listener: &mut Option<PgListener>,
    ) -> Result<WorkflowRunRecord, WorkflowRunHandleError> {
        if let Some(active) = listener.as_mut() {
            match get_workflow_run(&mut *active, self.run_id, self.scope).await {
                Ok(run) => return run.ok_or(WorkflowRunHandleError::RunNotFound),
                Err(_) => *listener = None,
            }
        }
        self.get_run().await
    }

    async fn listen(&self) -> Option<PgListener> {
        let mut listener = PgListener::connect_with(&self.pool).await.ok()?;
        listener.listen(WORKFLOW_RUN_CHANNEL).await.ok()?;
        Some(listener)
    }

    /// Returns when this run's notification arrives or `wait` elapses.
    async fn wait_for_notification(&self, listener: &mut Option<PgListener>, wait: Duration) {
        let Some(active) = listener.as_mut() else {
            tokio::time::sleep(wait).await;
            return;
        };
        let run_id = self.run_id.to_string();
        let ours = async {
            loop {
                match active.recv().await {
                    Ok(notification) if notification.payload() == run_id => return true,
                    Ok(_) => {}
                    Err(_) => return false,
                }
            }
        };
        if let Ok(false) = tokio::time::timeout(wait, ours).await {
            // The connection broke: poll from now on.
            *listener = None;
        }
    }
}
