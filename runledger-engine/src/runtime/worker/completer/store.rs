//! Where the completer writes outcomes: the lease-fenced statements of `postgres::jobs` on the
//! worker's pool, or a fake in tests.

use sqlx::PgPool;

use crate::core::jobs::{JobFailure, JobId, JobStatus};
use crate::postgres::Result;
use crate::postgres::jobs::{
    JobContinuationOutcome, JobContinued, JobFailureDisposition, JobLease, JobSuccess, TenantScope,
    complete_job_failure, complete_jobs_success, continue_jobs, get_job_by_id,
};

/// The statements the completer sends, each fenced by the worker's leases.
#[async_trait::async_trait]
pub(in crate::runtime::worker) trait OutcomeStore:
    Send + Sync + 'static
{
    /// Marks a batch of jobs succeeded in one statement; returns those whose lease held.
    async fn complete_successes(&self, worker_id: &str, rows: &[JobSuccess]) -> Result<Vec<JobId>>;

    /// Continues a batch of jobs in one statement; returns what became of each whose lease held.
    async fn continue_jobs(
        &self,
        worker_id: &str,
        rows: &[JobContinued],
    ) -> Result<Vec<(JobId, JobContinuationOutcome)>>;

    /// Records one failure.
    async fn complete_failure(
        &self,
        lease: &JobLease<'_>,
        failure: &JobFailure,
    ) -> Result<JobFailureDisposition>;

    /// Whether the job's `attempt` is recorded as its success (a retried batch may have
    /// committed unseen).
    async fn succeeded(&self, job_id: JobId, attempt: i32) -> bool;
}

#[async_trait::async_trait]
impl OutcomeStore for PgPool {
    async fn complete_successes(&self, worker_id: &str, rows: &[JobSuccess]) -> Result<Vec<JobId>> {
        complete_jobs_success(self, worker_id, rows).await
    }

    async fn continue_jobs(
        &self,
        worker_id: &str,
        rows: &[JobContinued],
    ) -> Result<Vec<(JobId, JobContinuationOutcome)>> {
        continue_jobs(self, worker_id, rows).await
    }

    async fn complete_failure(
        &self,
        lease: &JobLease<'_>,
        failure: &JobFailure,
    ) -> Result<JobFailureDisposition> {
        complete_job_failure(self, lease, failure).await
    }

    async fn succeeded(&self, job_id: JobId, attempt: i32) -> bool {
        matches!(
            get_job_by_id(self, job_id, TenantScope::Admin).await,
            Ok(Some(record)) if record.status == JobStatus::Succeeded && record.attempt == attempt
        )
    }
}
