//! Persisting outcomes: successes in batches (one lease-fenced statement per batch), failures
//! one by one, retried while the database is unreachable and the lease may still hold.
//!
//! One success PostgreSQL cannot store never costs the rest of its batch. Outputs are checked
//! in Rust before the statement (the same walk serialization does anyway), and a refused
//! output fails its own job with `job.output_invalid`. Should the batch statement still be
//! refused for anything but a lost connection, its rows are written one by one to isolate the
//! culprit: that path costs nothing while no row is bad.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Backoff, Finished, Inner, JobIds, PassOutcome, PassedJob};
use crate::core::jobs::limits::check_json;
use crate::core::jobs::{JobFailure, JobId, JobStatus};
use crate::postgres::Error;
use crate::postgres::jobs::{
    JobLease, JobSuccess, TenantScope, complete_job_failure, complete_jobs_success, get_job_by_id,
};
use crate::runtime::observer::{
    JobCompletionPersistFailedEvent, JobCompletionPersistenceOperation, JobFailedEvent,
    JobSucceededEvent, LifecycleEvent, ObservedJob,
};
use crate::runtime::tasks::TaskSpawner;

/// How a batch statement ended.
enum Written {
    /// Committed; the ids of the rows whose lease still held.
    Committed(HashSet<JobId, JobIds>),
    /// Refused for a reason other than a lost connection (a row PostgreSQL cannot take).
    Refused(Error),
    /// The database stayed unreachable until the lease ran out or the hard stop fired.
    GaveUp,
}

impl Inner {
    /// Collects finished handlers into batches and persists each batch in a task of the
    /// worker's tree, at most `flushes_in_flight` at once. A batch waits up to
    /// `completion_flush_interval` for company only while other jobs are running or waiting to
    /// start, or a claim is in flight.
    pub(super) async fn completer_loop(
        self: Arc<Self>,
        mut finished: mpsc::UnboundedReceiver<Finished>,
        tasks: TaskSpawner,
        hard_stop: CancellationToken,
    ) {
        let mut flushes = JoinSet::new();
        let mut open = true;
        while open {
            let Some(first) = finished.recv().await else {
                break;
            };
            let mut batch = vec![first];
            let deadline = tokio::time::Instant::now() + self.config.completion_flush_interval;
            while batch.len() < self.config.completion_batch_size {
                // With no job left running or waiting to start and no claim in flight, no
                // outcome can join the batch by waiting: it is written at once (a workflow's
                // next step is released that much sooner).
                let next = if self.outcomes_to_come.load(Ordering::SeqCst) == 0 {
                    match finished.try_recv() {
                        Ok(done) => Some(done),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => None,
                    }
                } else {
                    tokio::select! {
                        biased;
                        next = finished.recv() => next,
                        // The last job ended without an outcome, or a claim came back empty.
                        () = self.none_to_come.notified() => continue,
                        () = tokio::time::sleep_until(deadline) => break,
                    }
                };
                let Some(done) = next else {
                    open = false;
                    break;
                };
                batch.push(done);
            }
            while flushes.len() >= self.config.flushes_in_flight {
                let _ = flushes.join_next().await;
            }
            let (inner, hard_stop) = (Arc::clone(&self), hard_stop.clone());
            flushes.spawn(
                tasks.cancellable(
                    async move {
                        inner.persist_batch(batch, &hard_stop).await;
                    }
                    .in_current_span(),
                ),
            );
        }
        while flushes.join_next().await.is_some() {}
    }

