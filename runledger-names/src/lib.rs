//! The one naming rule of Runledger: job types, workflow types, step keys and schedule names.
//!
//! A name is 1 to [`MAX_NAME_CHARS`] characters, each an ASCII letter or digit or one of
//! `.` `_` `-` `:` `/` ([`NAME_CHARACTERS`]). So `emails.send`, `reports/daily:eu` and
//! `profile_research-v2` are names; `" emails.send "`, `emails send` and `émails` are not.
//!
//! The engine applies this rule wherever a name is written (enqueue, catalog sync, workflow
//! enqueue, schedule upsert) and the `#[job]`, `#[workflow]` and `#[schedule]` macros apply
//! it at compile time, so a name the macros accept is never refused at run time. This crate
//! has no dependencies so that the proc-macro crate can use it without pulling in the engine.
//!
//! ```
//! use runledger_names::{NameError, check};
//!
//! assert_eq!(check("emails.send"), Ok(()));
//! assert_eq!(check(" emails.send "), Err(NameError::SurroundingWhitespace));
//! assert_eq!(check("emails send"), Err(NameError::InvalidCharacter { character: ' ' }));
//! ```

#![forbid(unsafe_code)]

use std::fmt;

/// Longest name, in characters.
pub const MAX_NAME_CHARS: usize = 255;

/// The characters a name may contain, as error messages and docs spell them.
pub const NAME_CHARACTERS: &str = "ASCII letters and digits, `.`, `_`, `-`, `:` and `/`";

/// Why a name breaks the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty or only whitespace.
    Blank,
    /// The name starts or ends with whitespace (a different name from its trimmed form).
    SurroundingWhitespace,
    /// The name is longer than [`MAX_NAME_CHARS`].
    TooLong {
        /// Its length in characters.
        len: usize,
    },
    /// The name contains a character outside [`NAME_CHARACTERS`].
    InvalidCharacter {
        /// The first such character.
        character: char,
    },
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Blank => f.write_str("must not be blank"),
            Self::SurroundingWhitespace => f.write_str("must not start or end with whitespace"),
            Self::TooLong { len } => {
                write!(f, "must be at most {MAX_NAME_CHARS} characters, got {len}")
            }
            Self::InvalidCharacter { character } => write!(
                f,
                "contains {character:?}; a name uses only {NAME_CHARACTERS}"
            ),
        }
    }
}

impl std::error::Error for NameError {}

/// Whether `character` may appear in a name.
pub const fn is_name_character(character: char) -> bool {
    character.is_ascii_alphanumeric() || matches!(character, '.' | '_' | '-' | ':' | '/')
}

/// Checks `name` against the rule; the first problem found is returned.
pub fn check(name: &str) -> Result<(), NameError> {
    if name.trim().is_empty() {
        return Err(NameError::Blank);
    }
    if name.trim() != name {
        return Err(NameError::SurroundingWhitespace);
    }
    let len = name.chars().count();
    if len > MAX_NAME_CHARS {
        return Err(NameError::TooLong { len });
    }
    match name.chars().find(|c| !is_name_character(*c)) {
        Some(character) => Err(NameError::InvalidCharacter { character }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_slashed_and_versioned_names_are_valid() {
        for name in [
            "emails.send",
            "reports/daily:eu",
            "profile_research-v2",
            "A",
            "x1",
        ] {
            assert_eq!(check(name), Ok(()), "{name}");
        }
        assert_eq!(check(&"x".repeat(MAX_NAME_CHARS)), Ok(()));
    }

    #[test]
    fn each_problem_has_its_own_error() {
        assert_eq!(check(""), Err(NameError::Blank));
        assert_eq!(check(" \t"), Err(NameError::Blank));
        assert_eq!(check(" emails.send"), Err(NameError::SurroundingWhitespace));
        assert_eq!(
            check("emails.send\n"),
            Err(NameError::SurroundingWhitespace)
        );
        assert_eq!(
            check(&"x".repeat(MAX_NAME_CHARS + 1)),
            Err(NameError::TooLong { len: 256 })
        );
        assert_eq!(
            check("emails send"),
            Err(NameError::InvalidCharacter { character: ' ' })
        );
        assert_eq!(
            check("émails"),
            Err(NameError::InvalidCharacter { character: 'é' })
        );
    }

    #[test]
    fn messages_name_the_rule() {
        assert_eq!(
            NameError::SurroundingWhitespace.to_string(),
            "must not start or end with whitespace"
        );
        let message = NameError::InvalidCharacter { character: '#' }.to_string();
        assert!(message.contains("'#'"), "{message}");
        assert!(message.contains(NAME_CHARACTERS), "{message}");
    }
}
