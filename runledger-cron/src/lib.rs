//! Cron expressions and time zones for Runledger job schedules, shared by the engine and the
//! `#[schedule]` macro so that an expression the macro accepts is one the scheduler runs.
//!
//! [`CronSchedule::parse`] accepts three spellings, all with **crontab's weekday numbering**:
//! `0` and `7` are Sunday, `1` is Monday, ..., `6` is Saturday, and names (`MON-FRI`, `sun`)
//! work in every form:
//!
//! * **Standard 5-field cron**: `min hour day-of-month month day-of-week` (fires at second 0).
//! * **Seconds syntax** (6 or 7 fields): `sec min hour day-of-month month day-of-week [year]`.
//!   `0 0 3 * * 1-5` is 03:00 Monday to Friday, like the 5-field `0 3 * * 1-5`.
//! * **Aliases**: `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight` and
//!   `@hourly` (case-insensitive).
//!
//! Fields take `*`, lists, ranges and steps (`*/15`, `9-17`, `1-5/2`, `5/15` from 5 to the end),
//! month and weekday names, and the extensions `L` (last day of the month, or last weekday as in
//! `5#L`), `W` (nearest weekday) and `#` (nth weekday, `1#2` is the second Monday). When both
//! day-of-month and day-of-week are restricted, a fire must match **both** (`0 0 1 * MON` fires
//! on a first of the month that is a Monday). Leading and trailing whitespace is trimmed and runs
//! of whitespace between fields collapse to one space, so a field cannot contain whitespace.
//!
//! An expression that matches no date at all (`0 0 30 2 *`: February never has a 30th) is
//! refused like a malformed one.
//!
//! **Time zones.** A schedule is evaluated in UTC unless it names an IANA time zone
//! ([`TimeZone::parse`], [`CronSchedule::parse_in`]); fires are then wall-clock times there and
//! are computed across daylight-saving changes: a fire in an hour the clock skips (02:30 on a
//! spring-forward night) happens at the first valid time after the gap, the same day; a
//! fixed-time fire in an hour the clock repeats (autumn) happens once, on the first pass;
//! schedules with a wildcard or step in the time fields follow the wall clock through both.
//! Evaluation is done by the `croner` crate; zones come from the IANA database of `chrono-tz`.

#![forbid(unsafe_code)]

mod time_zone;

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SubsecRound, TimeDelta, TimeZone as _, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

pub use time_zone::{TimeZone, TimeZoneError};

/// The stable error code of an unparsable cron expression.
const INVALID_CRON_CODE: &str = "job_schedule.invalid_cron";

/// The aliases and the explicit 6-field expressions they stand for.
const ALIASES: [(&str, &str); 7] = [
    ("@yearly", "0 0 0 1 1 *"),
    ("@annually", "0 0 0 1 1 *"),
    ("@monthly", "0 0 0 1 * *"),
    ("@weekly", "0 0 0 * * SUN"),
    ("@daily", "0 0 0 * * *"),
    ("@midnight", "0 0 0 * * *"),
    ("@hourly", "0 0 * * * *"),
];

/// A parsed cron expression and the time zone it is evaluated in.
///
/// Two schedules are equal when their normalized expressions and time zones are equal.
#[derive(Clone, Debug)]
pub struct CronSchedule {
    cron: Cron,
    normalized: String,
    time_zone: TimeZone,
}

