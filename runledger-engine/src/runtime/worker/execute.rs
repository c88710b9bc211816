//! Running one claimed job: its handler in its own task, under the job's timeout, stopped when
//! the lease is lost or the shutdown's hard stop fires, with panics contained.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Finished, Inner, lock};
use crate::core::jobs::{
    JobCompletion, JobFailure, JobFailureKind, JobLogSink, JobLogWriter, StepOutputError,
    StepOutputReader, StepOutputs, WorkflowStepId,
};
use crate::core::trace::set_span_parent;
use crate::postgres::jobs::{ClaimedJob, get_prerequisite_output};
use crate::runtime::observer::{JobLeaseLostEvent, JobRunningEvent, LifecycleEvent, ObservedJob};
use crate::runtime::registry::JobHandler;

/// How a handler run ended.
enum Outcome {
    Success(JobCompletion),
    Failure(JobFailure),
    LeaseLost,
    Aborted,
}

impl Inner {
    /// Runs one handler to its end. Returns what must be persisted, or `None` when the lease
    /// was lost or the run was aborted (both already reported).
    pub(super) async fn execute(
        self: &Arc<Self>,
        job: ClaimedJob,
        lost: CancellationToken,
        hard_stop: CancellationToken,
    ) -> Option<Finished> {
        let observed = ObservedJob::from_claimed(&job);
        self.observers.emit(|| {
            LifecycleEvent::Running(JobRunningEvent {
                job: observed.clone(),
            })
        });
        let metrics = self.metrics.job(&job.job_type, &job.queue);
        metrics.started(&job);
        let started = Instant::now();
        let job_id = job.id;
        self.set_running(job_id, true);
        let outcome = match self.registry.get(&job.job_type) {
            Some(handler) => {
                let logs = JobLogSink(Arc::clone(&self.logs) as Arc<dyn JobLogWriter>);
                run_handler(
                    Arc::clone(handler),
                    job,
                    &self.pool,
                    logs,
                    &lost,
                    &hard_stop,
                )
                .await
            }
            // Only registered types are claimed; a missing handler means the registry changed.
            None => Outcome::Failure(JobFailure::terminal(
                "job.handler_not_registered",
                "no handler is registered for this job type",
            )),
        };
        let duration = started.elapsed();
        self.set_running(job_id, false);
        let outcome = match outcome {
            Outcome::Success(completion) => {
                metrics.finished(true, duration);
                Ok(completion)
            }
            Outcome::Failure(failure) => {
                metrics.finished(false, duration);
                Err(failure)
            }
            Outcome::LeaseLost => {
                self.untrack(observed.job_id);
                tracing::warn!("lease lost; handler stopped");
                self.observers
                    .emit(|| LifecycleEvent::LeaseLost(JobLeaseLostEvent { job: observed }));
                return None;
            }
            Outcome::Aborted => {
                self.untrack(observed.job_id);
                lock(&self.aborted).push(observed.job_id);
                return None;
            }
        };
        Some(Finished {
            job: observed,
            metrics,
            outcome,
            duration,
            permit: None,
        })
    }
}

/// The span a job's handler runs in: the job, its attempt and, for a workflow step, its run and
/// step. Its parent is the trace context stored with the job, when there is one and a
/// [propagator](crate::core::trace) is installed; otherwise the worker's span.
pub(super) fn job_span(job: &ClaimedJob) -> tracing::Span {
    let span = tracing::info_span!(
        "runledger.job",
        job.id = %job.id,
        job.r#type = %job.job_type,
        job.attempt = job.attempt_number,
        workflow.run_id = job.workflow_run_id.map(tracing::field::display),
        workflow.step_id = job.workflow_step_id.map(tracing::field::display),
        workflow.step_key = job.workflow_step_key.as_deref(),
    );
    if let Some(context) = &job.trace_context {
        set_span_parent(&span, context);
    }
    span
}

/// Runs the handler under the job's timeout, and stops it when the lease is lost or the
/// shutdown's hard stop fires.
async fn run_handler(
    handler: Arc<dyn JobHandler>,
    job: ClaimedJob,
    pool: &PgPool,
    logs: JobLogSink,
    lost: &CancellationToken,
    hard_stop: &CancellationToken,
) -> Outcome {
    let mut context = job.context();
    context.log_sink = Some(logs);
    crate::runtime::job_services::attach(&mut context, &job, pool);
    let cancellation = context.cancellation.clone();
    if let Some(step_id) = job.workflow_step_id {
        context.step_outputs = Some(StepOutputs(Arc::new(PgStepOutputs {
            pool: pool.clone(),
            step_id,
        })));
    }
    let timeout = Duration::from_secs(u64::try_from(job.timeout_seconds).unwrap_or(1));
    // The handler runs inside this job's task; catching the unwind keeps a panic to this job,
    // and dropping the future (timeout, lost lease, hard stop) cancels it.
    let run = AssertUnwindSafe(handler.execute(context, job.payload)).catch_unwind();
    // Abandoning the attempt (timeout, lost lease, hard stop) fires the context's cancellation
    // token for whatever the handler started beyond its own future, then drops that future.
    tokio::select! {
        finished = tokio::time::timeout(timeout, run) => match finished {
            Err(_) => {
                cancellation.cancel();
                Outcome::Failure(JobFailure::new(
                    JobFailureKind::Timeout,
                    "job.timeout",
                    format!("the handler ran longer than {} s", timeout.as_secs()),
                ))
            }
            Ok(Ok(Ok(completion))) => Outcome::Success(completion),
            Ok(Ok(Err(failure))) => Outcome::Failure(failure),
            Ok(Err(panic)) => {
                let message = panic_message(panic.as_ref());
                tracing::error!(%message, "job handler panicked");
                Outcome::Failure(JobFailure::new(JobFailureKind::Panicked, "job.panicked", message))
            }
        },
        () = lost.cancelled() => {
            cancellation.cancel();
            Outcome::LeaseLost
        }
        () = hard_stop.cancelled() => {
            cancellation.cancel();
            Outcome::Aborted
        }
    }
}

/// Reads prerequisite outputs of one workflow step from the database.
struct PgStepOutputs {
    pool: PgPool,
    step_id: WorkflowStepId,
}

#[async_trait::async_trait]
impl StepOutputReader for PgStepOutputs {
    async fn prerequisite_output(
        &self,
        step_key: &str,
    ) -> Result<Option<serde_json::Value>, StepOutputError> {
        get_prerequisite_output(&self.pool, self.step_id, step_key)
            .await
            .map_err(|err| StepOutputError {
                code: err.code(),
                message: err.to_string(),
            })
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        format!("handler panicked: {message}")
    } else if let Some(message) = payload.downcast_ref::<String>() {
        format!("handler panicked: {message}")
    } else {
        "handler panicked".to_owned()
    }
}
