//! Worker-process settings, read from `JOBS_*` environment variables or built in code.

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use crate::core::jobs::Retention;
pub use crate::runtime::error::JobsConfigError;
use crate::runtime::queues::{QueueConcurrency, check_queues, parse_queues};

/// Default pause between polls when no notification arrives.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(1_000);
/// Default upper bound on jobs claimed per round trip.
pub const DEFAULT_CLAIM_BATCH_SIZE: u32 = 256;
/// Default lease length; heartbeats renew it at a third of this.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);
/// Default limit on handlers running at once in one process.
pub const DEFAULT_MAX_GLOBAL_CONCURRENCY: u32 = 64;
/// Default pause between reaper sweeps.
pub const DEFAULT_REAPER_INTERVAL: Duration = Duration::from_secs(5);
/// Default pause between schedule materialization passes.
pub const DEFAULT_SCHEDULE_POLL_INTERVAL: Duration = Duration::from_secs(5);
/// Default delay before a reaped job becomes claimable again.
pub const DEFAULT_REAPER_RETRY_DELAY: Duration = Duration::from_millis(1_000);
/// Default pause between pruner passes.
pub const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// Default pause between intent promotion passes when no notification arrives.
pub const DEFAULT_INTENT_POLL_INTERVAL: Duration = Duration::from_millis(1_000);
/// Default pause between queue depth samples.
pub const DEFAULT_QUEUE_DEPTH_INTERVAL: Duration = Duration::from_secs(5);

/// Smallest poll interval accepted; smaller values are raised to it.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Smallest lease accepted; smaller values are raised to it.
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(10);
/// Smallest reaper and schedule intervals accepted.
pub const MIN_LOOP_INTERVAL: Duration = Duration::from_secs(1);
/// Largest claim batch accepted.
pub const MAX_CLAIM_BATCH_SIZE: u32 = 1_000;
/// Longest lease accepted; longer values are lowered to it.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(24 * 3_600);
/// Longest delay before a reaped job is retried; longer values are lowered to it.
pub const MAX_REAPER_RETRY_DELAY: Duration = Duration::from_secs(24 * 3_600);

/// Fewest connections the pool of a worker needs: the LISTEN connection holds one for good,
/// and the claim, completion and heartbeat loops need at least one more to share.
pub const MIN_POOL_CONNECTIONS: u32 = 2;

/// Refuses a pool that cannot run a worker at all (fewer than [`MIN_POOL_CONNECTIONS`]): with
/// one connection the LISTEN connection would hold it and every other loop would starve
/// without a word.
pub fn check_pool_size(pool: &PgPool) -> Result<(), JobsConfigError> {
    let max_connections = pool.options().get_max_connections();
    if max_connections < MIN_POOL_CONNECTIONS {
        return Err(JobsConfigError::PoolTooSmall {
            max_connections,
            required: MIN_POOL_CONNECTIONS,
        });
    }
    Ok(())
}

/// Warns (in tracing) when `pool` allows fewer connections than the runtime's loops may hold at
/// once: it still works, but the loops queue for connections and handlers that use the pool
/// compete with them.
pub(crate) fn warn_if_pool_small(pool: &PgPool, loops: u32) {
    let max_connections = pool.options().get_max_connections();
    if max_connections < loops {
        tracing::warn!(
            max_connections,
            recommended = loops,
            "the pool allows fewer connections than the runtime's loops may use at once; they will wait for each other (size the pool to at least this plus what handlers use)"
        );
    }
}