impl CronSchedule {
    /// Parses a 5-field expression, a 6- or 7-field expression (seconds first, optional year)
    /// or an `@hourly`-style alias, evaluated in UTC; see the [crate documentation](crate) for
    /// the exact rules.
    ///
    /// Blank input, a wrong number of fields, an unknown alias, a value out of range, or an
    /// expression that matches no date is a [`CronError`] with code
    /// `job_schedule.invalid_cron`.
    ///
    /// ```
    /// use chrono::{TimeZone, Utc};
    /// use runledger_cron::CronSchedule;
    ///
    /// // Every 15 minutes from 09:00 to 17:45, Monday to Friday.
    /// let cron = CronSchedule::parse("*/15 9-17 * * 1-5").unwrap();
    /// assert_eq!(cron.normalized(), "0 */15 9-17 * * 1-5");
    ///
    /// // Friday 2024-01-05 17:50 UTC: the next fire is Monday 09:00.
    /// let friday_evening = Utc.with_ymd_and_hms(2024, 1, 5, 17, 50, 0).unwrap();
    /// let monday_morning = Utc.with_ymd_and_hms(2024, 1, 8, 9, 0, 0).unwrap();
    /// assert_eq!(cron.next_after(friday_evening), Some(monday_morning));
    ///
    /// // The seconds syntax numbers weekdays the same way.
    /// assert_eq!(
    ///     CronSchedule::parse("0 0 9 * * 1-5").unwrap().next_after(friday_evening),
    ///     Some(monday_morning)
    /// );
    /// assert_eq!(CronSchedule::parse("@daily").unwrap().normalized(), "0 0 0 * * *");
    ///
    /// let err = CronSchedule::parse("0 0 30 2 *").unwrap_err();
    /// assert_eq!(err.code(), "job_schedule.invalid_cron");
    /// assert_eq!(err.to_string(), "invalid cron expression `0 0 30 2 *`");
    /// ```
    pub fn parse(expr: &str) -> Result<Self, CronError> {
        Self::parse_in(expr, TimeZone::UTC)
    }

    /// Parses `expr` (as [`parse`](Self::parse)) to be evaluated in `time_zone`.
    ///
    /// ```
    /// use chrono::{TimeZone as _, Utc};
    /// use runledger_cron::{CronSchedule, TimeZone};
    ///
    /// let berlin = TimeZone::parse("Europe/Berlin").unwrap();
    /// let cron = CronSchedule::parse_in("0 9 * * *", berlin).unwrap();
    /// // 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
    /// let january = Utc.with_ymd_and_hms(2024, 1, 10, 0, 0, 0).unwrap();
    /// assert_eq!(cron.next_after(january), Some(Utc.with_ymd_and_hms(2024, 1, 10, 8, 0, 0).unwrap()));
    /// let july = Utc.with_ymd_and_hms(2024, 7, 10, 0, 0, 0).unwrap();
    /// assert_eq!(cron.next_after(july), Some(Utc.with_ymd_and_hms(2024, 7, 10, 7, 0, 0).unwrap()));
    /// ```
    pub fn parse_in(expr: &str, time_zone: TimeZone) -> Result<Self, CronError> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let collapsed = fields.join(" ");
        let invalid = |reason: String| CronError {
            expression: collapsed.clone(),
            reason,
            never_fires: false,
        };
        let normalized = normalize(&fields).map_err(&invalid)?;
        check_ranges(&normalized).map_err(&invalid)?;
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Optional)
            .dom_and_dow(true)
            .sloppy_ranges(true)
            .build()
            .parse(&normalized)
            .map_err(|err| invalid(format!("parsing `{normalized}` failed: {err}")))?;
        let schedule = Self {
            cron,
            normalized,
            time_zone,
        };
        if schedule.next_after(DateTime::UNIX_EPOCH).is_none() {
            return Err(CronError {
                never_fires: true,
                ..invalid("it never fires: no date matches all of its fields".to_owned())
            });
        }
        Ok(schedule)
    }

    /// The normalized expression: 6 or 7 single-space-separated fields with seconds first
    /// (weekdays numbered as in crontab).
    pub fn normalized(&self) -> &str {
        &self.normalized
    }

    /// The time zone the expression is evaluated in.
    pub fn time_zone(&self) -> TimeZone {
        self.time_zone
    }

    /// The first fire strictly after `after`, or `None` when the schedule never fires again
    /// (its year field lies in the past, or the search passes the year 5000). Fires fall on
    /// whole seconds.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Searching from the whole second at or before `after`, exclusively, gives the first
        // fire strictly after `after`; stop before the search overflows.
        after.checked_add_signed(TimeDelta::seconds(1))?;
        let start = after.trunc_subsecs(0);
        let local = self.time_zone.tz().from_utc_datetime(&start.naive_utc());
        let fire = self.cron.find_next_occurrence(&local, false).ok()?;
        Some(fire.with_timezone(&Utc)).filter(|fire| *fire > after)
    }

    /// The cursor's successor, used after materializing the fire at `cursor`: the first fire
    /// strictly after the later of `cursor` and `now`.
    ///
    /// While the scheduler keeps up this is simply the next fire after `cursor`. After downtime
    /// (a stale `cursor`) the missed fires in between are skipped, so at most one stale fire is
    /// materialized and the cursor jumps to the next fire in the future.
    pub fn next_fire_for_cursor(
        &self,
        cursor: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        self.next_after(cursor.max(now))
    }
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.normalized == other.normalized && self.time_zone == other.time_zone
    }
}

