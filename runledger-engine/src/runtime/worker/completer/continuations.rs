//! The completer's continuations: attempts whose handler asked to run the job again. A batch is
//! one lease-fenced statement (`continue_jobs`), kept apart from ordinary successes so that their
//! statement stays as it was.

use std::collections::HashMap;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::{Completer, OutcomeStore};
use crate::core::jobs::{JobFailure, JobId};
use crate::postgres::jobs::{JobContinuationOutcome, JobContinued};
use crate::runtime::observer::{
    JobCompletionPersistenceOperation, JobContinuedEvent, LifecycleEvent,
};
use crate::runtime::worker::outcome::Finished;
use crate::runtime::worker::{Backoff, PassOutcome, PassedJob};

impl<S: OutcomeStore> Completer<S> {
    /// Commits a batch of continuations in one statement (retried while the database is
    /// unreachable and the leases may hold). A workflow step that did not opt in fails with
    /// `workflow.continuation_not_allowed`.
    pub(super) async fn persist_continuations(
        &self,
        batch: Vec<Finished>,
        hard_stop: &CancellationToken,
    ) -> Vec<PassedJob> {
        let mut persisted = Vec::with_capacity(batch.len());
        if batch.is_empty() {
            return persisted;
        }
        let rows: Vec<JobContinued> = batch
            .iter()
            .filter_map(|done| {
                let continuation = done.outcome.as_ref().ok()?.continuation.clone()?;
                Some(JobContinued::new(
                    done.job.job_id,
                    done.job.attempt,
                    continuation,
                ))
            })
            .collect();
        let give_up_at = Instant::now() + self.lease_ttl;
        let mut backoff = Backoff::default();
        let written = loop {
            match self.store.continue_jobs(&self.worker_id, &rows).await {
                Err(err)
                    if err.is_transient()
                        && !hard_stop.is_cancelled()
                        && Instant::now() < give_up_at =>
                {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), jobs = rows.len(), "persisting continuations failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = hard_stop.cancelled() => {}
                    }
                }
                other => break other,
            }
        };
        let outcomes: HashMap<JobId, JobContinuationOutcome> = match written {
            Ok(outcomes) => outcomes.into_iter().collect(),
            Err(err) => {
                tracing::warn!(code = err.code(), error = %err.internal_message(), "continuations not recorded");
                for done in batch {
                    persisted.push(self.report_not_recorded(
                        done,
                        err.code(),
                        JobCompletionPersistenceOperation::Continuation,
                    ));
                }
                return persisted;
            }
        };
        for done in batch {
            match outcomes.get(&done.job.job_id).copied() {
                Some(JobContinuationOutcome::Continued {
                    run_number,
                    next_run_at,
                }) => persisted.push(self.report_continued(done, run_number, next_run_at)),
                Some(_) => {
                    let failure = JobFailure::terminal(
                        "workflow.continuation_not_allowed",
                        "this workflow step did not opt in to continuation",
                    );
                    persisted.push(self.persist_failure(done.failed(failure), hard_stop).await);
                }
                None => persisted.push(self.report_not_recorded(
                    done,
                    "job.lease_owner_mismatch",
                    JobCompletionPersistenceOperation::Continuation,
                )),
            }
        }
        persisted
    }

    fn report_continued(
        &self,
        done: Finished,
        run_number: i32,
        next_run_at: chrono::DateTime<chrono::Utc>,
    ) -> PassedJob {
        self.leases.release(done.job.job_id);
        self.observers.emit(|| {
            LifecycleEvent::Continued(JobContinuedEvent {
                job: done.job.clone(),
                duration: done.duration,
                run_number,
                next_run_at,
            })
        });
        PassedJob {
            job: done.job,
            outcome: PassOutcome::Continued {
                run_number,
                next_run_at,
            },
        }
    }
}
