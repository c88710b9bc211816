//! The IANA time zone a schedule is evaluated in.

use std::fmt;
use std::str::FromStr;

use chrono_tz::Tz;

/// An IANA time zone (`Europe/Berlin`, `America/New_York`, `UTC`), from the `chrono-tz`
/// database.
///
/// ```
/// use runledger_cron::TimeZone;
///
/// let berlin = TimeZone::parse("Europe/Berlin").unwrap();
/// assert_eq!(berlin.name(), "Europe/Berlin");
/// assert_eq!(TimeZone::UTC.name(), "UTC");
///
/// let err = TimeZone::parse("europe/berlin").unwrap_err();
/// assert_eq!(err.code(), "job_schedule.invalid_time_zone");
/// assert_eq!(err.suggestion(), Some("Europe/Berlin"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimeZone(Tz);

impl TimeZone {
    /// Coordinated Universal Time, the default.
    pub const UTC: Self = Self(Tz::UTC);

    /// The zone named `name` exactly as the IANA database spells it; otherwise a
    /// [`TimeZoneError`] with code `job_schedule.invalid_time_zone` (and, when only the case
    /// differs, the right spelling).
    pub fn parse(name: &str) -> Result<Self, TimeZoneError> {
        Tz::from_str(name).map(Self).map_err(|_| TimeZoneError {
            name: name.to_owned(),
            suggestion: chrono_tz::TZ_VARIANTS
                .iter()
                .find(|tz| tz.name().eq_ignore_ascii_case(name.trim()))
                .map(|tz| tz.name()),
        })
    }

    /// The IANA name.
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    pub(crate) fn tz(self) -> Tz {
        self.0
    }
}

impl Default for TimeZone {
    fn default() -> Self {
        Self::UTC
    }
}

impl fmt::Display for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TimeZone {
    type Err = TimeZoneError;

    /// Same as [`TimeZone::parse`].
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::parse(name)
    }
}

/// A time zone name that is not in the IANA database.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown time zone `{name}`")]
pub struct TimeZoneError {
    name: String,
    suggestion: Option<&'static str>,
}

impl TimeZoneError {
    /// Stable error code: `job_schedule.invalid_time_zone`.
    pub fn code(&self) -> &'static str {
        "job_schedule.invalid_time_zone"
    }

    /// The rejected name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The database's spelling of a name that differs only in case (`europe/berlin`).
    pub fn suggestion(&self) -> Option<&'static str> {
        self.suggestion
    }
}
