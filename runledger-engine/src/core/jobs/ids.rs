//! Id newtypes. All ids are UUIDv7, so they sort by creation time.

use std::fmt;

use uuid::Uuid;

macro_rules! id_newtype {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh, time-ordered (UUIDv7) id, greater than every id the process made
            /// before.
            pub fn new_v7() -> Self {
                Self(super::fresh_ids::fresh_uuid())
            }

            /// The underlying UUID.
            pub const fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(value: Uuid) -> Self {
                Self(value)
            }
        }

        impl From<$name> for Uuid {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    };
}

id_newtype!(
    /// Id of a row in `runledger.job_queue`.
    ///
    /// ```
    /// use runledger_engine::core::jobs::JobId;
    ///
    /// let id = JobId::new_v7();
    /// assert_eq!(id.as_uuid().get_version_num(), 7);
    /// ```
    JobId
);
id_newtype!(
    /// Id of a workflow run.
    WorkflowRunId
);
id_newtype!(
    /// Id of one step of a workflow run.
    WorkflowStepId
);
id_newtype!(
    /// Id of a cron schedule.
    JobScheduleId
);
id_newtype!(
    /// Id of a durable enqueue intent (`runledger.job_enqueue_intents`).
    JobIntentId
);