    /// Commits a batch of outcomes: successes in one statement, continuations in another (only
    /// when the batch has any), failures one by one. Returns each job with what was recorded.
    pub(super) async fn persist_batch(
        &self,
        batch: Vec<Finished>,
        hard_stop: &CancellationToken,
    ) -> Vec<PassedJob> {
        let (continued, rest): (Vec<_>, Vec<_>) = batch.into_iter().partition(Finished::continues);
        let (successes, failures): (Vec<_>, Vec<_>) =
            rest.into_iter().partition(|done| done.outcome.is_ok());
        let mut passed = self.persist_successes(successes, hard_stop).await;
        let (continued, refused) = self.refuse_unstorable(continued, hard_stop).await;
        passed.extend(refused);
        passed.extend(self.persist_continuations(continued, hard_stop).await);
        for failure in failures {
            passed.push(self.persist_failure(failure, hard_stop).await);
        }
        passed
    }

    /// Fails the jobs whose outcome cannot be stored; returns the others and the failed ones.
    async fn refuse_unstorable(
        &self,
        batch: Vec<Finished>,
        hard_stop: &CancellationToken,
    ) -> (Vec<Finished>, Vec<PassedJob>) {
        let mut storable = Vec::with_capacity(batch.len());
        let mut refused = Vec::new();
        for done in batch {
            match unstorable_output(&done) {
                None => storable.push(done),
                Some(failure) => {
                    refused.push(self.persist_failure(done.failed(failure), hard_stop).await);
                }
            }
        }
        (storable, refused)
    }

    /// Commits a batch of successes in one statement. Outputs that cannot be stored fail their
    /// own jobs first; a statement refused for another reason than a lost connection is redone
    /// row by row. Returns each job with what was recorded.
    pub(super) async fn persist_successes(
        &self,
        batch: Vec<Finished>,
        hard_stop: &CancellationToken,
    ) -> Vec<PassedJob> {
        let (storable, mut persisted) = self.refuse_unstorable(batch, hard_stop).await;
        if storable.is_empty() {
            return persisted;
        }
        // One deadline for the batch, row-by-row retries included: past it the leases are gone.
        let give_up_at = Instant::now() + self.config.lease_ttl;
        match self.write_successes(&storable, give_up_at, hard_stop).await {
            (Written::Committed(completed), retried) => {
                for done in storable {
                    let ok = completed.contains(&done.job.job_id)
                        || (retried && self.already_succeeded(&done.job).await);
                    persisted.push(self.report_success(done, ok));
                }
            }
            (Written::GaveUp, _) => {
                for done in storable {
                    persisted.push(self.report_success(done, false));
                }
            }
            (Written::Refused(err), _) => {
                tracing::warn!(code = err.code(), error = %err.internal_message(), jobs = storable.len(), "a batch of successes was refused; writing them one by one");
                for done in storable {
                    persisted.push(
                        self.persist_success_alone(done, give_up_at, hard_stop)
                            .await,
                    );
                }
            }
        }
        persisted
    }

    /// Writes one success on its own; a value PostgreSQL refuses fails the job with
    /// `job.output_invalid` instead.
    async fn persist_success_alone(
        &self,
        done: Finished,
        give_up_at: Instant,
        hard_stop: &CancellationToken,
    ) -> PassedJob {
        match self
            .write_successes(std::slice::from_ref(&done), give_up_at, hard_stop)
            .await
        {
            (Written::Committed(completed), retried) => {
                let ok = completed.contains(&done.job.job_id)
                    || (retried && self.already_succeeded(&done.job).await);
                self.report_success(done, ok)
            }
            (Written::Refused(Error::Query(err)), _) if err.is_rejected_value() => {
                tracing::warn!(job.id = %done.job.job_id, error = %err.internal_message(), "PostgreSQL refused the output; failing the job");
                let failure = JobFailure::terminal(
                    "job.output_invalid",
                    "PostgreSQL refused to store the handler's output",
                );
                self.persist_failure(done.failed(failure), hard_stop).await
            }
            (Written::Refused(err), _) => {
                tracing::warn!(job.id = %done.job.job_id, code = err.code(), error = %err.internal_message(), "success not recorded");
                self.report_not_recorded(
                    done,
                    err.code(),
                    JobCompletionPersistenceOperation::Success,
                )
            }
            (Written::GaveUp, _) => self.report_success(done, false),
        }
    }

