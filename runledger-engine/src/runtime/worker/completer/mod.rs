//! The completer: receives finished handlers' outcomes on a channel and writes them in batches
//! (one lease-fenced statement per batch of successes, one per batch of continuations, failures
//! one by one), retried while the database is unreachable and the leases may still hold. Each
//! written outcome releases its lease and its room among the unwritten outcomes.
//!
//! One success PostgreSQL cannot store never costs the rest of its batch. Outputs are checked
//! in Rust before the statement (the same walk serialization does anyway), and a refused
//! output fails its own job with `job.output_invalid`. Should the batch statement still be
//! refused for anything but a lost connection, its rows are written one by one to isolate the
//! culprit: that path costs nothing while no row is bad.

mod continuations;
mod store;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub(super) use self::store::OutcomeStore;
use super::lease_table::{JobIds, LeaseTable};
use super::outcome::{ExpectedOutcomes, Finished};
use super::{Backoff, PassOutcome, PassedJob, WorkerConfig};
use crate::core::jobs::limits::check_json;
use crate::core::jobs::{JobFailure, JobId};
use crate::postgres::Error;
use crate::postgres::jobs::{JobLease, JobSuccess};
use crate::runtime::observer::{
    JobCompletionPersistFailedEvent, JobCompletionPersistenceOperation, JobFailedEvent,
    JobLifecycleObservers, JobSucceededEvent, LifecycleEvent,
};
use crate::runtime::tasks::TaskSpawner;

/// Writes outcomes to `S` in batches.
pub(super) struct Completer<S> {
    store: S,
    worker_id: String,
    lease_ttl: Duration,
    flush_interval: Duration,
    batch_size: usize,
    flushes_in_flight: usize,
    leases: Arc<LeaseTable>,
    observers: JobLifecycleObservers,
    expected: Arc<ExpectedOutcomes>,
}

/// How a batch statement ended.
enum Written {
    /// Committed; the ids of the rows whose lease still held.
    Committed(HashSet<JobId, JobIds>),
    /// Refused for a reason other than a lost connection (a row PostgreSQL cannot take).
    Refused(Error),
    /// The database stayed unreachable until the lease ran out or the hard stop fired.
    GaveUp,
}

/// A batch [`Completer::gather`] collected, and whether more may come.
pub(super) struct Gathered {
    pub(super) batch: Vec<Finished>,
    /// `false` once every sender is gone: this batch is the last.
    pub(super) open: bool,
}

impl<S: OutcomeStore> Completer<S> {
    /// A completer writing to `store` under `config`'s lease, batch and flush settings; it
    /// releases written jobs' leases from `leases` and waits for company only while `expected`
    /// counts outcomes to come.
    pub(super) fn new(
        store: S,
        config: &WorkerConfig,
        leases: Arc<LeaseTable>,
        observers: JobLifecycleObservers,
        expected: Arc<ExpectedOutcomes>,
    ) -> Self {
        Self {
            store,
            worker_id: config.worker_id.clone(),
            lease_ttl: config.lease_ttl,
            flush_interval: config.completion_flush_interval,
            batch_size: config.completion_batch_size,
            flushes_in_flight: config.flushes_in_flight,
            leases,
            observers,
            expected,
        }
    }

    /// Collects finished handlers into batches and writes each batch in a task of the worker's
    /// tree, at most `flushes_in_flight` at once, until every sender is gone and every batch
    /// is written.
    pub(super) async fn run(
        self: Arc<Self>,
        mut finished: mpsc::UnboundedReceiver<Finished>,
        tasks: TaskSpawner,
        hard_stop: CancellationToken,
    ) {
        let mut flushes = JoinSet::new();
        while let Some(Gathered { batch, open }) = self.gather(&mut finished).await {
            while flushes.len() >= self.flushes_in_flight {
                let _ = flushes.join_next().await;
            }
            let (completer, hard_stop) = (Arc::clone(&self), hard_stop.clone());
            flushes.spawn(
                tasks.cancellable(
                    async move {
                        completer.write(batch, &hard_stop).await;
                    }
                    .in_current_span(),
                ),
            );
            if !open {
                break;
            }
        }
        while flushes.join_next().await.is_some() {}
    }

