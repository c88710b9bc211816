//! Cron expressions for Runledger job schedules, always evaluated in UTC.
//!
//! [`CronSchedule::parse`] accepts three spellings and normalizes each to the 6- or 7-field
//! syntax of the `cron` crate (seconds first, optional year last):
//!
//! * **Seconds syntax** (6 or 7 fields): `sec min hour day-of-month month day-of-week [year]`,
//!   passed through as is. Here day-of-week numbers run `1`-`7` with **Sunday = 1**
//!   (`2-6` is Monday to Friday), as in the `cron` crate and Quartz.
//! * **Standard 5-field cron**: `min hour day-of-month month day-of-week`, prefixed with a
//!   `0` seconds field. Day-of-week numbers use the classic crontab numbering `0`-`7` with
//!   **Sunday = 0 or 7** (`1-5` is Monday to Friday) and are rewritten to the crate's
//!   numbering, so `0 9 * * 1-5` becomes `0 0 9 * * 2-6`. Numeric points, ranges, lists and
//!   steps are translated (`*/2` is Sunday, Tuesday, Thursday, Saturday, as in crontab);
//!   day names (`MON-FRI`, `sun`) need no translation and pass through unchanged.
//! * **Aliases**: `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight` and
//!   `@hourly` (case-insensitive), rewritten to explicit 6-field expressions.
//!
//! Leading and trailing whitespace is trimmed and runs of whitespace between fields collapse
//! to one space, so a field must not itself contain whitespace (`1, 2` is rejected).
//!
//! Unlike classic crontab, a fire must match **both** day-of-month and day-of-week when both
//! are restricted: `0 0 1 * MON` fires on the first of the month only when it is a Monday.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeDelta, Utc};

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

/// A parsed cron expression, evaluated in UTC.
///
/// Two schedules are equal when their normalized expressions are equal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronSchedule {
    schedule: cron::Schedule,
    normalized: String,
}

impl CronSchedule {
    /// Parses a 6- or 7-field expression (seconds first), a standard 5-field expression or an
    /// `@hourly`-style alias; see the [crate documentation](crate) for the exact rules.
    ///
    /// Blank input, a wrong number of fields, an unknown alias or a value out of range is a
    /// [`CronError`] with code `job_schedule.invalid_cron`.
    ///
    /// ```
    /// use chrono::{TimeZone, Utc};
    /// use runledger_cron::CronSchedule;
    ///
    /// // Standard 5-field cron: every 15 minutes from 09:00 to 17:45, Monday to Friday.
    /// let cron = CronSchedule::parse("*/15 9-17 * * 1-5").unwrap();
    /// assert_eq!(cron.normalized(), "0 */15 9-17 * * 2-6");
    ///
    /// // Friday 2024-01-05 17:50 UTC: the next fire is Monday 09:00.
    /// let friday_evening = Utc.with_ymd_and_hms(2024, 1, 5, 17, 50, 0).unwrap();
    /// let monday_morning = Utc.with_ymd_and_hms(2024, 1, 8, 9, 0, 0).unwrap();
    /// assert_eq!(cron.next_after(friday_evening), Some(monday_morning));
    ///
    /// // Seconds syntax and aliases.
    /// assert_eq!(CronSchedule::parse("30 0 * * * *").unwrap().normalized(), "30 0 * * * *");
    /// assert_eq!(CronSchedule::parse("@daily").unwrap().normalized(), "0 0 0 * * *");
    ///
    /// let err = CronSchedule::parse("61 * * * *").unwrap_err();
    /// assert_eq!(err.code(), "job_schedule.invalid_cron");
    /// assert_eq!(err.to_string(), "invalid cron expression `61 * * * *`");
    /// ```
    pub fn parse(expr: &str) -> Result<Self, CronError> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let collapsed = fields.join(" ");
        let invalid = |reason: String| CronError {
            expression: collapsed.clone(),
            reason,
        };

