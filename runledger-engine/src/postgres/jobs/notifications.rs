//! A LISTEN connection: the worker's on [`JOB_QUEUE_CHANNEL`](super::JOB_QUEUE_CHANNEL) and
//! [`GATED_JOB_CHANNEL`](super::GATED_JOB_CHANNEL), the intent promoter's on
//! [`JOB_INTENT_CHANNEL`](super::JOB_INTENT_CHANNEL).

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgNotification};

use crate::postgres::Result;

/// A notification received on one of the channels.
pub(crate) struct Notification(PgNotification);

impl Notification {
    /// The channel it was sent on.
    pub(crate) fn channel(&self) -> &str {
        self.0.channel()
    }

    /// Its payload (a job type, on the job channels).
    pub(crate) fn payload(&self) -> &str {
        self.0.payload()
    }
}

/// A connection of its own listening on some channels.
pub(crate) struct Notifications(PgListener);

impl Notifications {
    /// Opens a connection (with `pool`'s options) and listens on `channels`.
    pub(crate) async fn listen(pool: &PgPool, channels: &[&str]) -> Result<Self> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(Self(listener))
    }

    /// The next notification; `Ok(None)` when the connection was lost and the next call
    /// reconnects (notifications sent meanwhile are lost), an error when reconnecting failed.
    pub(crate) async fn next(&mut self) -> Result<Option<Notification>> {
        Ok(self.0.try_recv().await?.map(Notification))
    }
}