    /// Waits for an outcome and gathers the batch it opens (`None` once every sender is gone).
    /// The batch waits up to the flush interval for company only while other jobs are running
    /// or waiting to start, or a claim is in flight; with none of them, no outcome can join it
    /// by waiting, and it is written at once (a workflow's next step is released that much
    /// sooner).
    pub(super) async fn gather(
        &self,
        finished: &mut mpsc::UnboundedReceiver<Finished>,
    ) -> Option<Gathered> {
        let first = finished.recv().await?;
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + self.flush_interval;
        while batch.len() < self.batch_size {
            let next = if self.expected.none() {
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
                    () = self.expected.none_left() => continue,
                    () = tokio::time::sleep_until(deadline) => break,
                }
            };
            let Some(done) = next else {
                return Some(Gathered { batch, open: false });
            };
            batch.push(done);
        }
        Some(Gathered { batch, open: true })
    }

    /// Commits a batch of outcomes: successes in one statement, continuations in another (only
    /// when the batch has any), failures one by one. Returns each job with what was recorded.
    pub(super) async fn write(
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
    async fn persist_successes(
        &self,
        batch: Vec<Finished>,
        hard_stop: &CancellationToken,
    ) -> Vec<PassedJob> {
        let (storable, mut persisted) = self.refuse_unstorable(batch, hard_stop).await;
        if storable.is_empty() {
            return persisted;
        }
        // One deadline for the batch, row-by-row retries included: past it the leases are gone.
        let give_up_at = Instant::now() + self.lease_ttl;
        match self.write_successes(&storable, give_up_at, hard_stop).await {
            (Written::Committed(completed), retried) => {
                for done in storable {
                    let ok = completed.contains(&done.job.job_id)
                        || (retried && self.already_succeeded(&done).await);
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
                    || (retried && self.already_succeeded(&done).await);
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
            match self.store.complete_successes(&self.worker_id, &rows).await {
                Ok(ids) => return (Written::Committed(ids.into_iter().collect()), retried),
                Err(err) if !err.is_transient() => return (Written::Refused(err), retried),
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
        self.leases.release(done.job.job_id);
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

    fn report_not_recorded(
        &self,
        done: Finished,
        code: &str,
        operation: JobCompletionPersistenceOperation,
    ) -> PassedJob {
        self.leases.release(done.job.job_id);
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

    async fn already_succeeded(&self, done: &Finished) -> bool {
        self.store
            .succeeded(done.job.job_id, done.job.attempt)
            .await
    }

    /// Commits one failure. Returns the job with what was recorded.
    async fn persist_failure(&self, done: Finished, hard_stop: &CancellationToken) -> PassedJob {
        let Err(failure) = &done.outcome else {
            return self.report_success(done, false);
        };
        let lease = JobLease {
            job_id: done.job.job_id,
            attempt: done.job.attempt,
            worker_id: &self.worker_id,
        };
        let give_up_at = Instant::now() + self.lease_ttl;
        let mut backoff = Backoff::default();
        let result = loop {
            match self.store.complete_failure(&lease, failure).await {
                Err(err)
                    if err.is_transient()
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
                self.leases.release(done.job.job_id);
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::core::jobs::JobCompletion;
    use crate::postgres::Result;
    use crate::postgres::jobs::{JobContinuationOutcome, JobContinued, JobFailureDisposition};
    use crate::runtime::config::JobsConfig;
    use crate::runtime::worker::testing::{finished, succeeded};

    /// A store that refuses every statement carrying `bad` (the batch as a whole for an unknown
    /// reason, the row alone as a value PostgreSQL cannot take), fails the first `outages`
    /// statements as unreachable, and records what it was sent.
    #[derive(Default)]
    struct FakeStore {
        bad: Option<JobId>,
        outages: Mutex<usize>,
        success_statements: Mutex<Vec<usize>>,
        failures: Mutex<Vec<(JobId, String)>>,
    }

    #[async_trait::async_trait]
    impl OutcomeStore for FakeStore {
        async fn complete_successes(&self, _: &str, rows: &[JobSuccess]) -> Result<Vec<JobId>> {
            self.success_statements.lock().unwrap().push(rows.len());
            {
                let mut outages = self.outages.lock().unwrap();
                if *outages > 0 {
                    *outages -= 1;
                    return Err(sqlx::Error::PoolTimedOut.into());
                }
            }
            if rows.iter().any(|row| Some(row.job_id) == self.bad) {
                return Err(if rows.len() == 1 {
                    sqlx::Error::Encode("refused".into()).into()
                } else {
                    sqlx::Error::RowNotFound.into()
                });
            }
            Ok(rows.iter().map(|row| row.job_id).collect())
        }

        async fn continue_jobs(
            &self,
            _: &str,
            rows: &[JobContinued],
        ) -> Result<Vec<(JobId, JobContinuationOutcome)>> {
            assert!(rows.is_empty(), "no continuation in these tests");
            Ok(Vec::new())
        }

        async fn complete_failure(
            &self,
            lease: &JobLease<'_>,
            failure: &JobFailure,
        ) -> Result<JobFailureDisposition> {
            self.failures
                .lock()
                .unwrap()
                .push((lease.job_id, failure.code.clone()));
            Ok(JobFailureDisposition::DeadLettered)
        }

        async fn succeeded(&self, _: JobId, _: i32) -> bool {
            false
        }
    }

    fn completer(store: FakeStore, flush_interval: Duration) -> Completer<FakeStore> {
        let mut config = WorkerConfig::from_jobs_config(&JobsConfig::default());
        config.completion_flush_interval = flush_interval;
        config.completion_batch_size = 3;
        Completer::new(
            store,
            &config,
            Arc::new(LeaseTable::default()),
            JobLifecycleObservers::new(),
            Arc::new(ExpectedOutcomes::default()),
        )
    }

    const AN_HOUR: Duration = Duration::from_secs(3_600);

    /// Fails the test instead of hanging when `future` waits for the flush interval.
    async fn promptly<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(60), future)
            .await
            .expect("waited for the flush interval")
    }

    #[tokio::test]
    async fn a_lone_success_is_written_at_once_whatever_the_flush_interval() {
        let completer = completer(FakeStore::default(), AN_HOUR);
        let (send, mut receive) = mpsc::unbounded_channel();
        send.send(succeeded()).unwrap();
        let gathered = promptly(completer.gather(&mut receive)).await.unwrap();
        assert_eq!(gathered.batch.len(), 1);
        assert!(gathered.open);
    }

    #[tokio::test]
    async fn a_batch_waits_for_the_outcome_of_a_job_still_running() {
        let completer = completer(FakeStore::default(), AN_HOUR);
        let running = completer.expected.expect();
        let (send, mut receive) = mpsc::unbounded_channel();
        send.send(succeeded()).unwrap();
        let late = send.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            late.send(succeeded()).unwrap();
            drop(running);
        });
        let gathered = promptly(completer.gather(&mut receive)).await.unwrap();
        assert_eq!(gathered.batch.len(), 2);
    }

    #[tokio::test]
    async fn a_batch_is_written_once_full_and_the_last_one_when_the_senders_are_gone() {
        let completer = completer(FakeStore::default(), AN_HOUR);
        let _claim_in_flight = completer.expected.expect();
        let (send, mut receive) = mpsc::unbounded_channel();
        for _ in 0..4 {
            send.send(succeeded()).unwrap();
        }
        drop(send);
        let full = promptly(completer.gather(&mut receive)).await.unwrap();
        assert_eq!((full.batch.len(), full.open), (3, true));
        let last = promptly(completer.gather(&mut receive)).await.unwrap();
        assert_eq!((last.batch.len(), last.open), (1, false));
        assert!(completer.gather(&mut receive).await.is_none());
    }

    #[tokio::test]
    async fn a_refused_batch_is_written_row_by_row_and_only_the_refused_output_fails() {
        let batch = vec![succeeded(), succeeded(), succeeded()];
        let bad = batch[1].job.job_id;
        let completer = completer(
            FakeStore {
                bad: Some(bad),
                ..FakeStore::default()
            },
            AN_HOUR,
        );
        for done in &batch {
            completer.leases.hold(done.job.job_id, done.job.attempt);
        }
        let passed = completer.write(batch, &CancellationToken::new()).await;
        assert_eq!(
            *completer.store.success_statements.lock().unwrap(),
            [3, 1, 1, 1]
        );
        let failed: Vec<JobId> = passed
            .iter()
            .filter(|done| matches!(done.outcome, PassOutcome::Failed { .. }))
            .map(|done| done.job.job_id)
            .collect();
        assert_eq!(failed, [bad]);
        assert_eq!(
            passed
                .iter()
                .filter(|done| done.outcome == PassOutcome::Succeeded)
                .count(),
            2
        );
        assert_eq!(
            *completer.store.failures.lock().unwrap(),
            [(bad, "job.output_invalid".to_owned())]
        );
        assert!(completer.leases.leases().is_empty());
    }

    #[tokio::test]
    async fn an_output_that_cannot_be_stored_fails_its_job_before_the_statement() {
        let completer = completer(FakeStore::default(), AN_HOUR);
        let mut deep = serde_json::json!(1);
        for _ in 0..200 {
            deep = serde_json::json!([deep]);
        }
        let unstorable = finished(Ok(JobCompletion::with_output(deep)));
        let id = unstorable.job.job_id;
        let passed = completer
            .write(vec![unstorable, succeeded()], &CancellationToken::new())
            .await;
        assert_eq!(*completer.store.success_statements.lock().unwrap(), [1]);
        assert_eq!(
            *completer.store.failures.lock().unwrap(),
            [(id, "job.output_invalid".to_owned())]
        );
        assert_eq!(passed.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_is_retried_while_the_database_is_unreachable() {
        let completer = completer(
            FakeStore {
                outages: Mutex::new(2),
                ..FakeStore::default()
            },
            AN_HOUR,
        );
        let passed = completer
            .write(vec![succeeded(), succeeded()], &CancellationToken::new())
            .await;
        assert_eq!(
            *completer.store.success_statements.lock().unwrap(),
            [2, 2, 2]
        );
        assert!(
            passed
                .iter()
                .all(|done| done.outcome == PassOutcome::Succeeded)
        );
    }
}