        let normalized = match fields.as_slice() {
            [] => return Err(invalid("the expression is blank".to_owned())),
            [alias] if alias.starts_with('@') => ALIASES
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(alias))
                .map(|(_, expansion)| (*expansion).to_owned())
                .ok_or_else(|| {
                    invalid(format!(
                        "unknown alias `{alias}`; expected @yearly, @annually, @monthly, \
                         @weekly, @daily, @midnight or @hourly"
                    ))
                })?,
            _ => {
                if let Some(field) = fields.iter().find(|field| is_split_field(field)) {
                    return Err(invalid(format!(
                        "field `{field}` is incomplete; fields must not contain whitespace"
                    )));
                }
                match fields.as_slice() {
                    [minute, hour, day_of_month, month, day_of_week] => {
                        let day_of_week = translate_day_of_week(day_of_week).map_err(&invalid)?;
                        format!("0 {minute} {hour} {day_of_month} {month} {day_of_week}")
                    }
                    [_, _, _, _, _, _] | [_, _, _, _, _, _, _] => collapsed.clone(),
                    _ => {
                        return Err(invalid(format!(
                            "expected 5 fields (minute hour day-of-month month day-of-week), \
                             6 or 7 fields (second minute hour day-of-month month day-of-week \
                             [year]) or an @alias, got {} fields",
                            fields.len()
                        )));
                    }
                }
            }
        };

        let schedule = cron::Schedule::from_str(&normalized)
            .map_err(|err| invalid(crate_reason(&normalized, &err.to_string())))?;
        Ok(Self {
            schedule,
            normalized,
        })
    }

    /// The normalized expression: 6 or 7 single-space-separated fields with seconds first,
    /// in the `cron` crate's syntax (day-of-week `1`-`7`, Sunday = 1).
    pub fn normalized(&self) -> &str {
        &self.normalized
    }

    /// The first fire strictly after `after`, or `None` when the schedule never fires again
    /// (e.g. its year field lies in the past, or beyond the year 2100 the crate supports).
    /// Fires fall on whole seconds.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // The crate starts its search one second after `after`; stop before that overflows.
        after.checked_add_signed(TimeDelta::seconds(1))?;
        self.schedule.after(&after).find(|fire| *fire > after)
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

impl FromStr for CronSchedule {
    type Err = CronError;

    /// Same as [`CronSchedule::parse`].
    fn from_str(expr: &str) -> Result<Self, Self::Err> {
        Self::parse(expr)
    }
}

impl fmt::Display for CronSchedule {
    /// Writes the [normalized](CronSchedule::normalized) expression.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.normalized)
    }
}

/// A cron expression that could not be parsed.
///
/// Its `Display` names only the expression and is safe to show to clients; the parser's
/// reason is in [`CronError::internal_message`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron expression `{expression}`")]
pub struct CronError {
    expression: String,
    reason: String,
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

    /// Why the expression was rejected, for logs.
    pub fn internal_message(&self) -> String {
        self.reason.clone()
    }
}

/// Turns the `cron` crate's multi-line parse error (the input, a caret line, the message) into
/// one line: `parsing `<expr>` failed at character <n>: <message>`.
fn crate_reason(normalized: &str, error: &str) -> String {
    let lines: Vec<&str> = error.lines().collect();
    let (position, message) = match lines.as_slice() {
        [_, caret, message @ ..] if caret.trim() == "^" => {
            (caret.find('^').map(|column| column + 1), message.join(" "))
        }
        _ => (None, lines.join(" ")),
    };
    let message = message.trim();
    let mut reason = format!("parsing `{normalized}` failed");
    if let Some(position) = position {
        reason.push_str(&format!(" at character {position}"));
    }
    if !message.is_empty() {
        reason.push_str(": ");
        reason.push_str(message);
    }
    reason
}

/// Whether a whitespace-separated token is only part of a field (`1,` in `1, 2`), which would
/// make the field count ambiguous.
fn is_split_field(field: &str) -> bool {
    const JOINERS: [char; 3] = [',', '-', '/'];
    field.starts_with(JOINERS) || field.ends_with(JOINERS)
}

/// Rewrites a crontab day-of-week field (Sunday = 0 or 7) to the `cron` crate's numbering
/// (Sunday = 1). List elements containing names, and a bare `*` or `?`, are left unchanged.
fn translate_day_of_week(field: &str) -> Result<String, String> {
    field
        .split(',')
        .map(|element| translate_day_of_week_element(field, element))
        .collect::<Result<Vec<_>, _>>()
        .map(|elements| elements.join(","))
}

