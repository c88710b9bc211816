use chrono::{Datelike, TimeZone as _, Timelike, Weekday};

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

const MONDAY_TO_FRIDAY: [Weekday; 5] = [
    Weekday::Mon,
    Weekday::Tue,
    Weekday::Wed,
    Weekday::Thu,
    Weekday::Fri,
];

fn berlin() -> TimeZone {
    TimeZone::parse("Europe/Berlin").unwrap()
}

#[test]
fn parses_six_field_expressions_as_is() {
    let cron = CronSchedule::parse("30 */10 * * * *").unwrap();
    assert_eq!(cron.normalized(), "30 */10 * * * *");
    assert_eq!(cron.to_string(), "30 */10 * * * *");
    assert_eq!(
        fires(&cron, utc(2024, 3, 1, 10, 0, 0), 3),
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
fn one_weekday_convention_for_every_form() {
    // Crontab's numbering everywhere: 1-5 is Monday to Friday, with or without seconds.
    for expr in [
        "0 3 * * 1-5",
        "0 0 3 * * 1-5",
        "0 0 3 * * 1-5 *",
        "0 3 * * MON-FRI",
        "0 0 3 * * mon-fri",
    ] {
        let cron = CronSchedule::parse(expr).unwrap();
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 5)),
            MONDAY_TO_FRIDAY,
            "{expr}"
        );
        assert!(
            fires(&cron, sunday_noon(), 5)
                .iter()
                .all(|fire| fire.hour() == 3),
            "{expr}"
        );
    }
    // Sunday is 0, 7 or SUN, in both forms.
    for expr in [
        "0 0 * * 0",
        "0 0 * * 7",
        "0 0 * * SUN",
        "0 0 0 * * 0",
        "0 0 0 * * 7",
        "0 0 0 * * sun",
    ] {
        let cron = CronSchedule::parse(expr).unwrap();
        assert_eq!(
            weekdays(&fires(&cron, sunday_noon(), 3)),
            vec![Weekday::Sun; 3],
            "{expr}"
        );
    }
}

