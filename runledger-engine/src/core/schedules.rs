//! Cron expressions for job schedules, evaluated in UTC or in a schedule's IANA time zone.
//!
//! The parser lives in the small `runledger-cron` crate so that the `#[schedule]` macro checks
//! expressions at compile time with exactly the rules the scheduler applies at run time; see
//! [`CronSchedule::parse`] for the accepted spellings.
//!
//! ```
//! use runledger_engine::core::schedules::CronSchedule;
//!
//! let weekdays = CronSchedule::parse("0 9 * * 1-5").unwrap();
//! assert_eq!(weekdays.normalized(), "0 0 9 * * 1-5");
//! ```

pub use runledger_cron::{CronError, CronSchedule, TimeZone, TimeZoneError};