fn translate_day_of_week_element(field: &str, element: &str) -> Result<String, String> {
    const MAX: u32 = 7;
    let bad = |problem: &str| format!("day-of-week `{field}`: {problem}");

    if element.is_empty() {
        return Err(bad("empty list element"));
    }
    if element == "*" || element == "?" || element.chars().any(|c| c.is_ascii_alphabetic()) {
        return Ok(element.to_owned());
    }

    let number = |text: &str| -> Result<u32, String> {
        text.parse::<u32>()
            .ok()
            .filter(|value| *value <= MAX)
            .ok_or_else(|| bad(&format!("`{text}` is not a day number from 0 to 7")))
    };

    let (base, step) = match element.split_once('/') {
        Some((base, step)) => {
            let step = step
                .parse::<u32>()
                .ok()
                .filter(|step| (1..=MAX).contains(step))
                .ok_or_else(|| bad(&format!("step `{step}` must be from 1 to 7")))?;
            (base, Some(step))
        }
        None => (element, None),
    };
    let (start, end) = if base == "*" || base == "?" {
        (0, MAX)
    } else if let Some((start, end)) = base.split_once('-') {
        let (start, end) = (number(start)?, number(end)?);
        if start > end {
            return Err(bad(&format!("range `{base}` runs backwards")));
        }
        (start, end)
    } else {
        let start = number(base)?;
        // As in crontab and the `cron` crate, `N/step` runs from N to the maximum.
        (start, if step.is_some() { MAX } else { start })
    };

    let step = step.unwrap_or(1);
    let mut crate_days: Vec<u32> = (start..=end)
        .filter(|day| (day - start) % step == 0)
        .map(|day| day % 7 + 1)
        .collect();
    crate_days.sort_unstable();
    crate_days.dedup();
    Ok(compress_days(&crate_days))
}

/// Writes sorted, distinct day numbers as a list of points and ranges (`1,3-5`).
fn compress_days(days: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for &day in days {
        run = match run {
            Some((first, last)) if day == last + 1 => Some((first, day)),
            Some(previous) => {
                parts.push(format_run(previous));
                Some((day, day))
            }
            None => Some((day, day)),
        };
    }
    if let Some(last) = run {
        parts.push(format_run(last));
    }
    parts.join(",")
}

