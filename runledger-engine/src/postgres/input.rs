//! Checks of caller input that PostgreSQL would refuse, run before a statement is sent so the
//! caller gets a validation code naming the field instead of a failed statement.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::core::jobs::limits::{JsonProblem, check_json, is_storable_text, is_storable_timestamp};
use crate::postgres::error::{Error, Result};

/// A job payload: `job.payload_too_deep` when it nests deeper than a worker can decode,
/// `job.invalid_payload` for the other problems.
pub(crate) fn check_payload(payload: &Value, what: &str) -> Result<()> {
    check_json(payload).map_err(|problem| {
        let code = match problem {
            JsonProblem::TooDeep { .. } => "job.payload_too_deep",
            _ => "job.invalid_payload",
        };
        Error::invalid_input(code, format!("{what} {problem}"))
    })
}

/// Any other JSON field, refused with `code`.
pub(crate) fn check_json_field(value: &Value, code: &'static str, what: &str) -> Result<()> {
    check_json(value).map_err(|problem| Error::invalid_input(code, format!("{what} {problem}")))
}

/// A text field, refused with `code` when it contains a NUL character.
pub(crate) fn check_text_field(text: &str, code: &'static str, what: &str) -> Result<()> {
    if is_storable_text(text) {
        Ok(())
    } else {
        Err(Error::invalid_input(
            code,
            format!("{what} must not contain the NUL character"),
        ))
    }
}

/// A key or name the caller chooses (an idempotency, mutation or replay key, a field name),
/// refused with `code` when blank, longer than 255 characters or containing NUL.
pub(crate) fn check_key(text: &str, code: &'static str, what: &str) -> Result<()> {
    if text.trim().is_empty() || text.chars().count() > 255 {
        return Err(Error::invalid_input(
            code,
            format!("{what} must be 1 to 255 characters and not blank"),
        ));
    }
    check_text_field(text, code, what)
}

/// A timestamp, refused with `code` outside the years 1 to 9999.
pub(crate) fn check_timestamp(at: DateTime<Utc>, code: &'static str, what: &str) -> Result<()> {
    if is_storable_timestamp(at) {
        Ok(())
    } else {
        Err(Error::invalid_input(
            code,
            format!("{what} must lie between the years 1 and 9999"),
        ))
    }
}