/// Settings of a worker process.
///
/// ```
/// use std::time::Duration;
/// use runledger_engine::runtime::config::JobsConfig;
///
/// let config = JobsConfig {
///     max_global_concurrency: 8,
///     ..JobsConfig::default()
/// };
/// config.validate().unwrap();
/// assert!(config.worker_id.starts_with("worker-"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsConfig {
    /// This process's worker identity (`JOBS_WORKER_ID`); blank means `worker-<uuidv7>`.
    pub worker_id: String,
    /// Poll interval when no notification arrives (`JOBS_POLL_INTERVAL_MS`).
    pub poll_interval: Duration,
    /// Most jobs claimed per round trip (`JOBS_CLAIM_BATCH_SIZE`).
    pub claim_batch_size: u32,
    /// Lease length (`JOBS_LEASE_TTL_SECONDS`), between [`MIN_LEASE_TTL`] and [`MAX_LEASE_TTL`].
    pub lease_ttl: Duration,
    /// Most handlers running at once (`JOBS_MAX_GLOBAL_CONCURRENCY`) when `queues` is empty.
    pub max_global_concurrency: u32,
    /// The queues this worker serves, each with its own concurrency (`JOBS_QUEUES`, for
    /// example `default:10,emails:2`; a name without a concurrency gets
    /// `max_global_concurrency`). Empty, the default, serves every queue within
    /// `max_global_concurrency`.
    pub queues: Vec<QueueConcurrency>,
    /// Pause between reaper sweeps (`JOBS_REAPER_INTERVAL_SECONDS`).
    pub reaper_interval: Duration,
    /// Pause between schedule passes (`JOBS_SCHEDULE_POLL_INTERVAL_SECONDS`).
    pub schedule_poll_interval: Duration,
    /// Delay before a reaped job is claimable again (`JOBS_REAPER_RETRY_DELAY_MS`).
    pub reaper_retry_delay: Duration,
    /// Whether this process runs the pruner (`JOBS_PRUNER_ENABLED`, default `true`). Only one
    /// pruner works at a time whatever the number of processes running one.
    pub pruner_enabled: bool,
    /// Pause between pruner passes (`JOBS_PRUNE_INTERVAL_SECONDS`).
    pub prune_interval: Duration,
    /// How long finished jobs and runs are kept (`JOBS_RETAIN_SUCCEEDED_SECONDS`,
    /// `JOBS_RETAIN_DEAD_LETTERED_SECONDS`, `JOBS_RETAIN_CANCELED_SECONDS`); a job
    /// definition's own retention wins for its type.
    pub retention: Retention,
    /// Whether the Supervisor runs the intent promoter, which turns durable enqueue intents of
    /// the registered job types into jobs (`JOBS_INTENT_PROMOTER_ENABLED`, default `true`).
    /// Turn it off only where another process of the same job types promotes them.
    pub intent_promoter_enabled: bool,
    /// Pause between intent promotion passes when no notification arrives
    /// (`JOBS_INTENT_POLL_INTERVAL_MS`); it bounds how long a deferred intent waits past its
    /// retry time.
    pub intent_poll_interval: Duration,
    /// Pause between samples of the queue depth gauge (`JOBS_QUEUE_DEPTH_INTERVAL_SECONDS`,
    /// default 5 s); zero turns the sampler off. Each sample is one statement whose cost grows
    /// with the backlog of unfinished jobs.
    pub queue_depth_interval: Duration,
    /// Whether claims commit without waiting for their WAL flush (`JOBS_UNFLUSHED_CLAIMS`,
    /// default `true`). A PostgreSQL crash may then forget a lease committed in its last
    /// moments: the job is pending again and runs again, as after a worker crash, and the
    /// handler that held the lease has its outcome refused. `false` makes every claim wait for
    /// the flush, so that a handler outlives a server crash with its lease, at the cost of claim
    /// throughput (see docs/operations.md).
    pub unflushed_claims: bool,
}

