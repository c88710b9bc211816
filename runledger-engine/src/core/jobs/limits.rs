//! What PostgreSQL can store and what can be read back: limits checked in Rust before a value
//! is sent, so that one bad value is refused (or made storable) on its own instead of failing
//! the statement that carries it together with other jobs' rows.
//!
//! - JSON (`jsonb` columns: payloads, outputs, metadata, log fields) must not contain the NUL
//!   character `\u0000` (PostgreSQL refuses it), must not nest containers deeper than
//!   [`MAX_JSON_DEPTH`] (deeper documents are stored but cannot be decoded again), and its
//!   strings must stay below [`MAX_JSON_BYTES`].
//! - Text columns (keys, names, messages) must not contain NUL either.
//! - Timestamps must lie between [`EARLIEST_TIMESTAMP`] and [`LATEST_TIMESTAMP`].
//!
//! ```
//! use runledger_engine::core::jobs::limits::{check_json, JsonProblem, MAX_JSON_DEPTH};
//!
//! assert_eq!(check_json(&serde_json::json!({"to": "ada"})), Ok(()));
//! assert_eq!(check_json(&serde_json::json!({"to": "a\u{0}"})), Err(JsonProblem::NulCharacter));
//! let mut deep = serde_json::json!(1);
//! for _ in 0..=MAX_JSON_DEPTH {
//!     deep = serde_json::json!([deep]);
//! }
//! assert!(matches!(check_json(&deep), Err(JsonProblem::TooDeep { .. })));
//! ```

use std::borrow::Cow;

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;

/// Deepest nesting of arrays and objects that is accepted: the most `serde_json` (and so
/// the PostgreSQL driver's JSON decoding) accepts by default. `[]` nests 1 deep, `[[]]` 2 deep.
pub const MAX_JSON_DEPTH: usize = 127;

/// Most bytes of string content (keys and values) one JSON document may carry. PostgreSQL
/// refuses `jsonb` values of 256 MiB and more; keep documents far smaller in practice.
pub const MAX_JSON_BYTES: usize = 255 * 1024 * 1024;

/// Earliest instant accepted for a run time (0001-01-01 00:00:00 UTC).
pub const EARLIEST_TIMESTAMP: DateTime<Utc> = match NaiveDate::from_ymd_opt(1, 1, 1) {
    Some(date) => date.and_time(chrono::NaiveTime::MIN).and_utc(),
    None => DateTime::<Utc>::MIN_UTC,
};

/// Latest instant accepted for a run time (9999-12-31 23:59:59 UTC); later instants leave no
/// room for PostgreSQL's date arithmetic.
pub const LATEST_TIMESTAMP: DateTime<Utc> = match NaiveDate::from_ymd_opt(9999, 12, 31) {
    Some(date) => match date.and_hms_opt(23, 59, 59) {
        Some(time) => time.and_utc(),
        None => DateTime::<Utc>::MAX_UTC,
    },
    None => DateTime::<Utc>::MAX_UTC,
};

/// The replacement for NUL characters in text that must be stored anyway (failure messages,
/// log lines): U+FFFD, the Unicode replacement character.
pub const NUL_REPLACEMENT: char = '\u{FFFD}';

/// Why a JSON value cannot be stored and read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonProblem {
    /// A string or key contains `\u0000`, which PostgreSQL's `jsonb` refuses.
    #[error("contains the NUL character (\\u0000), which PostgreSQL cannot store")]
    NulCharacter,
    /// Arrays and objects nest deeper than [`MAX_JSON_DEPTH`].
    #[error("nests arrays and objects deeper than {limit} levels")]
    TooDeep {
        /// The limit, [`MAX_JSON_DEPTH`].
        limit: usize,
    },
    /// Its strings add up to more than [`MAX_JSON_BYTES`].
    #[error("is larger than PostgreSQL's limit of {limit} bytes")]
    TooLarge {
        /// The limit, [`MAX_JSON_BYTES`].
        limit: usize,
    },
}

