//! [`EnqueueOptions`]: per-call settings of a typed enqueue (idempotency key, delay, priority,
//! attempts, organization, execution resource key, singleton key).

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use crate::engine::postgres::jobs::{EnqueueOutcome, UniqueWhile};
use crate::engine::postgres::jobs::{JobEnqueue, UniqueRule};

/// Per-call enqueue options.
///
/// ```
/// use std::time::Duration;
/// use runledger::EnqueueOptions;
///
/// let options = EnqueueOptions::new()
///     .idempotency_key("welcome-email:42")
///     .delay(Duration::from_secs(600))
///     .priority(10);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnqueueOptions {
    idempotency_key: Option<String>,
    run_at: Option<RunAt>,
    priority: Option<i32>,
    pub(crate) organization_id: Option<Uuid>,
    max_attempts: Option<i32>,
    resource_key: Option<String>,
    unique: Option<(String, UniqueRule)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum RunAt {
    Delay(Duration),
    At(DateTime<Utc>),
}

impl EnqueueOptions {
    /// No options: run as soon as possible with the definition's values.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deduplicates: a second enqueue with the same key and the same request returns the
    /// first job; one with another request fails with `job.idempotency_conflict`.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Runs the job no sooner than `delay` from now. With an idempotency key, a retry with the
    /// same delay is the same request (the delay is compared, not the instant).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.run_at = Some(RunAt::Delay(delay));
        self
    }

    /// Runs the job no sooner than `at`.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(RunAt::At(at));
        self
    }

    /// Overrides the definition's priority (higher runs first).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Overrides the definition's attempt budget.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Tags the job with an organization (tenant).
    pub fn organization(mut self, organization_id: Uuid) -> Self {
        self.organization_id = Some(organization_id);
        self
    }

    /// Names an execution resource the job holds while it runs: at most one job holding `key`
    /// runs at a time across all workers, whatever its type. Use it for what must not be
    /// touched twice at once (a printer, an account being synchronised, one tenant's
    /// migration); the others wait `PENDING` without spending an attempt. For "at most N of
    /// this type", use `#[job(global_concurrency = N)]` instead.
    ///
    /// ```
    /// use runledger::EnqueueOptions;
    ///
    /// let options = EnqueueOptions::new().resource_key("account:42:sync");
    /// # let _ = options;
    /// ```
    pub fn resource_key(mut self, key: impl Into<String>) -> Self {
        self.resource_key = Some(key.into());
        self
    }

    /// Makes the job a singleton: while a job of the same type and organization holds `key`
    /// in the states `scope` names ([`UniqueWhile::Queued`]: waiting and never started;
    /// [`UniqueWhile::Active`]: waiting or running), the enqueue inserts nothing and returns
    /// that job's handle ([`was_created`](crate::JobHandle::was_created) is `false`). The key is
    /// free again once the holder leaves those states, unlike an idempotency key, which it
    /// cannot be combined with (`job.unique_key_with_idempotency_key`).
    ///
    /// ```
    /// use runledger::{EnqueueOptions, UniqueWhile};
    ///
    /// // At most one search-index rebuild waiting, whatever the burst of edits.
    /// let options = EnqueueOptions::new().unique("index:products", UniqueWhile::Queued);
    /// # let _ = options;
    /// ```
    pub fn unique(mut self, key: impl Into<String>, scope: UniqueWhile) -> Self {
        self.unique = Some((key.into(), UniqueRule::Singleton(scope)));
        self
    }

    /// Debounces a burst: the job runs `window` after the burst's last enqueue, with that
    /// enqueue's arguments. While a job of the type holds `key` and has not started, an enqueue
    /// with the key replaces its arguments and pushes its start to `window` from now
    /// ([`EnqueueOutcome::Replaced`]); otherwise it enqueues a job due in `window`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use runledger::EnqueueOptions;
    ///
    /// // Index a document 5 s after its last edit, with the text of that edit.
    /// let options = EnqueueOptions::new().debounce("document:7", Duration::from_secs(5));
    /// # let _ = options;
    /// ```
    pub fn debounce(mut self, key: impl Into<String>, window: Duration) -> Self {
        self.unique = Some((key.into(), UniqueRule::Debounce(window)));
        self
    }

    /// Throttles: at most one job of the type per `key` and `window`, counted from the enqueue
    /// of the job that was kept; the enqueues within its window return it
    /// ([`EnqueueOutcome::Dropped`]), whatever its state.
    ///
    /// ```
    /// use std::time::Duration;
    /// use runledger::EnqueueOptions;
    ///
    /// // At most one alert per user per hour.
    /// let options = EnqueueOptions::new().throttle("user:42", Duration::from_secs(3_600));
    /// # let _ = options;
    /// ```
    pub fn throttle(mut self, key: impl Into<String>, window: Duration) -> Self {
        self.unique = Some((key.into(), UniqueRule::Throttle(window)));
        self
    }

    pub(crate) fn apply<'a>(&'a self, mut request: JobEnqueue<'a>) -> JobEnqueue<'a> {
        if let Some(key) = &self.idempotency_key {
            request = request.idempotency_key(key);
        }
        match self.run_at {
            Some(RunAt::At(at)) => request = request.run_at(at),
            Some(RunAt::Delay(delay)) => request = request.delay(delay),
            None => {}
        }
        if let Some(priority) = self.priority {
            request = request.priority(priority);
        }
        if let Some(max_attempts) = self.max_attempts {
            request = request.max_attempts(max_attempts);
        }
        if let Some(org) = self.organization_id {
            request = request.organization_id(org);
        }
        if let Some(key) = &self.resource_key {
            request = request.resource_key(key);
        }
        if let Some((key, rule)) = &self.unique {
            request = match *rule {
                UniqueRule::Debounce(window) => request.debounce(key, window),
                UniqueRule::Throttle(window) => request.throttle(key, window),
                UniqueRule::Singleton(scope) => request.unique(key, scope),
                _ => request,
            };
        }
        request
    }
}
