//! How long finished jobs and workflow runs are kept before the pruner deletes them.

use std::time::Duration;

use super::{JobStatus, WorkflowRunStatus};

/// Default retention of succeeded jobs (and succeeded workflow runs): one day.
pub const DEFAULT_RETAIN_SUCCEEDED: Duration = Duration::from_secs(24 * 3_600);
/// Default retention of dead-lettered jobs (and runs completed with errors): seven days.
pub const DEFAULT_RETAIN_DEAD_LETTERED: Duration = Duration::from_secs(7 * 24 * 3_600);
/// Default retention of canceled jobs and runs: seven days.
pub const DEFAULT_RETAIN_CANCELED: Duration = Duration::from_secs(7 * 24 * 3_600);
/// Shortest retention accepted.
pub const MIN_RETENTION: Duration = Duration::from_secs(1);
/// Longest retention accepted (`i32::MAX` seconds, about 68 years).
pub const MAX_RETENTION: Duration = Duration::from_secs(i32::MAX as u64);

/// How long finished work is kept, by how it ended. A job definition's own retention
/// (`#[job(retain = "3d")]`, `JobDefaults::retention_seconds`) replaces all three for the
/// direct jobs of its type; workflow runs are kept as a whole, by the run's status.
///
/// ```
/// use std::time::Duration;
/// use runledger_engine::core::jobs::{JobStatus, Retention, WorkflowRunStatus};
///
/// let retention = Retention::default().succeeded(Duration::from_secs(3_600));
/// assert_eq!(retention.for_job(JobStatus::Succeeded), Some(Duration::from_secs(3_600)));
/// assert_eq!(retention.for_job(JobStatus::Pending), None); // never pruned
/// assert_eq!(
///     retention.for_run(WorkflowRunStatus::CompletedWithErrors),
///     Some(retention.dead_lettered),
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Kept this long after they succeeded.
    pub succeeded: Duration,
    /// Kept this long after they were dead-lettered (runs: completed with errors).
    pub dead_lettered: Duration,
    /// Kept this long after they were canceled.
    pub canceled: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            succeeded: DEFAULT_RETAIN_SUCCEEDED,
            dead_lettered: DEFAULT_RETAIN_DEAD_LETTERED,
            canceled: DEFAULT_RETAIN_CANCELED,
        }
    }
}

impl Retention {
    /// Sets the retention of successes.
    pub fn succeeded(mut self, retention: Duration) -> Self {
        self.succeeded = retention;
        self
    }

    /// Sets the retention of dead letters (and of runs completed with errors).
    pub fn dead_lettered(mut self, retention: Duration) -> Self {
        self.dead_lettered = retention;
        self
    }

    /// Sets the retention of cancellations.
    pub fn canceled(mut self, retention: Duration) -> Self {
        self.canceled = retention;
        self
    }

    /// How long a job that ended in `status` is kept; `None` for a job that has not ended.
    pub fn for_job(&self, status: JobStatus) -> Option<Duration> {
        match status {
            JobStatus::Succeeded => Some(self.succeeded),
            JobStatus::DeadLettered => Some(self.dead_lettered),
            JobStatus::Canceled => Some(self.canceled),
            _ => None,
        }
    }

    /// How long a run that ended in `status` is kept; `None` for a run that has not ended.
    pub fn for_run(&self, status: WorkflowRunStatus) -> Option<Duration> {
        match status {
            WorkflowRunStatus::Succeeded => Some(self.succeeded),
            WorkflowRunStatus::CompletedWithErrors => Some(self.dead_lettered),
            WorkflowRunStatus::Canceled => Some(self.canceled),
            _ => None,
        }
    }

    /// Each value raised to [`MIN_RETENTION`] or lowered to [`MAX_RETENTION`].
    pub fn clamped(self) -> Self {
        let clamp = |d: Duration| d.clamp(MIN_RETENTION, MAX_RETENTION);
        Self {
            succeeded: clamp(self.succeeded),
            dead_lettered: clamp(self.dead_lettered),
            canceled: clamp(self.canceled),
        }
    }

    /// The first value outside [`MIN_RETENTION`]..=[`MAX_RETENTION`], by name.
    pub fn out_of_range_field(&self) -> Option<&'static str> {
        [
            ("succeeded", self.succeeded),
            ("dead_lettered", self.dead_lettered),
            ("canceled", self.canceled),
        ]
        .into_iter()
        .find(|(_, d)| !(MIN_RETENTION..=MAX_RETENTION).contains(d))
        .map(|(field, _)| field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_map_onto_the_job_retentions() {
        let retention = Retention::default()
            .succeeded(Duration::from_secs(1))
            .dead_lettered(Duration::from_secs(2))
            .canceled(Duration::from_secs(3));
        assert_eq!(
            retention.for_run(WorkflowRunStatus::Succeeded),
            retention.for_job(JobStatus::Succeeded)
        );
        assert_eq!(
            retention.for_run(WorkflowRunStatus::CompletedWithErrors),
            retention.for_job(JobStatus::DeadLettered)
        );
        assert_eq!(
            retention.for_run(WorkflowRunStatus::Canceled),
            retention.for_job(JobStatus::Canceled)
        );
        assert_eq!(retention.for_run(WorkflowRunStatus::Running), None);
        assert_eq!(retention.for_job(JobStatus::Leased), None);
    }

    #[test]
    fn out_of_range_values_are_named_and_clamped() {
        let retention = Retention::default().canceled(Duration::ZERO);
        assert_eq!(retention.out_of_range_field(), Some("canceled"));
        assert_eq!(retention.clamped().canceled, MIN_RETENTION);
        assert_eq!(Retention::default().out_of_range_field(), None);
    }
}
