//! The executor: runs one claimed job's handler in the job's own task, under the job's timeout,
//! stopped when the lease is lost or the shutdown's hard stop fires, with panics contained.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::lease_table::LeaseTable;
use super::outcome::Finished;
use crate::core::jobs::{JobFailure, JobFailureKind, JobLogSink, JobServices};
use crate::core::trace::set_span_parent;
use crate::postgres::jobs::ClaimedJob;
use crate::runtime::metrics::WorkerMetrics;
use crate::runtime::observer::{
    JobLeaseLostEvent, JobLifecycleObservers, JobRunningEvent, LifecycleEvent, ObservedJob,
};
use crate::runtime::registry::{JobHandler, JobRegistry};

/// How a handler run ended.
enum Outcome {
    Success(crate::core::jobs::JobCompletion),
    Failure(JobFailure),
    LeaseLost,
    Aborted,
}

/// Runs handlers: finds each job's handler in the registry, gives its context the worker's
/// services and log sink, and notes in the lease table while it runs.
pub(super) struct Executor {
    pub(super) registry: Arc<JobRegistry>,
    pub(super) services: Arc<dyn JobServices>,
    pub(super) logs: JobLogSink,
    pub(super) observers: JobLifecycleObservers,
    pub(super) metrics: Arc<WorkerMetrics>,
    pub(super) leases: Arc<LeaseTable>,
}

