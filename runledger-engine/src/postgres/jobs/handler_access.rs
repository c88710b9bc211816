//! What a running handler reaches of the database through its `JobContext`: progress fenced by
//! its lease, its prerequisites' outputs and appends to its own workflow run (the ports of
//! `core::jobs::handler`), and the storage of the lines it logs.

use std::sync::Arc;

use sqlx::PgPool;

use crate::core::jobs::{
    FanOutChild, FanOutPage, JobContext, JobContextError, JobId, JobLogLine, JobProgressSink,
    JobProgressUpdate, JobProgressWriter, JobServices, JobType, StepKey, StepOutputError,
    StepOutputReader, StepOutputs, WorkflowAppender, WorkflowRunId, WorkflowStepAppender,
    WorkflowStepEnqueue, WorkflowStepId,
};
use crate::postgres::{Error, ErrorCategory};

use super::{
    FanOutFill, JobLease, WorkflowAppend, WorkflowAppendOutcome, append_job_logs,
    append_workflow_steps, fill_fan_out, get_fan_out_outputs, get_prerequisite_outputs,
    update_job_progress,
};

/// Most log lines stored per statement.
const LOG_BATCH: usize = 1_000;

/// The [`JobServices`] of a worker: every context it attaches reads and writes through `pool`.
pub(crate) struct PgJobServices {
    pool: PgPool,
}

impl PgJobServices {
    pub(crate) fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

impl JobServices for PgJobServices {
    fn attach(&self, context: &mut JobContext) {
        context.progress_sink = Some(JobProgressSink(Arc::new(PgProgress {
            pool: self.pool.clone(),
            job_id: context.job_id,
            attempt: context.lifetime_attempt,
            worker_id: context.worker_id.clone(),
        })));
        if let Some(run_id) = context.workflow_run_id {
            context.workflow_appender = Some(WorkflowAppender(Arc::new(PgAppender {
                pool: self.pool.clone(),
                run_id,
                organization_id: context.organization_id,
                step_key: context.workflow_step_key.clone(),
            })));
        }
        if let Some(step_id) = context.workflow_step_id {
            context.step_outputs = Some(StepOutputs(Arc::new(PgStepOutputs {
                pool: self.pool.clone(),
                step_id,
            })));
        }
    }
}

fn context_error(err: &Error) -> JobContextError {
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

/// Appends steps to one run with `append_workflow_steps`, and fills its fan-outs on behalf of
/// step `step_key` with `fill_fan_out`.
struct PgAppender {
    pool: PgPool,
    run_id: WorkflowRunId,
    organization_id: Option<uuid::Uuid>,
    step_key: Option<String>,
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
        applied(append_workflow_steps(&self.pool, &append).await)
    }

    async fn fill_fan_out(
        &self,
        fan_out: &str,
        job_type: &str,
        children: &mut (dyn Iterator<Item = FanOutChild> + Send),
    ) -> Result<bool, JobContextError> {
        let Some(filled_by) = self.step_key.as_deref() else {
            return Err(JobContextError::not_a_workflow_step());
        };
        let fill = FanOutFill {
            workflow_run_id: self.run_id,
            organization_id: self.organization_id,
            filled_by: StepKey::new(filled_by),
            fan_out: StepKey::new(fan_out),
            job_type: JobType::new(job_type),
        };
        applied(
            fill_fan_out(&self.pool, &fill, children)
                .await
                .map(|(outcome, _)| outcome),
        )
    }
}

/// Whether a keyed change of a run was applied now (`false`: it had been before).
fn applied(outcome: Result<WorkflowAppendOutcome, Error>) -> Result<bool, JobContextError> {
    match outcome {
        Ok(WorkflowAppendOutcome::Applied) => Ok(true),
        Ok(_) => Ok(false),
        Err(e) => Err(context_error(&e)),
    }
}

/// Reads prerequisite outputs of one workflow step with `get_prerequisite_outputs`.
struct PgStepOutputs {
    pool: PgPool,
    step_id: WorkflowStepId,
}

#[async_trait::async_trait]
impl StepOutputReader for PgStepOutputs {
    async fn prerequisite_outputs(
        &self,
        step_keys: &[String],
    ) -> Result<Vec<Option<serde_json::Value>>, StepOutputError> {
        get_prerequisite_outputs(&self.pool, self.step_id, step_keys)
            .await
            .map_err(|err| context_error(&err))
    }

    async fn fan_out_outputs(
        &self,
        fan_out: &str,
        from: u64,
        limit: u64,
    ) -> Result<FanOutPage, StepOutputError> {
        get_fan_out_outputs(&self.pool, self.step_id, fan_out, from, limit)
            .await
            .map_err(|err| context_error(&err))
    }
}

/// Stores lines handlers logged, [`LOG_BATCH`] per statement. Logs are best effort: a batch the
/// database cannot reach is reported in tracing and dropped rather than retried forever.
/// `append_job_logs` makes every line storable, but should a batch still be refused for what it
/// carries, its lines are stored one by one so that only the refused line is lost.
pub(crate) async fn store_job_logs(pool: &PgPool, lines: &[JobLogLine]) {
    for batch in lines.chunks(LOG_BATCH) {
        match append_job_logs(pool, batch).await {
            Ok(_) => {}
            Err(err) if err.category() == ErrorCategory::Validation => {
                for line in batch {
                    if let Err(err) = append_job_logs(pool, std::slice::from_ref(line)).await {
                        tracing::warn!(code = err.code(), error = %err.internal_message(), job.id = %line.job_id, "a job log line was refused; dropped");
                    }
                }
            }
            Err(err) => {
                tracing::warn!(code = err.code(), error = %err.internal_message(), lines = batch.len(), "storing job log lines failed; dropped");
            }
        }
    }
}
