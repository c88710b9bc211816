//! The intent promoter loop: turns durable enqueue intents of the job types this process runs
//! into jobs. Safe in every worker process: intents are claimed with `FOR UPDATE SKIP LOCKED`
//! and each job carries the intent's idempotency key, so an intent becomes one job however
//! many promoters run. A `LISTEN` on the intent channel wakes it when an intent commits;
//! polling remains the correctness path (and retries deferred intents).

use std::collections::HashSet;
use std::time::Duration;

use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::postgres::jobs::{
    IntentPromotion, IntentPromotionPass, JOB_INTENT_CHANNEL, Notifications,
    promote_job_enqueue_intents,
};
use crate::runtime::config::{JobsConfig, JobsConfigError};
use crate::runtime::error::{IntentPromoterError, RuntimeLoopExit};
use crate::runtime::registry::JobRegistry;

/// Default most intents promoted per transaction.
pub const DEFAULT_INTENT_BATCH_SIZE: i64 = 100;
/// Default wait after an intent's first failed promotion; it doubles (with jitter) with each
/// further failure.
pub const DEFAULT_INTENT_RETRY_BASE_DELAY: Duration = Duration::from_secs(1);
/// Default longest wait between promotion tries of one intent.
pub const DEFAULT_INTENT_RETRY_MAX_DELAY: Duration = Duration::from_secs(300);
/// Wait before a lost `LISTEN` connection is opened again (the loop polls meanwhile).
const LISTEN_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Settings of the intent promoter loop.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntentPromoterConfig {
    /// Pause between passes when no notification arrives.
    pub interval: Duration,
    /// Most intents per transaction; a full batch is followed at once by another.
    pub batch_size: i64,
    /// Wait after an intent's first failed promotion.
    pub retry_base_delay: Duration,
    /// Longest wait between promotion tries of one intent.
    pub retry_max_delay: Duration,
    /// Whether to `LISTEN` for committed intents (one connection held for good) so that they
    /// are promoted at once rather than at the next poll. The Supervisor turns it off when
    /// the pool is too small to spare the connection.
    pub listen: bool,
}

impl IntentPromoterConfig {
    /// The promoter settings of a [`JobsConfig`].
    pub fn from_jobs_config(config: &JobsConfig) -> Self {
        Self {
            interval: config.intent_poll_interval,
            batch_size: DEFAULT_INTENT_BATCH_SIZE,
            retry_base_delay: DEFAULT_INTENT_RETRY_BASE_DELAY,
            retry_max_delay: DEFAULT_INTENT_RETRY_MAX_DELAY,
            listen: true,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), JobsConfigError> {
        let invalid = |field, problem| Err(JobsConfigError::InvalidField { field, problem });
        if self.interval.is_zero() {
            return invalid("intent_poll_interval", "must be positive");
        }
        if self.batch_size <= 0 {
            return invalid("intent promoter batch_size", "must be positive");
        }
        if self.retry_base_delay.is_zero() || self.retry_max_delay < self.retry_base_delay {
            return invalid(
                "intent promoter retry delays",
                "must be positive, the longest not below the first",
            );
        }
        Ok(())
    }
}

/// Promotes the durable enqueue intents of a set of job types.
///
/// ```no_run
/// use runledger_engine::runtime::config::JobsConfig;
/// use runledger_engine::runtime::intent_promoter::{IntentPromoter, IntentPromoterConfig};
///
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let config = IntentPromoterConfig::from_jobs_config(&JobsConfig::default());
/// let promoter = IntentPromoter::new(pool, vec!["orders.confirm".to_owned()], config)?;
/// let pass = promoter.run_once().await?;
/// println!("{} promoted, {} deferred", pass.promoted, pass.deferred);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct IntentPromoter {
    pool: PgPool,
    job_types: Vec<String>,
    config: IntentPromoterConfig,
}

impl IntentPromoter {
    /// A promoter of the intents of `job_types` (the types this process runs), with validated
    /// settings.
    pub fn new(
        pool: PgPool,
        job_types: Vec<String>,
        config: IntentPromoterConfig,
    ) -> Result<Self, JobsConfigError> {
        config.validate()?;
        Ok(Self {
            pool,
            job_types,
            config,
        })
    }

    /// The job types whose intents this promoter takes.
    pub fn job_types(&self) -> &[String] {
        &self.job_types
    }