impl Default for JobsConfig {
    fn default() -> Self {
        Self {
            worker_id: generated_worker_id(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            claim_batch_size: DEFAULT_CLAIM_BATCH_SIZE,
            lease_ttl: DEFAULT_LEASE_TTL,
            max_global_concurrency: DEFAULT_MAX_GLOBAL_CONCURRENCY,
            queues: Vec::new(),
            reaper_interval: DEFAULT_REAPER_INTERVAL,
            schedule_poll_interval: DEFAULT_SCHEDULE_POLL_INTERVAL,
            reaper_retry_delay: DEFAULT_REAPER_RETRY_DELAY,
            pruner_enabled: true,
            prune_interval: DEFAULT_PRUNE_INTERVAL,
            retention: Retention::default(),
            intent_promoter_enabled: true,
            intent_poll_interval: DEFAULT_INTENT_POLL_INTERVAL,
            queue_depth_interval: DEFAULT_QUEUE_DEPTH_INTERVAL,
            unflushed_claims: true,
        }
    }
}

fn generated_worker_id() -> String {
    format!("worker-{}", Uuid::now_v7())
}

impl JobsConfig {
    /// Reads the `JOBS_*` variables; unset variables keep their defaults, values below the safe
    /// minimums are raised to them. A variable that is set but malformed is an error naming it.
    pub fn from_env() -> Result<Self, JobsConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`Self::from_env`], reading variables through `lookup` (for tests and for
    /// configuration sources other than the process environment).
    ///
    /// ```
    /// use runledger_engine::runtime::config::JobsConfig;
    ///
    /// let config = JobsConfig::from_lookup(|name| match name {
    ///     "JOBS_LEASE_TTL_SECONDS" => Some("2".to_owned()),
    ///     "JOBS_WORKER_ID" => Some("api-7".to_owned()),
    ///     _ => None,
    /// })
    /// .unwrap();
    /// assert_eq!(config.lease_ttl.as_secs(), 10); // clamped to the minimum
    /// assert_eq!(config.worker_id, "api-7");
    ///
    /// let err = JobsConfig::from_lookup(|name| {
    ///     (name == "JOBS_CLAIM_BATCH_SIZE").then(|| "many".to_owned())
    /// })
    /// .unwrap_err();
    /// assert!(err.to_string().contains("JOBS_CLAIM_BATCH_SIZE"));
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, JobsConfigError> {
        let read = |variable: &'static str| -> Result<Option<u64>, JobsConfigError> {
            match lookup(variable) {
                None => Ok(None),
                Some(value) if value.trim().is_empty() => Ok(None),
                Some(value) => value.trim().parse::<u64>().map(Some).map_err(|_| {
                    JobsConfigError::InvalidEnvVar {
                        variable,
                        value,
                        expected: "a non-negative integer",
                    }
                }),
            }
        };
        let flag = |variable: &'static str| -> Result<Option<bool>, JobsConfigError> {
            match lookup(variable) {
                None => Ok(None),
                Some(value) => match value.trim().to_ascii_lowercase().as_str() {
                    "" => Ok(None),
                    "true" | "1" | "yes" | "on" => Ok(Some(true)),
                    "false" | "0" | "no" | "off" => Ok(Some(false)),
                    _ => Err(JobsConfigError::InvalidEnvVar {
                        variable,
                        value,
                        expected: "true or false",
                    }),
                },
            }
        };
        let defaults = Self::default();
        let seconds = |variable, default: Duration| -> Result<Duration, JobsConfigError> {
            Ok(read(variable)?.map_or(default, Duration::from_secs))
        };
        let retention = Retention::default()
            .succeeded(seconds(
                "JOBS_RETAIN_SUCCEEDED_SECONDS",
                defaults.retention.succeeded,
            )?)
            .dead_lettered(seconds(
                "JOBS_RETAIN_DEAD_LETTERED_SECONDS",
                defaults.retention.dead_lettered,
            )?)
            .canceled(seconds(
                "JOBS_RETAIN_CANCELED_SECONDS",
                defaults.retention.canceled,
            )?);
        let worker_id = match lookup("JOBS_WORKER_ID").map(|id| id.trim().to_owned()) {
            Some(id) if id.contains('\0') || id.chars().count() > 255 => {
                return Err(JobsConfigError::InvalidEnvVar {
                    variable: "JOBS_WORKER_ID",
                    value: id,
                    expected: "at most 255 characters without NUL",
                });
            }
            Some(id) if !id.is_empty() => id,
            _ => defaults.worker_id,
        };
        let max_global_concurrency = read("JOBS_MAX_GLOBAL_CONCURRENCY")?
            .map_or(defaults.max_global_concurrency, saturate_u32)
            .max(1);
        let queues = match lookup("JOBS_QUEUES") {
            Some(value) => parse_queues(&value, max_global_concurrency)?,
            None => Vec::new(),
        };
        let config = Self {
            worker_id,
            poll_interval: read("JOBS_POLL_INTERVAL_MS")?
                .map_or(defaults.poll_interval, Duration::from_millis),
            claim_batch_size: read("JOBS_CLAIM_BATCH_SIZE")?
                .map_or(defaults.claim_batch_size, saturate_u32),
            lease_ttl: read("JOBS_LEASE_TTL_SECONDS")?
                .map_or(defaults.lease_ttl, Duration::from_secs),
            max_global_concurrency,
            queues,
            reaper_interval: read("JOBS_REAPER_INTERVAL_SECONDS")?
                .map_or(defaults.reaper_interval, Duration::from_secs),
            schedule_poll_interval: read("JOBS_SCHEDULE_POLL_INTERVAL_SECONDS")?
                .map_or(defaults.schedule_poll_interval, Duration::from_secs),
            reaper_retry_delay: read("JOBS_REAPER_RETRY_DELAY_MS")?
                .map_or(defaults.reaper_retry_delay, Duration::from_millis),
            pruner_enabled: flag("JOBS_PRUNER_ENABLED")?.unwrap_or(defaults.pruner_enabled),
            prune_interval: seconds("JOBS_PRUNE_INTERVAL_SECONDS", defaults.prune_interval)?,
            retention,
            intent_promoter_enabled: flag("JOBS_INTENT_PROMOTER_ENABLED")?
                .unwrap_or(defaults.intent_promoter_enabled),
            intent_poll_interval: read("JOBS_INTENT_POLL_INTERVAL_MS")?
                .map_or(defaults.intent_poll_interval, Duration::from_millis),
            queue_depth_interval: seconds(
                "JOBS_QUEUE_DEPTH_INTERVAL_SECONDS",
                defaults.queue_depth_interval,
            )?,
            unflushed_claims: flag("JOBS_UNFLUSHED_CLAIMS")?.unwrap_or(defaults.unflushed_claims),
        };
        Ok(config.clamped())
    }

    /// Raises every value below its safe minimum to the minimum, and lowers the batch size,
    /// the lease, the reaper's retry delay and the retentions to their maximums.
    pub fn clamped(mut self) -> Self {
        self.poll_interval = self.poll_interval.max(MIN_POLL_INTERVAL);
        self.intent_poll_interval = self.intent_poll_interval.max(MIN_POLL_INTERVAL);
        self.claim_batch_size = self.claim_batch_size.clamp(1, MAX_CLAIM_BATCH_SIZE);
        self.lease_ttl = self.lease_ttl.clamp(MIN_LEASE_TTL, MAX_LEASE_TTL);
        self.reaper_retry_delay = self.reaper_retry_delay.min(MAX_REAPER_RETRY_DELAY);
        self.max_global_concurrency = self.max_global_concurrency.max(1);
        self.reaper_interval = self.reaper_interval.max(MIN_LOOP_INTERVAL);
        self.schedule_poll_interval = self.schedule_poll_interval.max(MIN_LOOP_INTERVAL);
        self.prune_interval = self.prune_interval.max(MIN_LOOP_INTERVAL);
        if !self.queue_depth_interval.is_zero() {
            self.queue_depth_interval = self.queue_depth_interval.max(MIN_LOOP_INTERVAL);
        }
        self.retention = self.retention.clamped();
        self
    }

    /// Checks a hand-built config; [`Self::from_env`] always returns a valid one.
    pub fn validate(&self) -> Result<(), JobsConfigError> {
        let invalid = |field, problem| Err(JobsConfigError::InvalidField { field, problem });
        if self.worker_id.trim().is_empty()
            || self.worker_id.chars().count() > 255
            || self.worker_id.contains('\0')
        {
            return invalid(
                "worker_id",
                "must be 1 to 255 characters, not blank, without NUL characters",
            );
        }
        if self.poll_interval < MIN_POLL_INTERVAL {
            return invalid("poll_interval", "must be at least 10 ms");
        }
        if self.intent_poll_interval < MIN_POLL_INTERVAL {
            return invalid("intent_poll_interval", "must be at least 10 ms");
        }
        if self.claim_batch_size == 0 || self.claim_batch_size > MAX_CLAIM_BATCH_SIZE {
            return invalid("claim_batch_size", "must be between 1 and 1000");
        }
        if self.lease_ttl < MIN_LEASE_TTL || self.lease_ttl > MAX_LEASE_TTL {
            return invalid("lease_ttl", "must be between 10 seconds and 24 hours");
        }
        if self.reaper_retry_delay > MAX_REAPER_RETRY_DELAY {
            return invalid("reaper_retry_delay", "must be at most 24 hours");
        }
        if self.max_global_concurrency == 0 {
            return invalid("max_global_concurrency", "must be at least 1");
        }
        check_queues(&self.queues)?;
        if self.reaper_interval < MIN_LOOP_INTERVAL {
            return invalid("reaper_interval", "must be at least 1 second");
        }
        if self.schedule_poll_interval < MIN_LOOP_INTERVAL {
            return invalid("schedule_poll_interval", "must be at least 1 second");
        }
        if self.prune_interval < MIN_LOOP_INTERVAL {
            return invalid("prune_interval", "must be at least 1 second");
        }
        if !self.queue_depth_interval.is_zero() && self.queue_depth_interval < MIN_LOOP_INTERVAL {
            return invalid(
                "queue_depth_interval",
                "must be zero (off) or at least 1 second",
            );
        }
        if let Some(field) = self.retention.out_of_range_field() {
            return invalid(
                match field {
                    "succeeded" => "retention.succeeded",
                    "dead_lettered" => "retention.dead_lettered",
                    _ => "retention.canceled",
                },
                "must be between 1 second and i32::MAX seconds",
            );
        }
        Ok(())
    }
}

