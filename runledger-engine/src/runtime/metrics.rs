//! The worker's metric handles, taken once per job type and queue (the first time the worker
//! meets the pair) and kept, so that recording an event is an atomic update. The names are in
//! [`crate::core::metrics`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use metrics::{Counter, Histogram, Label, counter, histogram};

use crate::core::metrics::{
    CLAIM_BATCH_SIZE, JOB_DURATION_SECONDS, JOB_PICKUP_LATENCY_SECONDS, JOBS_DEAD_LETTERED,
    JOBS_FAILED, JOBS_RETRIED, JOBS_STARTED, JOBS_SUCCEEDED, LABEL_OUTCOME, job_labels,
};
use crate::postgres::jobs::{ClaimedJob, JobFailureDisposition};

/// The handles of one job type in one queue.
#[derive(Clone)]
pub(crate) struct JobTypeMetrics {
    started: Counter,
    succeeded: Counter,
    failed: Counter,
    retried: Counter,
    dead_lettered: Counter,
    succeeded_duration: Histogram,
    failed_duration: Histogram,
    pickup_latency: Histogram,
}

impl JobTypeMetrics {
    fn register(job_type: &str, queue: &str) -> Self {
        let labels = job_labels(job_type, queue);
        let with_outcome = |outcome: &'static str| {
            let mut labels = labels.clone();
            labels.push(Label::new(LABEL_OUTCOME, outcome));
            labels
        };
        Self {
            started: counter!(JOBS_STARTED, labels.iter()),
            succeeded: counter!(JOBS_SUCCEEDED, labels.iter()),
            failed: counter!(JOBS_FAILED, labels.iter()),
            retried: counter!(JOBS_RETRIED, labels.iter()),
            dead_lettered: counter!(JOBS_DEAD_LETTERED, labels.iter()),
            succeeded_duration: histogram!(JOB_DURATION_SECONDS, with_outcome("succeeded")),
            failed_duration: histogram!(JOB_DURATION_SECONDS, with_outcome("failed")),
            pickup_latency: histogram!(JOB_PICKUP_LATENCY_SECONDS, labels.iter()),
        }
    }

    /// A handler is starting: counts it and records how long the job waited for a worker.
    pub(crate) fn started(&self, job: &ClaimedJob) {
        self.started.increment(1);
        let waited = (job.leased_at - job.due_at).num_microseconds().unwrap_or(0);
        self.pickup_latency.record(waited.max(0) as f64 / 1e6);
    }

    /// A handler returned (or timed out) after `duration`.
    pub(crate) fn finished(&self, succeeded: bool, duration: Duration) {
        let histogram = if succeeded {
            &self.succeeded_duration
        } else {
            &self.failed_duration
        };
        histogram.record(duration);
    }

    /// A success was committed.
    pub(crate) fn succeeded(&self) {
        self.succeeded.increment(1);
    }

    /// A failure was committed with this outcome.
    pub(crate) fn failed(&self, disposition: &JobFailureDisposition) {
        self.failed.increment(1);
        match disposition {
            JobFailureDisposition::RetryScheduled { .. } => self.retried.increment(1),
            JobFailureDisposition::DeadLettered => self.dead_lettered.increment(1),
        }
    }
}

/// The handles of a worker: one set per job type and queue it has met, and the claim size.
pub(crate) struct WorkerMetrics {
    /// By job type, then queue: looked up without building a key.
    by_job: Mutex<HashMap<String, HashMap<String, Arc<JobTypeMetrics>>>>,
    claim_batch_size: Histogram,
}

impl WorkerMetrics {
    /// A worker's handles, taken from the installed recorder as job types and queues are met.
    pub(crate) fn new() -> Self {
        Self {
            by_job: Mutex::new(HashMap::new()),
            claim_batch_size: histogram!(CLAIM_BATCH_SIZE),
        }
    }

    /// The handles of `job_type` in `queue`.
    pub(crate) fn job(&self, job_type: &str, queue: &str) -> Arc<JobTypeMetrics> {
        let mut by_job = self.by_job.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(handles) = by_job.get(job_type).and_then(|queues| queues.get(queue)) {
            return Arc::clone(handles);
        }
        let handles = Arc::new(JobTypeMetrics::register(job_type, queue));
        by_job
            .entry(job_type.to_owned())
            .or_default()
            .insert(queue.to_owned(), Arc::clone(&handles));
        handles
    }

    /// A claim leased `count` jobs.
    pub(crate) fn claimed(&self, count: usize) {
        if count > 0 {
            self.claim_batch_size.record(count as f64);
        }
    }
}

/// Counts an expired lease the reaper took back: a failed attempt, retried or dead-lettered (a
/// rare path: the handles are looked up on the spot).
pub(crate) fn lease_reaped(job_type: &str, queue: &str, dead_lettered: bool) {
    let next = if dead_lettered {
        JOBS_DEAD_LETTERED
    } else {
        JOBS_RETRIED
    };
    let labels = job_labels(job_type, queue);
    counter!(JOBS_FAILED, labels.iter()).increment(1);
    counter!(next, labels).increment(1);
}
