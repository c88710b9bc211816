//! The listener: LISTEN wake-ups for the producers. A notification for one of the worker's job
//! types wakes one claim loop of each lane at once; a notification for a gated job (under a
//! global limit or holding a resource key) wakes each lane's loop for such jobs instead.
//! Polling remains the correctness path.

use std::collections::HashSet;
use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Backoff;
use crate::postgres::jobs::{GATED_JOB_CHANNEL, JOB_QUEUE_CHANNEL, Notifications};

/// What the listener wakes: per lane, one of its plain claim loops and its loop for gated jobs.
#[derive(Default)]
pub(super) struct Wakers {
    pub(super) plain: Vec<Arc<Notify>>,
    pub(super) gated: Vec<Arc<Notify>>,
}

impl Wakers {
    /// Wakes every loop, after a (re)connection: notifications sent meanwhile were lost.
    fn all(&self) {
        wake_each(&self.plain);
        wake_each(&self.gated);
    }
}

/// Keeps a LISTEN connection open and turns notifications for our job types into wake-ups:
/// each notify wakes one waiting loop, or the next loop to wait when none is waiting, so
/// one job enqueued costs one claim per lane instead of one per claim loop.
/// Reconnects after connection loss and wakes the worker then, since notifications sent while
/// disconnected are lost (polling covers them too). Returns when `stop` fires.
pub(super) async fn listen(
    pool: PgPool,
    job_types: Vec<String>,
    wake: Wakers,
    stop: CancellationToken,
) {
    let job_types: HashSet<String> = job_types.into_iter().collect();
    let mut backoff = Backoff::default();
    loop {
        let mut notifications = tokio::select! {
            result = Notifications::listen(&pool, &[JOB_QUEUE_CHANNEL, GATED_JOB_CHANNEL]) => match result {
                Ok(notifications) => notifications,
                Err(err) => {
                    tracing::warn!(error = %err.internal_message(), "LISTEN connection failed; relying on polling meanwhile");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => continue,
                        () = stop.cancelled() => return,
                    }
                }
            },
            () = stop.cancelled() => return,
        };
        backoff.reset();
        wake.all();
        loop {
            tokio::select! {
                received = notifications.next() => match received {
                    Ok(Some(notification)) => {
                        if job_types.contains(notification.payload()) {
                            if notification.channel() == GATED_JOB_CHANNEL {
                                wake_each(&wake.gated);
                            } else {
                                wake_each(&wake.plain);
                            }
                        }
                    }
                    // Connection lost: the next call reconnects; catch up on what was missed.
                    Ok(None) => wake.all(),
                    Err(err) => {
                        tracing::warn!(error = %err.internal_message(), "LISTEN connection broke; reconnecting");
                        break;
                    }
                },
                () = stop.cancelled() => return,
            }
        }
    }
}

/// Wakes one loop through each of `wake`.
fn wake_each(wake: &[Arc<Notify>]) {
    for notify in wake {
        notify.notify_one();
    }
}
