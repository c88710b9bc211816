//! What a [`WorkerLoop::run_once`](super::WorkerLoop::run_once) pass reports: counts, and each
//! job with how its attempt ended.

use crate::core::jobs::JobFailureKind;
use crate::postgres::jobs::JobFailureDisposition;
use crate::runtime::observer::ObservedJob;

/// What one [`WorkerLoop::run_once`](super::WorkerLoop::run_once) pass did: counts, and each job with its outcome.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct WorkerPass {
    /// Jobs claimed.
    pub claimed: usize,
    /// Successes committed.
    pub succeeded: usize,
    /// Continuations committed (attempts that closed as a success and scheduled the job's
    /// next run).
    pub continued: usize,
    /// Failures committed (a success whose output could not be stored counts here).
    pub failed: usize,
    /// Outcomes that could not be committed (lease lost).
    pub persist_failed: usize,
    /// Every claimed job and how its attempt ended, in claim order.
    pub jobs: Vec<PassedJob>,
}

/// One job of a [`WorkerPass`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PassedJob {
    /// The job and attempt.
    pub job: ObservedJob,
    /// How the attempt ended.
    pub outcome: PassOutcome,
}

/// How an attempt of a [`WorkerPass`] ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PassOutcome {
    /// The success (and output) was committed.
    Succeeded,
    /// The attempt closed as a success and the job's next run was scheduled.
    Continued {
        /// The run that starts next.
        run_number: i32,
        /// When it becomes claimable.
        next_run_at: chrono::DateTime<chrono::Utc>,
    },
    /// The failure was committed: retried later or dead-lettered, as `disposition` says.
    Failed {
        /// How it failed.
        kind: JobFailureKind,
        /// The failure's code.
        code: String,
        /// The failure's message.
        message: String,
        /// What happened to the job.
        disposition: JobFailureDisposition,
    },
    /// The outcome could not be recorded: the lease was lost meanwhile (the reaper retries
    /// the job).
    NotRecorded,
}