fn format_run((first, last): (u32, u32)) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Datelike, TimeZone, Timelike, Weekday};

    use super::*;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    fn fires(cron: &CronSchedule, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut fires = Vec::with_capacity(count);
        let mut cursor = after;
        for _ in 0..count {
            cursor = cron.next_after(cursor).unwrap();
            fires.push(cursor);
        }
        fires
    }

    fn weekdays(fires: &[DateTime<Utc>]) -> Vec<Weekday> {
        fires.iter().map(|fire| fire.weekday()).collect()
    }

    /// 2024-01-07 is a Sunday.
    fn sunday_noon() -> DateTime<Utc> {
        utc(2024, 1, 7, 12, 0, 0)
    }

    #[test]
    fn parses_six_field_expressions_as_is() {
        let cron = CronSchedule::parse("30 */10 * * * *").unwrap();
        assert_eq!(cron.normalized(), "30 */10 * * * *");
        assert_eq!(cron.to_string(), "30 */10 * * * *");
        let after = utc(2024, 3, 1, 10, 0, 0);
        assert_eq!(
            fires(&cron, after, 3),
            vec![
                utc(2024, 3, 1, 10, 0, 30),
                utc(2024, 3, 1, 10, 10, 30),
                utc(2024, 3, 1, 10, 20, 30),
            ]
        );
    }

    #[test]
    fn parses_seven_field_expressions_with_a_year() {
        let cron = CronSchedule::parse("0 0 12 1 1 * 2030").unwrap();
        assert_eq!(cron.normalized(), "0 0 12 1 1 * 2030");
        assert_eq!(
            cron.next_after(sunday_noon()),
            Some(utc(2030, 1, 1, 12, 0, 0))
        );
        assert_eq!(cron.next_after(utc(2030, 1, 1, 12, 0, 0)), None);
    }

    #[test]
    fn six_field_day_of_week_uses_the_crate_numbering() {
        // Sunday = 1 in the seconds syntax: 2-6 is Monday to Friday, passed through as is.
        let cron = CronSchedule::parse("0 0 9 * * 2-6").unwrap();
        assert_eq!(cron.normalized(), "0 0 9 * * 2-6");
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 5)),
            vec![
                Weekday::Mon,
                Weekday::Tue,
                Weekday::Wed,
                Weekday::Thu,
                Weekday::Fri
            ]
        );
        assert_eq!(
            CronSchedule::parse("0 0 0 * * 0").unwrap_err().code(),
            "job_schedule.invalid_cron"
        );
    }

    #[test]
    fn five_field_expressions_get_a_zero_seconds_field() {
        let cron = CronSchedule::parse("*/5 * * * *").unwrap();
        assert_eq!(cron.normalized(), "0 */5 * * * *");
        let after = utc(2024, 3, 1, 10, 2, 17);
        let fires = fires(&cron, after, 4);
        assert_eq!(
            fires,
            vec![
                utc(2024, 3, 1, 10, 5, 0),
                utc(2024, 3, 1, 10, 10, 0),
                utc(2024, 3, 1, 10, 15, 0),
                utc(2024, 3, 1, 10, 20, 0),
            ]
        );
        assert!(fires.iter().all(|fire| fire.second() == 0));
        assert!(
            fires
                .windows(2)
                .all(|pair| pair[1] - pair[0] == TimeDelta::minutes(5))
        );
    }

    #[test]
    fn whitespace_is_trimmed_and_collapsed() {
        let cron = CronSchedule::parse("  */5 \t *   * *\n*  ").unwrap();
        assert_eq!(cron.normalized(), "0 */5 * * * *");
        let cron = CronSchedule::parse(" 0  0   * * * * ").unwrap();
        assert_eq!(cron.normalized(), "0 0 * * * *");
        let cron = CronSchedule::parse("\t@hourly\n").unwrap();
        assert_eq!(cron.normalized(), "0 0 * * * *");
    }

    #[test]
    fn five_field_weekday_range_fires_monday_to_friday() {
        let cron = CronSchedule::parse("0 9 * * 1-5").unwrap();
        assert_eq!(cron.normalized(), "0 0 9 * * 2-6");
        assert_eq!(
            fires(&cron, sunday_noon(), 6),
            vec![
                utc(2024, 1, 8, 9, 0, 0),
                utc(2024, 1, 9, 9, 0, 0),
                utc(2024, 1, 10, 9, 0, 0),
                utc(2024, 1, 11, 9, 0, 0),
                utc(2024, 1, 12, 9, 0, 0),
                utc(2024, 1, 15, 9, 0, 0),
            ]
        );
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 6)),
            vec![
                Weekday::Mon,
                Weekday::Tue,
                Weekday::Wed,
                Weekday::Thu,
                Weekday::Fri,
                Weekday::Mon
            ]
        );
    }

    #[test]
    fn five_field_weekend_list_and_sunday_spellings() {
        let weekend = CronSchedule::parse("0 0 * * 0,6").unwrap();
        assert_eq!(weekend.normalized(), "0 0 0 * * 1,7");
        assert_eq!(
            fires(&weekend, sunday_noon(), 3),
            vec![
                utc(2024, 1, 13, 0, 0, 0),
                utc(2024, 1, 14, 0, 0, 0),
                utc(2024, 1, 20, 0, 0, 0),
            ]
        );
        assert_eq!(
            weekdays(&fires(&weekend, sunday_noon(), 4)),
            vec![Weekday::Sat, Weekday::Sun, Weekday::Sat, Weekday::Sun]
        );

        for sunday in ["0 0 * * 0", "0 0 * * 7", "0 0 * * SUN", "0 0 * * sun"] {
            let cron = CronSchedule::parse(sunday).unwrap();
            assert_eq!(
                weekdays(&fires(&cron, sunday_noon(), 3)),
                vec![Weekday::Sun; 3],
                "{sunday}"
            );
        }

        // A range ending in 7 wraps to Sunday.
        let cron = CronSchedule::parse("0 0 * * 5-7").unwrap();
        assert_eq!(cron.normalized(), "0 0 0 * * 1,6-7");
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 3)),
            vec![Weekday::Fri, Weekday::Sat, Weekday::Sun]
        );
    }

    #[test]
    fn five_field_day_of_week_steps_and_names() {
        // As in crontab, */2 is Sunday, Tuesday, Thursday and Saturday.
        let cron = CronSchedule::parse("0 0 * * */2").unwrap();
        assert_eq!(cron.normalized(), "0 0 0 * * 1,3,5,7");
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 4)),
            vec![Weekday::Tue, Weekday::Thu, Weekday::Sat, Weekday::Sun]
        );

        let cron = CronSchedule::parse("0 0 * * 1-5/2").unwrap();
        assert_eq!(cron.normalized(), "0 0 0 * * 2,4,6");
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 3)),
            vec![Weekday::Mon, Weekday::Wed, Weekday::Fri]
        );

        // Names and mixed lists: names pass through, numbers are translated.
        let cron = CronSchedule::parse("0 9 * * MON-FRI").unwrap();
        assert_eq!(cron.normalized(), "0 0 9 * * MON-FRI");
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 5)),
            vec![
                Weekday::Mon,
                Weekday::Tue,
                Weekday::Wed,
                Weekday::Thu,
                Weekday::Fri
            ]
        );
        let cron = CronSchedule::parse("0 9 * * MON,5").unwrap();
        assert_eq!(cron.normalized(), "0 0 9 * * MON,6");
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 2)),
            vec![Weekday::Mon, Weekday::Fri]
        );

        // `*` and `?` need no translation.
        assert_eq!(
            CronSchedule::parse("0 9 * * *").unwrap().normalized(),
            "0 0 9 * * *"
        );
        assert_eq!(
            CronSchedule::parse("0 9 1 * ?").unwrap().normalized(),
            "0 0 9 1 * ?"
        );
    }

    #[test]
    fn aliases_expand_to_explicit_expressions() {
        let cases = [
            ("@yearly", "0 0 0 1 1 *", utc(2025, 1, 1, 0, 0, 0)),
            ("@annually", "0 0 0 1 1 *", utc(2025, 1, 1, 0, 0, 0)),
            ("@monthly", "0 0 0 1 * *", utc(2024, 2, 1, 0, 0, 0)),
            ("@weekly", "0 0 0 * * SUN", utc(2024, 1, 14, 0, 0, 0)),
            ("@daily", "0 0 0 * * *", utc(2024, 1, 8, 0, 0, 0)),
            ("@midnight", "0 0 0 * * *", utc(2024, 1, 8, 0, 0, 0)),
            ("@hourly", "0 0 * * * *", utc(2024, 1, 7, 13, 0, 0)),
            ("@DAILY", "0 0 0 * * *", utc(2024, 1, 8, 0, 0, 0)),
        ];
        for (alias, normalized, next) in cases {
            let cron = CronSchedule::parse(alias).unwrap();
            assert_eq!(cron.normalized(), normalized, "{alias}");
            assert_eq!(cron.next_after(sunday_noon()), Some(next), "{alias}");
        }

        // @weekly keeps firing on Sundays at midnight.
        let weekly = CronSchedule::parse("@weekly").unwrap();
        assert_eq!(
            fires(&weekly, sunday_noon(), 2),
            vec![utc(2024, 1, 14, 0, 0, 0), utc(2024, 1, 21, 0, 0, 0)]
        );
    }

    #[test]
    fn invalid_expressions_are_rejected() {
        for expr in [
            "",
            "   \t ",
            "not cron",
            "61 * * * *",
            "* * *",
            "* * * *",
            "* * * * * * * *",
            "@reboot",
            "@hourly *",
            "0 0 * * 8",
            "0 0 * * 5-1",
            "0 0 * * */0",
            "0 0 * * 1,,2",
            "0 0 * * 1-",
            "0 0 * * FUNDAY",
            "0 0 32 * *",
            "0 0 * 13 *",
            "0 1, 2 * * *",
            "0 0 0 * * 8",
            "60 * * * * *",
            "0 0 0 * * * 1969",
        ] {
            let err = CronSchedule::parse(expr).unwrap_err();
            assert_eq!(err.code(), "job_schedule.invalid_cron", "{expr:?}");
            assert!(!err.internal_message().trim().is_empty(), "{expr:?}");
            assert!(!err.internal_message().contains('\n'), "{expr:?}");
            assert_eq!(
                err.to_string(),
                format!("invalid cron expression `{}`", err.expression()),
                "{expr:?}"
            );
        }
    }

    #[test]
    fn errors_name_the_expression_and_keep_the_reason_internal() {
        let err = CronSchedule::parse("  61   * * * * ").unwrap_err();
        assert_eq!(err.to_string(), "invalid cron expression `61 * * * *`");
        assert_eq!(err.expression(), "61 * * * *");
        assert!(!err.internal_message().is_empty());
        assert!(!err.to_string().contains(&err.internal_message()));
        // The crate's multi-line error is flattened to one line naming the position.
        let reason = err.internal_message();
        assert!(
            reason.starts_with("parsing `0 61 * * * *` failed at character 3: "),
            "{reason}"
        );
        assert!(reason.contains("'61' specified"), "{reason}");

        let err = CronSchedule::parse("").unwrap_err();
        assert_eq!(err.to_string(), "invalid cron expression ``");
        assert_eq!(err.internal_message(), "the expression is blank");

        let err = CronSchedule::parse("* * *").unwrap_err();
        assert!(err.internal_message().contains("got 3 fields"));

        let err = "not cron".parse::<CronSchedule>().unwrap_err();
        assert_eq!(err.code(), "job_schedule.invalid_cron");
    }

    #[test]
    fn next_after_is_strictly_after() {
        let cron = CronSchedule::parse("* * * * *").unwrap();
        let on_fire = utc(2024, 3, 1, 10, 0, 0);
        assert_eq!(cron.next_after(on_fire), Some(utc(2024, 3, 1, 10, 1, 0)));
        let just_before = on_fire - TimeDelta::nanoseconds(1);
        assert_eq!(cron.next_after(just_before), Some(on_fire));
        let just_after = on_fire + TimeDelta::milliseconds(500);
        assert_eq!(cron.next_after(just_after), Some(utc(2024, 3, 1, 10, 1, 0)));

        let every_second = CronSchedule::parse("* * * * * *").unwrap();
        assert_eq!(
            every_second.next_after(on_fire),
            Some(utc(2024, 3, 1, 10, 0, 1))
        );
        assert_eq!(
            every_second.next_after(just_after),
            Some(utc(2024, 3, 1, 10, 0, 1))
        );

        for after in [on_fire, just_before, just_after] {
            assert!(cron.next_after(after).unwrap() > after);
        }
    }

    #[test]
    fn next_after_at_the_end_of_time_is_none() {
        let cron = CronSchedule::parse("* * * * * *").unwrap();
        assert_eq!(cron.next_after(DateTime::<Utc>::MAX_UTC), None);
        assert_eq!(cron.next_after(utc(2101, 1, 1, 0, 0, 0)), None);
    }

    #[test]
    fn next_fire_for_a_stale_cursor_jumps_to_the_future() {
        let cron = CronSchedule::parse("* * * * *").unwrap();
        let now = utc(2024, 3, 1, 10, 7, 30);
        let stale_cursor = utc(2024, 3, 1, 10, 2, 0);
        let next = cron.next_fire_for_cursor(stale_cursor, now).unwrap();
        assert_eq!(next, utc(2024, 3, 1, 10, 8, 0));
        assert!(next > now);

        // Now exactly on a fire: that fire is skipped as well, the cursor lands after now.
        let now = utc(2024, 3, 1, 10, 7, 0);
        assert_eq!(
            cron.next_fire_for_cursor(stale_cursor, now),
            Some(utc(2024, 3, 1, 10, 8, 0))
        );
    }

    #[test]
    fn next_fire_for_a_current_cursor_follows_the_cursor() {
        let cron = CronSchedule::parse("* * * * *").unwrap();
        let cursor = utc(2024, 3, 1, 10, 2, 0);
        let now = cursor + TimeDelta::milliseconds(250);
        assert_eq!(
            cron.next_fire_for_cursor(cursor, now),
            Some(utc(2024, 3, 1, 10, 3, 0))
        );
        // A cursor ahead of the clock (early pass) still advances from the cursor.
        let early = cursor - TimeDelta::seconds(2);
        assert_eq!(
            cron.next_fire_for_cursor(cursor, early),
            Some(utc(2024, 3, 1, 10, 3, 0))
        );
    }

    #[test]
    fn schedules_compare_by_normalized_expression() {
        assert_eq!(
            CronSchedule::parse("0 9 * * 1-5").unwrap(),
            CronSchedule::parse("0 0 9 * * 2-6").unwrap()
        );
        assert_eq!(
            CronSchedule::parse("@daily").unwrap(),
            CronSchedule::parse("@midnight").unwrap()
        );
        assert_ne!(
            CronSchedule::parse("@daily").unwrap(),
            CronSchedule::parse("@hourly").unwrap()
        );
    }
}