    /// One pass: bounded batches, repeated while they come back full. When nothing is due,
    /// it is one cheap query.
    pub async fn run_once(&self) -> Result<IntentPromotionPass, IntentPromoterError> {
        let promotion = IntentPromotion::new(&self.job_types, self.config.batch_size)
            .retry_delays(self.config.retry_base_delay, self.config.retry_max_delay);
        let mut total = IntentPromotionPass::default();
        loop {
            let pass = promote_job_enqueue_intents(&self.pool, &promotion).await?;
            total.add(pass);
            if (pass.claimed as i64) < self.config.batch_size {
                return Ok(total);
            }
        }
    }

    /// Runs a pass at once, then whenever an intent of one of its types commits (LISTEN) or
    /// the interval passes, until `shutdown` fires. Database errors are logged and the next
    /// pass tries again.
    pub async fn run(self, shutdown: CancellationToken) -> RuntimeLoopExit {
        let types: HashSet<String> = self.job_types.iter().cloned().collect();
        let mut listener = Listener {
            enabled: self.config.listen,
            ..Listener::default()
        };
        loop {
            match self.run_once().await {
                Ok(pass) if pass.claimed > 0 => tracing::debug!(
                    promoted = pass.promoted,
                    conflicted = pass.conflicted,
                    deferred = pass.deferred,
                    "intent promotion pass"
                ),
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(code = err.code(), error = %err.internal_message(), "intent promotion pass failed");
                }
            }
            let deadline = Instant::now() + self.config.interval;
            tokio::select! {
                () = listener.wait(&self.pool, &types, deadline) => {}
                () = shutdown.cancelled() => return RuntimeLoopExit::Shutdown,
            }
        }
    }
}

/// The promoter's LISTEN connection, opened lazily and reopened after a loss.
#[derive(Default)]
struct Listener {
    enabled: bool,
    connection: Option<Notifications>,
    retry_at: Option<Instant>,
}

impl Listener {
    /// Returns at `deadline`, or earlier when an intent of one of `types` commits or the
    /// connection was lost and regained (notifications may have been missed meanwhile).
    async fn wait(&mut self, pool: &PgPool, types: &HashSet<String>, deadline: Instant) {
        if self.enabled
            && self.connection.is_none()
            && self.retry_at.is_none_or(|at| at <= Instant::now())
        {
            let connected = Notifications::listen(pool, &[JOB_INTENT_CHANNEL]);
            match tokio::time::timeout_at(deadline, connected).await {
                Ok(Ok(listener)) => {
                    self.connection = Some(listener);
                    self.retry_at = None;
                }
                Ok(Err(err)) => {
                    tracing::warn!(error = %err.internal_message(), "intent LISTEN connection failed; polling meanwhile");
                    self.retry_at = Some(Instant::now() + LISTEN_RETRY_DELAY);
                }
                Err(_) => self.retry_at = Some(Instant::now() + LISTEN_RETRY_DELAY),
            }
        }
        loop {
            let Some(connection) = self.connection.as_mut() else {
                tokio::time::sleep_until(deadline).await;
                return;
            };
            tokio::select! {
                received = connection.next() => match received {
                    Ok(Some(notification)) if types.contains(notification.payload()) => return,
                    Ok(Some(_)) => {}
                    // Lost and reconnected: catch up on what may have been missed.
                    Ok(None) => return,
                    Err(err) => {
                        tracing::warn!(error = %err.internal_message(), "intent LISTEN connection broke; polling meanwhile");
                        self.connection = None;
                        self.retry_at = Some(Instant::now() + LISTEN_RETRY_DELAY);
                    }
                },
                () = tokio::time::sleep_until(deadline) => return,
            }
        }
    }
}

/// Runs an intent promoter for the job types of `registry` with `config`'s settings until
/// `shutdown` fires. Custom orchestration that records durable enqueue intents runs it next to
/// the worker loop (the Supervisor does both).
pub async fn run_intent_promoter_loop(
    pool: PgPool,
    registry: &JobRegistry,
    config: JobsConfig,
    shutdown: CancellationToken,
) -> RuntimeLoopExit {
    let settings = IntentPromoterConfig::from_jobs_config(&config);
    match IntentPromoter::new(pool, registry.job_types(), settings) {
        Ok(promoter) => promoter.run(shutdown).await,
        Err(err) => RuntimeLoopExit::InvalidConfig(err),
    }
}
