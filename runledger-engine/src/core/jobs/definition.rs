//! The definition values of a job type: one type for a job's own values, catalog-wide
//! defaults, per-job overrides and the typed layer's `#[job(...)]` keys.

/// Definition values of a job type: its version, attempt budget, per-attempt timeout, claim
/// priority, enabled flag, retention, queue and global concurrency limit. Each field left `None`
/// falls back to the level below it: a job's own values, then the catalog-wide defaults, then
/// the built-in defaults (version 1, 5 attempts, 300 s, priority 0, enabled, the worker's
/// `JOBS_RETAIN_*` retention, queue `default`, no global limit).
///
/// Every builder is `const`, so a value can be a constant (the typed layer's `Job::DEFAULTS`).
/// The catalog's seed names `JobCatalogDefinitionOverrides` and `JobCatalogDefaults` are this
/// type.
///
/// ```
/// use runledger_engine::core::jobs::JobDefaults;
///
/// const EMAILS: JobDefaults = JobDefaults::new().max_attempts(8).timeout_seconds(60);
/// let catalog_wide = JobDefaults::new().max_attempts(3).priority(5);
///
/// let effective = EMAILS.or(catalog_wide);
/// assert_eq!(effective.max_attempts, Some(8));
/// assert_eq!(effective.priority, Some(5));
/// assert_eq!(effective.version, None); // the built-in default applies
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobDefaults {
    /// Definition version (positive).
    pub version: Option<i32>,
    /// Attempts before the job is dead-lettered (positive).
    pub max_attempts: Option<i32>,
    /// Per-attempt timeout in seconds (positive).
    pub timeout_seconds: Option<i32>,
    /// Claim priority, higher first; may be zero or negative.
    pub priority: Option<i32>,
    /// Whether the definition is enabled (an operator's pause survives additive syncs either
    /// way).
    pub enabled: Option<bool>,
    /// How long finished jobs of this type are kept, in seconds (positive), whatever their end;
    /// `None` keeps the pruner's retention per status.
    pub retention_seconds: Option<i32>,
    /// The queue new jobs of this type enter (an identifier: not blank, at most 255
    /// characters); `None` is `default`.
    pub queue: Option<&'static str>,
    /// Most jobs of this type running at once across all workers (positive); `None` has no
    /// global limit.
    pub global_concurrency: Option<i32>,
}

impl JobDefaults {
    /// Nothing set: every value falls back.
    pub const fn new() -> Self {
        Self {
            version: None,
            max_attempts: None,
            timeout_seconds: None,
            priority: None,
            enabled: None,
            retention_seconds: None,
            queue: None,
            global_concurrency: None,
        }
    }

    /// Sets the version (must be positive).
    pub const fn version(mut self, version: i32) -> Self {
        self.version = Some(version);
        self
    }

    /// Sets the attempt budget (must be positive).
    pub const fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Sets the per-attempt timeout in seconds (must be positive).
    pub const fn timeout_seconds(mut self, seconds: i32) -> Self {
        self.timeout_seconds = Some(seconds);
        self
    }

    /// Sets the claim priority.
    pub const fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets whether the definition is enabled.
    pub const fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = Some(enabled);
        self
    }

    /// Sets how long finished jobs of this type are kept, in seconds (must be positive).
    pub const fn retention_seconds(mut self, seconds: i32) -> Self {
        self.retention_seconds = Some(seconds);
        self
    }

    /// Sets the queue new jobs of this type enter.
    pub const fn queue(mut self, queue: &'static str) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Sets the most jobs of this type running at once across all workers (must be positive).
    pub const fn global_concurrency(mut self, limit: i32) -> Self {
        self.global_concurrency = Some(limit);
        self
    }

    /// These values, with each unset one taken from `fallback`.
    pub const fn or(self, fallback: Self) -> Self {
        Self {
            version: or(self.version, fallback.version),
            max_attempts: or(self.max_attempts, fallback.max_attempts),
            timeout_seconds: or(self.timeout_seconds, fallback.timeout_seconds),
            priority: or(self.priority, fallback.priority),
            enabled: match self.enabled {
                Some(enabled) => Some(enabled),
                None => fallback.enabled,
            },
            retention_seconds: or(self.retention_seconds, fallback.retention_seconds),
            queue: match self.queue {
                Some(queue) => Some(queue),
                None => fallback.queue,
            },
            global_concurrency: or(self.global_concurrency, fallback.global_concurrency),
        }
    }

    /// The first value that must be positive and is not (`version`, `max_attempts`,
    /// `timeout_seconds`, `retention_seconds` or `global_concurrency`), if any.
    pub fn non_positive_field(&self) -> Option<&'static str> {
        [
            ("version", self.version),
            ("max_attempts", self.max_attempts),
            ("timeout_seconds", self.timeout_seconds),
            ("retention_seconds", self.retention_seconds),
            ("global_concurrency", self.global_concurrency),
        ]
        .into_iter()
        .find(|(_, value)| value.is_some_and(|v| v <= 0))
        .map(|(field, _)| field)
    }
}

const fn or(value: Option<i32>, fallback: Option<i32>) -> Option<i32> {
    match value {
        Some(value) => Some(value),
        None => fallback,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_values_win_over_the_fallback_field_by_field() {
        let own = JobDefaults::new().timeout_seconds(600).enabled(false);
        let fallback = JobDefaults::new()
            .timeout_seconds(30)
            .max_attempts(9)
            .enabled(true)
            .retention_seconds(3_600);
        assert_eq!(
            own.or(fallback),
            JobDefaults::new()
                .timeout_seconds(600)
                .max_attempts(9)
                .enabled(false)
                .retention_seconds(3_600)
        );
    }

    #[test]
    fn non_positive_values_are_named() {
        assert_eq!(JobDefaults::new().priority(-4).non_positive_field(), None);
        assert_eq!(
            JobDefaults::new().max_attempts(0).non_positive_field(),
            Some("max_attempts")
        );
        assert_eq!(
            JobDefaults::new().retention_seconds(0).non_positive_field(),
            Some("retention_seconds")
        );
        assert_eq!(
            JobDefaults::new()
                .version(-1)
                .timeout_seconds(0)
                .non_positive_field(),
            Some("version")
        );
    }
}