    /// Runs the batch statement, retrying while the database is unreachable until
    /// `give_up_at` (when the leases run out). Also tells whether it was retried (the first try
    /// may have committed unseen).
    async fn write_successes(
        &self,
        batch: &[Finished],
        give_up_at: Instant,
        hard_stop: &CancellationToken,
    ) -> (Written, bool) {
        let rows: Vec<JobSuccess> = batch
            .iter()
            .map(|done| {
                let completion = done.outcome.as_ref().ok();
                JobSuccess {
                    job_id: done.job.job_id,
                    attempt: done.job.attempt,
                    output: completion.and_then(|c| c.output.clone()),
                    progress: completion.and_then(|c| c.progress.clone()),
                }
            })
            .collect();
        let mut backoff = Backoff::default();
        let mut retried = false;
        loop {
            match complete_jobs_success(&self.pool, &self.config.worker_id, &rows).await {
                Ok(ids) => return (Written::Committed(ids.into_iter().collect()), retried),
                Err(err) if !is_transient(&err) => return (Written::Refused(err), retried),
                Err(err) => {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), jobs = rows.len(), "persisting successes failed; retrying");
                    if hard_stop.is_cancelled() || Instant::now() >= give_up_at {
                        return (Written::GaveUp, true);
                    }
                    retried = true;
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = hard_stop.cancelled() => {}
                    }
                }
            }
        }
    }

    /// Reports a success that was (or was not) committed.
    fn report_success(&self, done: Finished, committed: bool) -> PassedJob {
        if !committed {
            tracing::warn!(job.id = %done.job.job_id, "success not recorded: lease no longer held");
            return self.report_not_recorded(
                done,
                "job.lease_owner_mismatch",
                JobCompletionPersistenceOperation::Success,
            );
        }
        self.untrack(done.job.job_id);
        done.metrics.succeeded();
        self.observers.emit(|| {
            LifecycleEvent::Succeeded(JobSucceededEvent {
                job: done.job.clone(),
                duration: done.duration,
            })
        });
        PassedJob {
            job: done.job,
            outcome: PassOutcome::Succeeded,
        }
    }

    pub(super) fn report_not_recorded(
        &self,
        done: Finished,
        code: &str,
        operation: JobCompletionPersistenceOperation,
    ) -> PassedJob {
        self.untrack(done.job.job_id);
        self.observers.emit(|| {
            LifecycleEvent::PersistFailed(JobCompletionPersistFailedEvent {
                job: done.job.clone(),
                operation,
                error_code: code.to_owned(),
            })
        });
        PassedJob {
            job: done.job,
            outcome: PassOutcome::NotRecorded,
        }
    }

    async fn already_succeeded(&self, job: &ObservedJob) -> bool {
        matches!(
            get_job_by_id(&self.pool, job.job_id, TenantScope::Admin).await,
            Ok(Some(record)) if record.status == JobStatus::Succeeded && record.attempt == job.attempt
        )
    }

    /// Commits one failure. Returns the job with what was recorded.
    pub(super) async fn persist_failure(
        &self,
        done: Finished,
        hard_stop: &CancellationToken,
    ) -> PassedJob {
        let Err(failure) = &done.outcome else {
            return self.report_success(done, false);
        };
        let lease = JobLease {
            job_id: done.job.job_id,
            attempt: done.job.attempt,
            worker_id: &self.config.worker_id,
        };
        let give_up_at = Instant::now() + self.config.lease_ttl;
        let mut backoff = Backoff::default();
        let result = loop {
            match complete_job_failure(&self.pool, &lease, failure).await {
                Err(err)
                    if is_transient(&err)
                        && !hard_stop.is_cancelled()
                        && Instant::now() < give_up_at =>
                {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "persisting a failure failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = hard_stop.cancelled() => {}
                    }
                }
                other => break other,
            }
        };
        match result {
            Ok(disposition) => {
                tracing::info!(code = %failure.code, kind = %failure.kind, ?disposition, "job attempt failed");
                self.untrack(done.job.job_id);
                done.metrics.failed(&disposition);
                self.observers.emit(|| {
                    LifecycleEvent::Failed(JobFailedEvent {
                        job: done.job.clone(),
                        kind: failure.kind,
                        code: failure.code.clone(),
                        message: failure.message.clone(),
                        disposition,
                    })
                });
                PassedJob {
                    job: done.job,
                    outcome: PassOutcome::Failed {
                        kind: failure.kind,
                        code: failure.code.clone(),
                        message: failure.message.clone(),
                        disposition,
                    },
                }
            }
            Err(err) => {
                tracing::warn!(code = err.code(), error = %err.internal_message(), "failure not recorded");
                self.report_not_recorded(
                    done,
                    err.code(),
                    JobCompletionPersistenceOperation::Failure,
                )
            }
        }
    }
}

