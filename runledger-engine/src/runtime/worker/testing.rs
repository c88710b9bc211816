//! Fakes for the worker's unit tests: claimed jobs and finished outcomes made without a
//! database.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use super::outcome::Finished;
use crate::core::jobs::{JobCompletion, JobFailure, JobId};
use crate::postgres::jobs::ClaimedJob;
use crate::runtime::metrics::WorkerMetrics;
use crate::runtime::observer::ObservedJob;

/// A job of `job_type` as a claim of `worker-test` returns it, with `timeout_seconds`.
pub(super) fn claimed_job(job_type: &str, timeout_seconds: i32) -> ClaimedJob {
    let now = Utc::now();
    ClaimedJob {
        id: JobId::new_v7(),
        job_type: job_type.to_owned(),
        queue: "default".to_owned(),
        resource_key: None,
        organization_id: None,
        payload: serde_json::json!({}),
        priority: 0,
        attempt: 1,
        attempt_number: 1,
        max_attempts: 3,
        timeout_seconds,
        worker_id: "worker-test".to_owned(),
        lease_expires_at: now,
        due_at: now,
        leased_at: now,
        workflow_run_id: None,
        workflow_step_id: None,
        workflow_step_key: None,
        checkpoint: None,
        trace_context: None,
    }
}

/// A finished attempt of a fresh job with `outcome`.
pub(super) fn finished(outcome: Result<JobCompletion, JobFailure>) -> Finished {
    let job = claimed_job("test.job", 30);
    Finished {
        job: ObservedJob::from_claimed(&job),
        metrics: WorkerMetrics::new().job(&job.job_type, &job.queue),
        outcome,
        duration: Duration::from_millis(1),
        permit: None,
    }
}

/// A finished success without output.
pub(super) fn succeeded() -> Finished {
    finished(Ok(JobCompletion::success()))
}

/// Metric handles for a component under test.
pub(super) fn metrics() -> Arc<WorkerMetrics> {
    Arc::new(WorkerMetrics::new())
}