/// Checks that `value` can be stored in a `jsonb` column and decoded again. Walks the value
/// once without recursion, so any depth is safe to check.
pub fn check_json(value: &Value) -> Result<(), JsonProblem> {
    let mut bytes = 0_usize;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, depth)) = stack.pop() {
        let mut text = |s: &str| {
            if s.contains('\0') {
                return Err(JsonProblem::NulCharacter);
            }
            bytes = bytes.saturating_add(s.len());
            if bytes > MAX_JSON_BYTES {
                return Err(JsonProblem::TooLarge {
                    limit: MAX_JSON_BYTES,
                });
            }
            Ok(())
        };
        match value {
            Value::String(s) => text(s)?,
            Value::Array(items) => {
                if depth + 1 > MAX_JSON_DEPTH {
                    return Err(JsonProblem::TooDeep {
                        limit: MAX_JSON_DEPTH,
                    });
                }
                stack.extend(items.iter().map(|item| (item, depth + 1)));
            }
            Value::Object(map) => {
                if depth + 1 > MAX_JSON_DEPTH {
                    return Err(JsonProblem::TooDeep {
                        limit: MAX_JSON_DEPTH,
                    });
                }
                for (key, item) in map {
                    text(key)?;
                    stack.push((item, depth + 1));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    Ok(())
}

/// Whether `text` can be stored in a `text` column (it contains no NUL character).
pub fn is_storable_text(text: &str) -> bool {
    !text.contains('\0')
}

/// `text` with every NUL character replaced by [`NUL_REPLACEMENT`]; borrowed when there is
/// none, which is the usual case.
///
/// ```
/// use runledger_engine::core::jobs::limits::storable_text;
///
/// assert_eq!(storable_text("ok"), "ok");
/// assert_eq!(storable_text("a\0b"), "a\u{FFFD}b");
/// ```
pub fn storable_text(text: &str) -> Cow<'_, str> {
    if is_storable_text(text) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    }
}

/// `value` made storable for best-effort data (log fields): NUL characters in strings and keys
/// are replaced by [`NUL_REPLACEMENT`]; a value that is still refused (too deep, too large) is
/// replaced by `{"unstorable": "<why>"}`. Borrowed when `value` is storable as it is.
pub fn storable_json(value: &Value) -> Cow<'_, Value> {
    match check_json(value) {
        Ok(()) => Cow::Borrowed(value),
        Err(JsonProblem::NulCharacter) if !nests_too_deep(value) => {
            let cleaned = replace_nul(value.clone());
            match check_json(&cleaned) {
                Ok(()) => Cow::Owned(cleaned),
                Err(problem) => Cow::Owned(unstorable(problem)),
            }
        }
        Err(JsonProblem::NulCharacter) => Cow::Owned(unstorable(JsonProblem::TooDeep {
            limit: MAX_JSON_DEPTH,
        })),
        Err(problem) => Cow::Owned(unstorable(problem)),
    }
}

fn nests_too_deep(value: &Value) -> bool {
    let mut stack = vec![(value, 0_usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth + 1 > MAX_JSON_DEPTH {
            return true;
        }
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    false
}

fn unstorable(problem: JsonProblem) -> Value {
    serde_json::json!({ "unstorable": problem.to_string() })
}

/// Replaces NUL characters in every string and key; only called on values checked to nest no
/// deeper than [`MAX_JSON_DEPTH`], so the recursion is bounded.
fn replace_nul(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(storable_text(&s).into_owned()),
        Value::Array(items) => Value::Array(items.into_iter().map(replace_nul).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, item)| (storable_text(&key).into_owned(), replace_nul(item)))
                .collect(),
        ),
        other => other,
    }
}

/// Whether `at` lies between [`EARLIEST_TIMESTAMP`] and [`LATEST_TIMESTAMP`].
pub fn is_storable_timestamp(at: DateTime<Utc>) -> bool {
    (EARLIEST_TIMESTAMP..=LATEST_TIMESTAMP).contains(&at)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn nested(depth: usize, innermost: Value) -> Value {
        (0..depth).fold(innermost, |inner, _| json!([inner]))
    }

    #[test]
    fn depth_limit_matches_what_serde_json_decodes() {
        for depth in [MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1] {
            let value = nested(depth, json!(1));
            let decodes = serde_json::from_str::<Value>(&value.to_string()).is_ok();
            assert_eq!(check_json(&value).is_ok(), decodes, "depth {depth}");
        }
        let empty_innermost = nested(MAX_JSON_DEPTH - 1, json!({}));
        assert!(check_json(&empty_innermost).is_ok());
        assert!(serde_json::from_str::<Value>(&empty_innermost.to_string()).is_ok());
    }

    #[test]
    fn nul_in_a_key_or_a_string_is_refused_and_can_be_replaced() {
        assert_eq!(
            check_json(&json!({"a\u{0}": 1})),
            Err(JsonProblem::NulCharacter)
        );
        assert_eq!(
            check_json(&json!(["x", {"y": "z\u{0}"}])),
            Err(JsonProblem::NulCharacter)
        );
        let cleaned = storable_json(&json!({"k\u{0}": ["v\u{0}"]})).into_owned();
        assert_eq!(cleaned, json!({"k\u{FFFD}": ["v\u{FFFD}"]}));
        assert!(matches!(storable_json(&json!({"ok": 1})), Cow::Borrowed(_)));
    }

    #[test]
    fn an_unstorable_log_field_is_replaced_by_its_reason() {
        let deep = nested(MAX_JSON_DEPTH + 5, json!("\u{0}"));
        let replaced = storable_json(&deep).into_owned();
        assert_eq!(check_json(&replaced), Ok(()));
        assert!(replaced["unstorable"].as_str().unwrap().contains("deeper"));
    }

    #[test]
    fn timestamps_outside_years_1_to_9999_are_refused() {
        assert!(is_storable_timestamp(Utc::now()));
        assert!(is_storable_timestamp(EARLIEST_TIMESTAMP));
        assert!(is_storable_timestamp(LATEST_TIMESTAMP));
        assert!(!is_storable_timestamp(DateTime::<Utc>::MIN_UTC));
        assert!(!is_storable_timestamp(DateTime::<Utc>::MAX_UTC));
    }
}