impl Eq for CronSchedule {}

impl FromStr for CronSchedule {
    type Err = CronError;

    /// Same as [`CronSchedule::parse`].
    fn from_str(expr: &str) -> Result<Self, Self::Err> {
        Self::parse(expr)
    }
}

impl fmt::Display for CronSchedule {
    /// Writes the [normalized](CronSchedule::normalized) expression, and the time zone unless
    /// it is UTC.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.normalized)?;
        if self.time_zone != TimeZone::UTC {
            write!(f, " ({})", self.time_zone)?;
        }
        Ok(())
    }
}

/// The 6- or 7-field form of an expression's whitespace-separated fields.
fn normalize(fields: &[&str]) -> Result<String, String> {
    match fields {
        [] => Err("the expression is blank".to_owned()),
        [alias] if alias.starts_with('@') => ALIASES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(alias))
            .map(|(_, expansion)| (*expansion).to_owned())
            .ok_or_else(|| {
                format!(
                    "unknown alias `{alias}`; expected @yearly, @annually, @monthly, @weekly, \
                     @daily, @midnight or @hourly"
                )
            }),
        _ => {
            if let Some(field) = fields.iter().find(|field| is_split_field(field)) {
                return Err(format!(
                    "field `{field}` is incomplete; fields must not contain whitespace"
                ));
            }
            if let Some(field) = fields.iter().find(|field| field.contains(",,")) {
                return Err(format!("field `{field}` has an empty list element"));
            }
            match fields.len() {
                5 => Ok(format!("0 {}", fields.join(" "))),
                6 | 7 => Ok(fields.join(" ")),
                count => Err(format!(
                    "expected 5 fields (minute hour day-of-month month day-of-week), 6 or 7 \
                     fields (second minute hour day-of-month month day-of-week [year]) or an \
                     @alias, got {count} fields"
                )),
            }
        }
    }
}

/// The name and range of each field of the normalized form.
const FIELDS: [(&str, u32, u32); 7] = [
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
    ("year", 1970, 4999),
];

/// Reports the first number outside its field's range by field name (`hour 61 is out of range
/// 0-23`); steps (after `/`) and `#` occurrences are left to the parser.
fn check_ranges(normalized: &str) -> Result<(), String> {
    for (field, &(name, min, max)) in normalized.split(' ').zip(FIELDS.iter()) {
        for element in field.split(',') {
            let values = element.split(['/', '#']).next().unwrap_or_default();
            for value in values.split('-') {
                let digits = value.trim_end_matches(['L', 'W', 'l', 'w']);
                if let Ok(number) = digits.parse::<u32>()
                    && !(min..=max).contains(&number)
                {
                    return Err(format!("{name} {number} is out of range {min}-{max}"));
                }
            }
        }
    }
    Ok(())
}

/// Whether a whitespace-separated token is only part of a field (`1,` in `1, 2`), which would
/// make the field count ambiguous.
fn is_split_field(field: &str) -> bool {
    const JOINERS: [char; 3] = [',', '-', '/'];
    field.starts_with(JOINERS) || field.ends_with(JOINERS)
}

/// A cron expression that could not be parsed, or that never fires.
///
/// Its `Display` names only the expression and is safe to show to clients; the reason is in
/// [`CronError::internal_message`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron expression `{expression}`")]
pub struct CronError {
    expression: String,
    reason: String,
    never_fires: bool,
}

impl CronError {
    /// Stable error code: `job_schedule.invalid_cron`.
    pub fn code(&self) -> &'static str {
        INVALID_CRON_CODE
    }

    /// The rejected expression, trimmed and with whitespace runs collapsed.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Whether the expression is well-formed but matches no date (`0 0 30 2 *`).
    pub fn never_fires(&self) -> bool {
        self.never_fires
    }

    /// Why the expression was rejected, for logs.
    pub fn internal_message(&self) -> String {
        self.reason.clone()
    }
}

#[cfg(test)]
mod tests;