impl Executor {
    /// Runs one handler to its end. Returns what must be persisted, or `None` when the lease
    /// was lost or the run was aborted (both already reported, and the lease released).
    pub(super) async fn execute(
        &self,
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
        self.leases.set_running(job_id, true);
        let outcome = match self.registry.get(&job.job_type) {
            Some(handler) => {
                self.run_handler(Arc::clone(handler), job, &lost, &hard_stop)
                    .await
            }
            // Only registered types are claimed; a missing handler means the registry changed.
            None => Outcome::Failure(JobFailure::terminal(
                "job.handler_not_registered",
                "no handler is registered for this job type",
            )),
        };
        let duration = started.elapsed();
        self.leases.set_running(job_id, false);
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
                self.leases.release(job_id);
                tracing::warn!("lease lost; handler stopped");
                self.observers
                    .emit(|| LifecycleEvent::LeaseLost(JobLeaseLostEvent { job: observed }));
                return None;
            }
            Outcome::Aborted => {
                self.leases.abort(job_id);
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

    /// Runs the handler under the job's timeout, and stops it when the lease is lost or the
    /// shutdown's hard stop fires.
    async fn run_handler(
        &self,
        handler: Arc<dyn JobHandler>,
        job: ClaimedJob,
        lost: &CancellationToken,
        hard_stop: &CancellationToken,
    ) -> Outcome {
        let mut context = job.context();
        context.log_sink = Some(self.logs.clone());
        self.services.attach(&mut context);
        let cancellation = context.cancellation.clone();
        let timeout = Duration::from_secs(u64::try_from(job.timeout_seconds).unwrap_or(1));
        // The handler runs inside this job's task; catching the unwind keeps a panic to this
        // job, and dropping the future (timeout, lost lease, hard stop) cancels it.
        let run = AssertUnwindSafe(handler.execute(context, job.payload)).catch_unwind();
        // Abandoning the attempt (timeout, lost lease, hard stop) fires the context's
        // cancellation token for whatever the handler started beyond its own future, then drops
        // that future.
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

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        format!("handler panicked: {message}")
    } else if let Some(message) = payload.downcast_ref::<String>() {
        format!("handler panicked: {message}")
    } else {
        "handler panicked".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::core::jobs::{JobCompletion, JobContext, JobLogLine, JobLogWriter, JobType};
    use crate::runtime::worker::testing::{claimed_job, metrics};

    /// No database behind the context.
    struct NoServices;

    impl JobServices for NoServices {
        fn attach(&self, _: &mut JobContext) {}
    }

    struct NoLogs;

    impl JobLogWriter for NoLogs {
        fn write(&self, _: JobLogLine) {}
    }

    /// A handler of `test.job` that panics, sleeps past any timeout (noting whether its
    /// cancellation token fired when it is dropped) or succeeds, as its payload says.
    struct Handler;

    #[async_trait::async_trait]
    impl JobHandler for Handler {
        fn job_type(&self) -> JobType<'static> {
            JobType::new("test.job")
        }

        async fn execute(
            &self,
            context: JobContext,
            payload: Value,
        ) -> Result<JobCompletion, JobFailure> {
            match payload["do"].as_str() {
                Some("panic") => panic!("the payload said so"),
                Some("hang") => {
                    context.cancellation.cancelled().await;
                    Ok(JobCompletion::success())
                }
                _ => Ok(JobCompletion::success()),
            }
        }
    }

    fn executor() -> (Executor, Arc<LeaseTable>) {
        let mut registry = JobRegistry::new();
        registry.register(Handler).unwrap();
        let leases = Arc::new(LeaseTable::default());
        let executor = Executor {
            registry: Arc::new(registry),
            services: Arc::new(NoServices),
            logs: JobLogSink(Arc::new(NoLogs)),
            observers: JobLifecycleObservers::new(),
            metrics: metrics(),
            leases: Arc::clone(&leases),
        };
        (executor, leases)
    }

    fn job(action: &str, timeout_seconds: i32) -> ClaimedJob {
        let mut job = claimed_job("test.job", timeout_seconds);
        job.payload = serde_json::json!({ "do": action });
        job
    }

    #[tokio::test]
    async fn a_panicking_handler_fails_its_own_job_as_panicked() {
        let (executor, leases) = executor();
        let job = job("panic", 30);
        let id = job.id;
        leases.hold(id, 1);
        let never = CancellationToken::new();
        let finished = executor.execute(job, never.clone(), never).await.unwrap();
        let failure = finished.outcome.unwrap_err();
        assert_eq!(failure.kind, JobFailureKind::Panicked);
        assert_eq!(failure.code, "job.panicked");
        assert!(failure.message.contains("the payload said so"));
        // Its lease is held until the completer writes the failure.
        assert_eq!(leases.leases(), vec![(id, 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_past_its_timeout_fails_as_timed_out_and_its_token_fires() {
        let (executor, leases) = executor();
        let job = job("hang", 2);
        leases.hold(job.id, 1);
        let never = CancellationToken::new();
        let finished = executor.execute(job, never.clone(), never).await.unwrap();
        let failure = finished.outcome.unwrap_err();
        assert_eq!(failure.kind, JobFailureKind::Timeout);
        assert_eq!(failure.code, "job.timeout");
        assert_eq!(failure.message, "the handler ran longer than 2 s");
    }

    #[tokio::test]
    async fn a_lost_lease_stops_the_handler_and_nothing_is_left_to_write() {
        let (executor, leases) = executor();
        let job = job("hang", 3_600);
        let lost = leases.hold(job.id, 1);
        lost.cancel();
        let never = CancellationToken::new();
        assert!(executor.execute(job, lost, never).await.is_none());
        assert!(leases.leases().is_empty());
        assert!(leases.take_aborted().is_empty());
    }

    #[tokio::test]
    async fn the_hard_stop_drops_the_handler_and_reports_its_job_aborted() {
        let (executor, leases) = executor();
        let job = job("hang", 3_600);
        let id = job.id;
        let lost = leases.hold(id, 1);
        let hard_stop = CancellationToken::new();
        hard_stop.cancel();
        assert!(executor.execute(job, lost, hard_stop).await.is_none());
        assert!(leases.leases().is_empty());
        assert_eq!(leases.take_aborted(), vec![id]);
    }

    #[tokio::test]
    async fn a_job_whose_handler_is_gone_fails_terminally() {
        let (executor, _) = executor();
        let never = CancellationToken::new();
        let finished = executor
            .execute(claimed_job("test.unknown", 30), never.clone(), never)
            .await
            .unwrap();
        let failure = finished.outcome.unwrap_err();
        assert_eq!(failure.kind, JobFailureKind::Terminal);
        assert_eq!(failure.code, "job.handler_not_registered");
    }
}
