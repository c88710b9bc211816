//! The worker's LISTEN connection: notifications that claimable jobs arrived, on
//! [`JOB_QUEUE_CHANNEL`] for plain jobs and [`GATED_JOB_CHANNEL`] for jobs under a global limit or
//! holding a resource key.

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgNotification};

use crate::postgres::Result;

use super::{GATED_JOB_CHANNEL, JOB_QUEUE_CHANNEL};

/// A notification that jobs of a type became claimable.
pub(crate) struct JobNotification(PgNotification);

impl JobNotification {
    /// The job type (the notification's payload).
    pub(crate) fn job_type(&self) -> &str {
        self.0.payload()
    }

    /// Whether the jobs are gated (under a global limit or holding a resource key).
    pub(crate) fn gated(&self) -> bool {
        self.0.channel() == GATED_JOB_CHANNEL
    }
}

/// A connection listening on both job channels.
pub(crate) struct JobNotifications(PgListener);

impl JobNotifications {
    /// Opens a connection of its own (with `pool`'s options) and listens on both channels.
    pub(crate) async fn listen(pool: &PgPool) -> Result<Self> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener
            .listen_all([JOB_QUEUE_CHANNEL, GATED_JOB_CHANNEL])
            .await?;
        Ok(Self(listener))
    }

    /// The next notification; `Ok(None)` when the connection was lost and the next call
    /// reconnects (notifications sent meanwhile are lost), an error when reconnecting failed.
    pub(crate) async fn next(&mut self) -> Result<Option<JobNotification>> {
        Ok(self.0.try_recv().await?.map(JobNotification))
    }
}
