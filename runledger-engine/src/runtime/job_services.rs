//! What the runtime gives a running handler through its context besides the payload: progress
//! stored on the job (fenced by the lease) and appends to its own workflow run.

use std::sync::Arc;

use sqlx::PgPool;

use crate::core::jobs::{
    JobContext, JobContextError, JobId, JobProgressSink, JobProgressUpdate, JobProgressWriter,
    WorkflowAppender, WorkflowRunId, WorkflowStepAppender, WorkflowStepEnqueue,
};
use crate::postgres::jobs::{
    ClaimedJob, JobLease, WorkflowAppend, WorkflowAppendOutcome, append_workflow_steps,
    update_job_progress,
};

/// Gives `context` the progress sink of `job` and, for a workflow step, the appender of its run.
pub(crate) fn attach(context: &mut JobContext, job: &ClaimedJob, pool: &PgPool) {
    context.progress_sink = Some(JobProgressSink(Arc::new(PgProgress {
        pool: pool.clone(),
        job_id: job.id,
        attempt: job.attempt,
        worker_id: job.worker_id.clone(),
    })));
    if let Some(run_id) = job.workflow_run_id {
        context.workflow_appender = Some(WorkflowAppender(Arc::new(PgAppender {
            pool: pool.clone(),
            run_id,
            organization_id: job.organization_id,
        })));
    }
}

fn context_error(err: &crate::postgres::Error) -> JobContextError {
    JobContextError {
        code: err.code(),
        message: err.to_string(),
    }
}

/// Writes progress with `update_job_progress`, presenting the attempt's lease.
struct PgProgress {
    pool: PgPool,
    job_id: JobId,
    attempt: i32,
    worker_id: String,
}

#[async_trait::async_trait]
impl JobProgressWriter for PgProgress {
    async fn write_progress(&self, update: &JobProgressUpdate) -> Result<(), JobContextError> {
        let lease = JobLease {
            job_id: self.job_id,
            attempt: self.attempt,
            worker_id: &self.worker_id,
        };
        update_job_progress(&self.pool, &lease, update)
            .await
            .map_err(|e| context_error(&e))
    }
}

/// Appends steps to one run with `append_workflow_steps`.
struct PgAppender {
    pool: PgPool,
    run_id: WorkflowRunId,
    organization_id: Option<uuid::Uuid>,
}

#[async_trait::async_trait]
impl WorkflowStepAppender for PgAppender {
    async fn append_steps(
        &self,
        mutation_key: &str,
        steps: Vec<WorkflowStepEnqueue<'static>>,
    ) -> Result<bool, JobContextError> {
        let append = WorkflowAppend {
            workflow_run_id: self.run_id,
            organization_id: self.organization_id,
            mutation_key,
            steps,
        };
        match append_workflow_steps(&self.pool, &append).await {
            Ok(WorkflowAppendOutcome::Applied) => Ok(true),
            Ok(_) => Ok(false),
            Err(e) => Err(context_error(&e)),
        }
    }
}