#[test]
fn five_field_expressions_get_a_zero_seconds_field() {
    let cron = CronSchedule::parse("*/5 * * * *").unwrap();
    assert_eq!(cron.normalized(), "0 */5 * * * *");
    let fires = fires(&cron, utc(2024, 3, 1, 10, 2, 17), 4);
    assert_eq!(
        fires,
        vec![
            utc(2024, 3, 1, 10, 5, 0),
            utc(2024, 3, 1, 10, 10, 0),
            utc(2024, 3, 1, 10, 15, 0),
            utc(2024, 3, 1, 10, 20, 0),
        ]
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
fn weekday_lists_ranges_steps_and_names() {
    let weekend = CronSchedule::parse("0 0 * * 0,6").unwrap();
    assert_eq!(
        weekdays(&fires(&weekend, sunday_noon(), 4)),
        vec![Weekday::Sat, Weekday::Sun, Weekday::Sat, Weekday::Sun]
    );
    // A range ending in 7 ends on Sunday.
    let cron = CronSchedule::parse("0 0 * * 5-7").unwrap();
    assert_eq!(
        weekdays(&fires(&cron, sunday_noon(), 3)),
        vec![Weekday::Fri, Weekday::Sat, Weekday::Sun]
    );
    // As in crontab, */2 is Sunday, Tuesday, Thursday and Saturday.
    let cron = CronSchedule::parse("0 0 0 * * */2").unwrap();
    assert_eq!(
        weekdays(&fires(&cron, sunday_noon(), 4)),
        vec![Weekday::Tue, Weekday::Thu, Weekday::Sat, Weekday::Sun]
    );
    let cron = CronSchedule::parse("0 0 * * 1-5/2").unwrap();
    assert_eq!(
        weekdays(&fires(&cron, sunday_noon(), 3)),
        vec![Weekday::Mon, Weekday::Wed, Weekday::Fri]
    );
    let cron = CronSchedule::parse("0 9 * * MON,5").unwrap();
    assert_eq!(
        weekdays(&fires(&cron, sunday_noon(), 2)),
        vec![Weekday::Mon, Weekday::Fri]
    );
}

#[test]
fn day_of_month_and_day_of_week_must_both_match() {
    let cron = CronSchedule::parse("0 0 13 * FRI").unwrap();
    let fires = fires(&cron, sunday_noon(), 2);
    assert_eq!(
        fires,
        vec![utc(2024, 9, 13, 0, 0, 0), utc(2024, 12, 13, 0, 0, 0)]
    );
    assert!(fires.iter().all(|fire| fire.weekday() == Weekday::Fri));
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
        let Err(err) = CronSchedule::parse(expr) else {
            panic!("{expr:?} was accepted");
        };
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
fn expressions_that_never_fire_are_rejected() {
    for expr in [
        "0 0 30 2 *",
        "0 0 31 4 *",
        "0 0 31 2,4,6,9,11 *",
        "0 0 0 30 FEB *",
    ] {
        let err = CronSchedule::parse(expr).unwrap_err();
        assert_eq!(err.code(), "job_schedule.invalid_cron", "{expr:?}");
        assert!(err.never_fires(), "{expr:?}");
        assert!(
            err.internal_message().contains("never fires"),
            "{expr:?}: {}",
            err.internal_message()
        );
    }
    // Rare is not never: February 29th comes every four years.
    let leap = CronSchedule::parse("0 0 29 2 *").unwrap();
    assert_eq!(
        leap.next_after(sunday_noon()),
        Some(utc(2024, 2, 29, 0, 0, 0))
    );
    assert_eq!(
        leap.next_after(utc(2024, 3, 1, 0, 0, 0)),
        Some(utc(2028, 2, 29, 0, 0, 0))
    );
}

#[test]
fn errors_name_the_expression_and_keep_the_reason_internal() {
    let err = CronSchedule::parse("  0 61   * * * ").unwrap_err();
    assert_eq!(err.to_string(), "invalid cron expression `0 61 * * *`");
    assert_eq!(err.expression(), "0 61 * * *");
    let reason = err.internal_message();
    assert!(!err.to_string().contains(&reason));
    assert_eq!(reason, "hour 61 is out of range 0-23");
    let err = CronSchedule::parse("0 0 * * 8").unwrap_err();
    assert_eq!(err.internal_message(), "day-of-week 8 is out of range 0-7");
    let err = CronSchedule::parse("0 0 * * FUNDAY").unwrap_err();
    assert!(
        err.internal_message()
            .starts_with("parsing `0 0 0 * * FUNDAY` failed: "),
        "{}",
        err.internal_message()
    );

    let err = CronSchedule::parse("").unwrap_err();
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
}

#[test]
fn next_after_at_the_end_of_time_is_none() {
    let cron = CronSchedule::parse("* * * * * *").unwrap();
    assert_eq!(cron.next_after(DateTime::<Utc>::MAX_UTC), None);
    assert_eq!(cron.next_after(utc(5001, 1, 1, 0, 0, 0)), None);
}

#[test]
fn next_fire_for_a_stale_cursor_jumps_to_the_future() {
    let cron = CronSchedule::parse("* * * * *").unwrap();
    let now = utc(2024, 3, 1, 10, 7, 30);
    let stale_cursor = utc(2024, 3, 1, 10, 2, 0);
    assert_eq!(
        cron.next_fire_for_cursor(stale_cursor, now),
        Some(utc(2024, 3, 1, 10, 8, 0))
    );
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
    let early = cursor - TimeDelta::seconds(2);
    assert_eq!(
        cron.next_fire_for_cursor(cursor, early),
        Some(utc(2024, 3, 1, 10, 3, 0))
    );
}

#[test]
fn schedules_compare_by_normalized_expression_and_time_zone() {
    assert_eq!(
        CronSchedule::parse("0 9 * * 1-5").unwrap(),
        CronSchedule::parse("0 0 9 * * 1-5").unwrap()
    );
    assert_eq!(
        CronSchedule::parse("@daily").unwrap(),
        CronSchedule::parse("@midnight").unwrap()
    );
    assert_ne!(
        CronSchedule::parse("@daily").unwrap(),
        CronSchedule::parse_in("@daily", berlin()).unwrap()
    );
    assert_eq!(
        CronSchedule::parse_in("@daily", berlin())
            .unwrap()
            .to_string(),
        "0 0 0 * * * (Europe/Berlin)"
    );
}

#[test]
fn a_local_fire_time_keeps_its_wall_clock_across_dst_changes() {
    // 09:00 in Berlin: 08:00 UTC in winter (CET), 07:00 UTC in summer (CEST). The clocks went
    // forward on 2024-03-31 and back on 2024-10-27.
    let cron = CronSchedule::parse_in("0 9 * * *", berlin()).unwrap();
    assert_eq!(
        fires(&cron, utc(2024, 3, 29, 12, 0, 0), 3),
        vec![
            utc(2024, 3, 30, 8, 0, 0),
            utc(2024, 3, 31, 7, 0, 0),
            utc(2024, 4, 1, 7, 0, 0),
        ]
    );
    assert_eq!(
        fires(&cron, utc(2024, 10, 25, 12, 0, 0), 3),
        vec![
            utc(2024, 10, 26, 7, 0, 0),
            utc(2024, 10, 27, 8, 0, 0),
            utc(2024, 10, 28, 8, 0, 0),
        ]
    );
}

#[test]
fn a_fire_in_a_skipped_or_repeated_hour_happens_once() {
    // 02:30 does not exist in Berlin on 2024-03-31 (02:00 jumps to 03:00): that day it fires at
    // 03:00 CEST, the first valid time after the gap.
    let cron = CronSchedule::parse_in("30 2 * * *", berlin()).unwrap();
    assert_eq!(
        fires(&cron, utc(2024, 3, 29, 12, 0, 0), 3),
        vec![
            utc(2024, 3, 30, 1, 30, 0), // 02:30 CET
            utc(2024, 3, 31, 1, 0, 0),  // 03:00 CEST
            utc(2024, 4, 1, 0, 30, 0),  // 02:30 CEST
        ]
    );
    // 02:30 happens twice on 2024-10-27 (03:00 CEST goes back to 02:00 CET): it fires once, on
    // the first pass.
    assert_eq!(
        fires(&cron, utc(2024, 10, 25, 12, 0, 0), 3),
        vec![
            utc(2024, 10, 26, 0, 30, 0), // 02:30 CEST
            utc(2024, 10, 27, 0, 30, 0), // 02:30 CEST, first pass
            utc(2024, 10, 28, 1, 30, 0), // 02:30 CET
        ]
    );
}

#[test]
fn an_hourly_schedule_fires_every_real_hour_across_dst_changes() {
    let cron = CronSchedule::parse_in("0 * * * *", berlin()).unwrap();
    for start in [utc(2024, 3, 30, 22, 30, 0), utc(2024, 10, 26, 22, 30, 0)] {
        let fires = fires(&cron, start, 6);
        assert!(
            fires
                .windows(2)
                .all(|pair| pair[1] - pair[0] == TimeDelta::hours(1)),
            "{fires:?}"
        );
    }
}

#[test]
fn unknown_time_zones_are_refused_with_a_suggestion() {
    let err = TimeZone::parse("Europe/Berln").unwrap_err();
    assert_eq!(err.code(), "job_schedule.invalid_time_zone");
    assert_eq!(err.to_string(), "unknown time zone `Europe/Berln`");
    assert_eq!(err.suggestion(), None);
    assert_eq!(
        TimeZone::parse("america/new_york")
            .unwrap_err()
            .suggestion(),
        Some("America/New_York")
    );
    assert_eq!(TimeZone::parse("UTC").unwrap(), TimeZone::UTC);
    assert_eq!(TimeZone::default(), TimeZone::UTC);
}
