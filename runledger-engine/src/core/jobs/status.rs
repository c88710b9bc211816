//! Status enums, stored as upper-case text in the schema's CHECK-constrained columns.

use std::fmt;
use std::str::FromStr;

/// A status string read from the database that this version does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}`")]
pub struct UnknownStatus {
    /// Which enum was being parsed.
    pub kind: &'static str,
    /// The value that did not match.
    pub value: String,
}

macro_rules! status_enum {
    ($(#[$meta:meta])* $name:ident, $kind:literal { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize,
            serde::Deserialize,
        )]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every value, in lifecycle order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The value as stored in the database.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownStatus;

            fn from_str(value: &str) -> Result<Self, Self::Err> {
                match value {
                    $($text => Ok(Self::$variant),)+
                    _ => Err(UnknownStatus { kind: $kind, value: value.to_owned() }),
                }
            }
        }
    };
}

status_enum!(
    /// Where a job is in its lifecycle.
    ///
    /// ```
    /// use runledger_engine::core::jobs::JobStatus;
    ///
    /// assert_eq!("DEAD_LETTERED".parse::<JobStatus>().unwrap(), JobStatus::DeadLettered);
    /// assert!(JobStatus::Succeeded.is_terminal());
    /// ```
    JobStatus, "job status" {
        /// Waiting to be claimed, possibly not before `next_run_at` (a delay or a retry).
        Pending => "PENDING",
        /// Claimed by a worker that holds an unexpired lease.
        Leased => "LEASED",
        /// Finished successfully.
        Succeeded => "SUCCEEDED",
        /// Failed for good; a dead-letter row keeps the payload.
        DeadLettered => "DEAD_LETTERED",
        /// Canceled before it finished.
        Canceled => "CANCELED",
    }
);

status_enum!(
    /// Where a job is within its status (`job_queue.stage`, derived from the row, so it never
    /// disagrees with the status): waiting for its first attempt or for a retry, leased with
    /// its handler not yet started or running, and the three ends. A succeeded job is always
    /// `Completed`.
    ///
    /// ```
    /// use runledger_engine::core::jobs::JobStage;
    ///
    /// assert_eq!("RUNNING".parse::<JobStage>().unwrap(), JobStage::Running);
    /// assert_eq!(JobStage::Completed.as_str(), "COMPLETED");
    /// ```
    JobStage, "job stage" {
        /// Pending, no attempt of its current run made yet.
        Queued => "QUEUED",
        /// Pending after a failed attempt, waiting for its retry.
        RetryScheduled => "RETRY_SCHEDULED",
        /// Claimed; its handler has not started yet.
        Leased => "LEASED",
        /// Its handler is running.
        Running => "RUNNING",
        /// Succeeded.
        Completed => "COMPLETED",
        /// Dead-lettered.
        DeadLettered => "DEAD_LETTERED",
        /// Canceled.
        Canceled => "CANCELED",
    }
);

impl JobStatus {
    /// Whether the job will not run again unless requeued.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::DeadLettered | Self::Canceled)
    }
}

status_enum!(
    /// Where a durable enqueue intent is: waiting for a promoter, turned into a job, or
    /// refused because a job with its key but another request exists.
    ///
    /// ```
    /// use runledger_engine::core::jobs::JobIntentStatus;
    ///
    /// assert_eq!("PROMOTED".parse::<JobIntentStatus>().unwrap(), JobIntentStatus::Promoted);
    /// assert!(!JobIntentStatus::Pending.is_terminal());
    /// ```
    JobIntentStatus, "intent status" {
        /// Waiting for a worker that runs the job type (possibly not before a retry time).
        Pending => "PENDING",
        /// Turned into a job (`job_id` names it).
        Promoted => "PROMOTED",
        /// A job with the same key but another request exists; the intent was not promoted.
        Conflicted => "CONFLICTED",
    }
);

impl JobIntentStatus {
    /// Whether the intent is finished (promoted or conflicted).
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Promoted | Self::Conflicted)
    }
}

status_enum!(
    /// How one attempt failed.
    JobFailureKind, "failure kind" {
        /// The handler asked for a retry.
        Retryable => "RETRYABLE",
        /// The handler declared the failure permanent.
        Terminal => "TERMINAL",
        /// The handler panicked.
        Panicked => "PANICKED",
        /// The handler ran past the job's timeout.
        Timeout => "TIMEOUT",
        /// The worker stopped renewing its lease (crash, partition) and the reaper took it back.
        LeaseExpired => "LEASE_EXPIRED",
        /// A handler continued the job: its next run was scheduled.
        Continued => "CONTINUED",
    }
);