impl Finished {
    /// Whether the handler asked to continue the job.
    fn continues(&self) -> bool {
        self.outcome
            .as_ref()
            .is_ok_and(|completion| completion.continuation.is_some())
    }

    /// The same attempt, ended with `failure` instead.
    pub(super) fn failed(self, failure: JobFailure) -> Self {
        Self {
            outcome: Err(failure),
            ..self
        }
    }
}

/// The failure replacing a success whose output (or final progress, or checkpoint) PostgreSQL
/// could not store or a worker could not decode again, if so; and that replacing a
/// continuation that carries an output.
fn unstorable_output(done: &Finished) -> Option<JobFailure> {
    let completion = done.outcome.as_ref().ok()?;
    if let Some(continuation) = &completion.continuation {
        if completion.output.is_some() {
            return Some(JobFailure::terminal(
                "job.continuation_with_output",
                "a continuation carries no output; only the run that finishes returns one",
            ));
        }
        if let Some(problem) = continuation
            .checkpoint
            .as_ref()
            .and_then(|checkpoint| check_json(checkpoint).err())
        {
            return Some(JobFailure::terminal(
                "job.invalid_checkpoint",
                format!("the handler's checkpoint {problem}"),
            ));
        }
    }
    let progress = completion.progress.as_ref().or(completion
        .continuation
        .as_ref()
        .and_then(|c| c.progress.as_ref()));
    if let Some(progress) = progress {
        let refused = serde_json::to_value(progress)
            .map_err(|e| e.to_string())
            .and_then(|value| check_json(&value).map_err(|e| e.to_string()));
        if let Err(problem) = refused {
            tracing::warn!(job.id = %done.job.job_id, %problem, "the handler's final progress cannot be stored; failing the job");
            return Some(JobFailure::terminal(
                "job.invalid_progress",
                format!("the handler's final progress {problem}"),
            ));
        }
    }
    let output = completion.output.as_ref()?;
    let problem = check_json(output).err()?;
    tracing::warn!(job.id = %done.job.job_id, %problem, "the handler's output cannot be stored; failing the job");
    Some(JobFailure::terminal(
        "job.output_invalid",
        format!("the handler's output {problem}"),
    ))
}

/// Whether the statement failed for a passing reason rather than because of what it carried:
/// the database could not be reached or dropped the connection (SQLSTATE class 08, and class
/// 57 as a restarting server sends it), or a deadlock or serialization failure (class 40).
/// Worth retrying while the lease holds.
pub(super) fn is_transient(err: &Error) -> bool {
    let Error::Query(query) = err else {
        return false;
    };
    query.is_connection_error()
        || matches!(
            query.source_error(),
            sqlx::Error::Database(db) if db.code().is_some_and(|code| {
                ["08", "40", "57"].iter().any(|class| code.starts_with(class))
            })
        )
}