fn saturate_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::jobs::{MAX_RETENTION, MIN_RETENTION};

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn reads_every_variable() {
        let config = JobsConfig::from_lookup(env(&[
            ("JOBS_WORKER_ID", "w-1"),
            ("JOBS_POLL_INTERVAL_MS", "250"),
            ("JOBS_CLAIM_BATCH_SIZE", "20"),
            ("JOBS_LEASE_TTL_SECONDS", "45"),
            ("JOBS_MAX_GLOBAL_CONCURRENCY", "7"),
            ("JOBS_REAPER_INTERVAL_SECONDS", "3"),
            ("JOBS_SCHEDULE_POLL_INTERVAL_SECONDS", "9"),
            ("JOBS_REAPER_RETRY_DELAY_MS", "1500"),
            ("JOBS_PRUNER_ENABLED", "off"),
            ("JOBS_PRUNE_INTERVAL_SECONDS", "30"),
            ("JOBS_RETAIN_SUCCEEDED_SECONDS", "3600"),
            ("JOBS_RETAIN_DEAD_LETTERED_SECONDS", "7200"),
            ("JOBS_RETAIN_CANCELED_SECONDS", "60"),
            ("JOBS_INTENT_PROMOTER_ENABLED", "false"),
            ("JOBS_INTENT_POLL_INTERVAL_MS", "200"),
            ("JOBS_QUEUES", "default, emails:2"),
            ("JOBS_UNFLUSHED_CLAIMS", "no"),
        ]))
        .unwrap();
        assert_eq!(config.worker_id, "w-1");
        assert_eq!(config.poll_interval, Duration::from_millis(250));
        assert_eq!(config.claim_batch_size, 20);
        assert_eq!(config.lease_ttl, Duration::from_secs(45));
        assert_eq!(config.max_global_concurrency, 7);
        assert_eq!(config.reaper_interval, Duration::from_secs(3));
        assert_eq!(config.schedule_poll_interval, Duration::from_secs(9));
        assert_eq!(config.reaper_retry_delay, Duration::from_millis(1500));
        assert!(!config.pruner_enabled);
        assert_eq!(config.prune_interval, Duration::from_secs(30));
        assert_eq!(
            config.retention,
            Retention::default()
                .succeeded(Duration::from_secs(3_600))
                .dead_lettered(Duration::from_secs(7_200))
                .canceled(Duration::from_secs(60))
        );
        assert!(!config.intent_promoter_enabled);
        assert_eq!(config.intent_poll_interval, Duration::from_millis(200));
        assert!(!config.unflushed_claims);
        assert_eq!(
            config.queues,
            vec![
                QueueConcurrency::new("default", 7),
                QueueConcurrency::new("emails", 2)
            ]
        );
        config.validate().unwrap();
    }

    #[test]
    fn retention_defaults_keep_successes_a_day_and_failures_a_week() {
        let config = JobsConfig::from_lookup(env(&[])).unwrap();
        assert!(config.pruner_enabled);
        assert_eq!(config.retention.succeeded, Duration::from_secs(86_400));
        assert_eq!(config.retention.dead_lettered, Duration::from_secs(604_800));
        assert_eq!(config.retention.canceled, Duration::from_secs(604_800));
        let zero = JobsConfig::from_lookup(env(&[("JOBS_RETAIN_SUCCEEDED_SECONDS", "0")])).unwrap();
        assert_eq!(zero.retention.succeeded, MIN_RETENTION);
        let huge = JobsConfig::from_lookup(env(&[("JOBS_RETAIN_CANCELED_SECONDS", "99999999999")]))
            .unwrap();
        assert_eq!(huge.retention.canceled, MAX_RETENTION);
        let err = JobsConfig::from_lookup(env(&[("JOBS_PRUNER_ENABLED", "maybe")])).unwrap_err();
        assert!(err.to_string().contains("JOBS_PRUNER_ENABLED"));
    }

    #[test]
    fn the_queue_depth_is_sampled_every_five_seconds_unless_zero_turns_it_off() {
        let interval = |pairs: &'static [(&'static str, &'static str)]| {
            JobsConfig::from_lookup(env(pairs))
                .unwrap()
                .queue_depth_interval
        };
        assert_eq!(interval(&[]), Duration::from_secs(5));
        assert_eq!(
            interval(&[("JOBS_QUEUE_DEPTH_INTERVAL_SECONDS", "0")]),
            Duration::ZERO
        );
        assert_eq!(
            interval(&[("JOBS_QUEUE_DEPTH_INTERVAL_SECONDS", "12")]),
            Duration::from_secs(12)
        );
        let off = JobsConfig {
            queue_depth_interval: Duration::ZERO,
            ..JobsConfig::default()
        };
        off.validate().unwrap();
        let too_fast = JobsConfig {
            queue_depth_interval: Duration::from_millis(10),
            ..JobsConfig::default()
        };
        assert!(too_fast.validate().is_err());
        assert_eq!(too_fast.clamped().queue_depth_interval, MIN_LOOP_INTERVAL);
    }

    #[test]
    fn the_intent_promoter_is_on_unless_a_flag_turns_it_off() {
        assert!(
            JobsConfig::from_lookup(env(&[]))
                .unwrap()
                .intent_promoter_enabled
        );
        let on = JobsConfig::from_lookup(env(&[("JOBS_INTENT_PROMOTER_ENABLED", " TRUE ")]));
        assert!(on.unwrap().intent_promoter_enabled);
        let err =
            JobsConfig::from_lookup(env(&[("JOBS_INTENT_PROMOTER_ENABLED", "maybe")])).unwrap_err();
        assert_eq!(err.code(), "config.invalid_env_var");
        assert!(err.to_string().contains("JOBS_INTENT_PROMOTER_ENABLED"));
    }

    #[test]
    fn claims_skip_the_wal_flush_unless_a_flag_makes_them_wait() {
        assert!(JobsConfig::default().unflushed_claims);
        assert!(JobsConfig::from_lookup(env(&[])).unwrap().unflushed_claims);
        let flushed = JobsConfig::from_lookup(env(&[("JOBS_UNFLUSHED_CLAIMS", " Off ")]));
        assert!(!flushed.unwrap().unflushed_claims);
        let err =
            JobsConfig::from_lookup(env(&[("JOBS_UNFLUSHED_CLAIMS", "sometimes")])).unwrap_err();
        assert_eq!(err.code(), "config.invalid_env_var");
        assert!(err.to_string().contains("JOBS_UNFLUSHED_CLAIMS"));
        let waiting = JobsConfig {
            unflushed_claims: false,
            ..JobsConfig::default()
        };
        let worker = crate::runtime::worker::WorkerConfig::from_jobs_config(&waiting);
        assert!(!worker.unflushed_claims);
    }

    #[test]
    fn clamps_to_safe_minimums() {
        let config = JobsConfig::from_lookup(env(&[
            ("JOBS_POLL_INTERVAL_MS", "0"),
            ("JOBS_CLAIM_BATCH_SIZE", "0"),
            ("JOBS_LEASE_TTL_SECONDS", "1"),
            ("JOBS_MAX_GLOBAL_CONCURRENCY", "0"),
            ("JOBS_REAPER_INTERVAL_SECONDS", "0"),
        ]))
        .unwrap();
        assert_eq!(config.poll_interval, MIN_POLL_INTERVAL);
        assert_eq!(config.claim_batch_size, 1);
        assert_eq!(config.lease_ttl, MIN_LEASE_TTL);
        assert_eq!(config.max_global_concurrency, 1);
        assert_eq!(config.reaper_interval, MIN_LOOP_INTERVAL);
        config.validate().unwrap();
    }

    #[test]
    fn blank_worker_id_falls_back_and_malformed_values_name_the_variable() {
        let config = JobsConfig::from_lookup(env(&[("JOBS_WORKER_ID", "  ")])).unwrap();
        assert!(config.worker_id.starts_with("worker-"));

        let err = JobsConfig::from_lookup(env(&[("JOBS_LEASE_TTL_SECONDS", "-3")])).unwrap_err();
        assert_eq!(err.code(), "config.invalid_env_var");
        assert!(err.to_string().contains("JOBS_LEASE_TTL_SECONDS"));
    }

    #[test]
    fn validate_rejects_hand_built_configs_below_minimums() {
        let config = JobsConfig {
            lease_ttl: Duration::from_secs(1),
            ..JobsConfig::default()
        };
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("lease_ttl"));
    }
}