impl JobFailureKind {
    /// Whether a failure of this kind may be retried while attempts remain.
    pub const fn is_retryable(self) -> bool {
        matches!(self, Self::Retryable | Self::Timeout | Self::LeaseExpired)
    }
}

status_enum!(
    /// How one attempt of a job ended.
    JobAttemptOutcome, "attempt outcome" {
        /// The attempt succeeded.
        Succeeded => "SUCCEEDED",
        /// The attempt failed; see its failure kind.
        Failed => "FAILED",
        /// The job was canceled during the attempt.
        Canceled => "CANCELED",
    }
);

status_enum!(
    /// Kinds of rows in `runledger.job_events`. Routine transitions (claimed, succeeded) are
    /// recorded by the job and attempt rows themselves.
    JobEventType, "job event type" {
        /// A failed attempt was scheduled to run again.
        RetryScheduled => "RETRY_SCHEDULED",
        /// The job was moved to the dead letters.
        DeadLettered => "DEAD_LETTERED",
        /// The job was canceled.
        Canceled => "CANCELED",
        /// A dead-lettered or canceled job was put back in the queue.
        Requeued => "REQUEUED",
        /// The reaper took back an expired lease.
        LeaseExpired => "LEASE_EXPIRED",
    }
);

status_enum!(
    /// Status of a workflow run.
    WorkflowRunStatus, "workflow run status" {
        /// At least one step is blocked, enqueued or running.
        Running => "RUNNING",
        /// Nothing can move until an external step is completed.
        WaitingForExternal => "WAITING_FOR_EXTERNAL",
        /// Every step succeeded.
        Succeeded => "SUCCEEDED",
        /// Every step is terminal and at least one failed or was canceled.
        CompletedWithErrors => "COMPLETED_WITH_ERRORS",
        /// The run was canceled.
        Canceled => "CANCELED",
    }
);

impl WorkflowRunStatus {
    /// Whether the run has finished (succeeded, completed with errors or canceled).
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::CompletedWithErrors | Self::Canceled
        )
    }
}

status_enum!(
    /// Status of one workflow step.
    WorkflowStepStatus, "workflow step status" {
        /// Waiting for prerequisites.
        Blocked => "BLOCKED",
        /// An external step waiting to be completed from outside.
        WaitingForExternal => "WAITING_FOR_EXTERNAL",
        /// Its job is in the queue.
        Enqueued => "ENQUEUED",
        /// Its job is leased by a worker.
        Running => "RUNNING",
        /// Finished successfully.
        Succeeded => "SUCCEEDED",
        /// Finished unsuccessfully.
        Failed => "FAILED",
        /// Canceled (by the run's cancellation or an unsatisfied dependency).
        Canceled => "CANCELED",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_text() {
        for status in JobStatus::ALL {
            assert_eq!(status.as_str().parse::<JobStatus>().unwrap(), *status);
        }
        for status in WorkflowStepStatus::ALL {
            assert_eq!(
                status.to_string().parse::<WorkflowStepStatus>().unwrap(),
                *status
            );
        }
        let err = "NOPE".parse::<WorkflowRunStatus>().unwrap_err();
        assert_eq!(err.to_string(), "unknown workflow run status `NOPE`");
    }

    #[test]
    fn serde_uses_database_spelling() {
        assert_eq!(
            serde_json::to_string(&JobFailureKind::LeaseExpired).unwrap(),
            "\"LEASE_EXPIRED\""
        );
    }
}

status_enum!(
    /// Severity of a line a handler logged through its
    /// [`JobContext`](crate::core::jobs::JobContext), stored in `runledger.job_logs`.
    ///
    /// ```
    /// use runledger_engine::core::jobs::JobLogLevel;
    ///
    /// assert_eq!(JobLogLevel::Warn.as_str(), "WARN");
    /// assert!(JobLogLevel::Error > JobLogLevel::Info);
    /// ```
    JobLogLevel, "job log level" {
        /// Very detailed tracing.
        Trace => "TRACE",
        /// Diagnostics.
        Debug => "DEBUG",
        /// Normal progress.
        Info => "INFO",
        /// Something unexpected that the handler coped with.
        Warn => "WARN",
        /// A failure.
        Error => "ERROR",
    }
);
