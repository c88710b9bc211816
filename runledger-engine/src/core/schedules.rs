//! Cron expressions for job schedules, always evaluated in UTC.
//!
//! The parser lives in the small `runledger-cron` crate so that the `#[schedule]` macro checks
//! expressions at compile time with exactly the rules the scheduler applies at run time; see
//! [`CronSchedule::parse`] for the accepted spellings.
//!
//! ```
//! use runledger_engine::core::schedules::CronSchedule;
//!
//! let weekdays = CronSchedule::parse("0 9 * * 1-5").unwrap();
//! assert_eq!(weekdays.normalized(), "0 0 9 * * 2-6");
//! ```

pub use runledger_cron::{CronError, CronSchedule};
