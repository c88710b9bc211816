//! Validated string identifiers: job types, workflow types and step keys.

use std::borrow::Cow;
use std::fmt;

/// Longest identifier the schema accepts, in characters.
pub const MAX_IDENTIFIER_CHARS: usize = runledger_names::MAX_NAME_CHARS;

pub use runledger_names::{NAME_CHARACTERS, NameError};

/// Why an identifier was rejected: it breaks the naming rule of `runledger_names` (1 to 255
/// characters from [`NAME_CHARACTERS`], no surrounding whitespace), the rule the macros also
/// apply at compile time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentifierError {
    /// The identifier is empty or only whitespace.
    #[error("{kind} must not be blank")]
    Blank {
        /// Which identifier kind was rejected (`job type`, `step key`, …).
        kind: &'static str,
    },
    /// The identifier is longer than [`MAX_IDENTIFIER_CHARS`].
    #[error("{kind} must be at most {max} characters, got {len}")]
    TooLong {
        /// Which identifier kind was rejected.
        kind: &'static str,
        /// Its length in characters.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The identifier starts or ends with whitespace, or contains a character outside
    /// [`NAME_CHARACTERS`].
    #[error("{kind} `{value}` {problem}")]
    Malformed {
        /// Which identifier kind was rejected.
        kind: &'static str,
        /// The rejected value.
        value: String,
        /// What is wrong with it.
        problem: NameError,
    },
}

impl IdentifierError {
    /// Stable error code, e.g. `job.invalid_job_type`.
    pub fn code(&self) -> &'static str {
        let kind = match self {
            Self::Blank { kind } | Self::TooLong { kind, .. } | Self::Malformed { kind, .. } => {
                *kind
            }
        };
        match kind {
            JobType::KIND => "job.invalid_job_type",
            WorkflowType::KIND => "workflow.invalid_workflow_type",
            StepKey::KIND => "workflow.invalid_step_key",
            _ => "validation.invalid_identifier",
        }
    }
}

pub(crate) fn validate_identifier(kind: &'static str, value: &str) -> Result<(), IdentifierError> {
    match runledger_names::check(value) {
        Ok(()) => Ok(()),
        Err(NameError::Blank) => Err(IdentifierError::Blank { kind }),
        Err(NameError::TooLong { len }) => Err(IdentifierError::TooLong {
            kind,
            len,
            max: MAX_IDENTIFIER_CHARS,
        }),
        Err(problem) => Err(IdentifierError::Malformed {
            kind,
            value: value.to_owned(),
            problem,
        }),
    }
}

macro_rules! identifier {
    ($(#[$meta:meta])* $name:ident, $kind:literal) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name<'a>(Cow<'a, str>);

        impl<'a> $name<'a> {
            /// What this identifier is called in error messages.
            pub const KIND: &'static str = $kind;

            /// Wraps a string without validating it; validation happens where the value is used
            /// (enqueue, registration). Use [`Self::try_new`] to fail early.
            pub const fn new(value: &'a str) -> Self {
                Self(Cow::Borrowed(value))
            }

            /// Wraps a string after checking it against the naming rule (see
            /// [`IdentifierError`]).
            pub fn try_new(value: impl Into<Cow<'a, str>>) -> Result<Self, IdentifierError> {
                let value = value.into();
                validate_identifier(Self::KIND, &value)?;
                Ok(Self(value))
            }

            /// Checks the wrapped value (for values made with [`Self::new`]).
            pub fn validate(&self) -> Result<(), IdentifierError> {
                validate_identifier(Self::KIND, &self.0)
            }

            /// The identifier as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// An owned copy that no longer borrows.
            pub fn into_owned(self) -> $name<'static> {
                $name(Cow::Owned(self.0.into_owned()))
            }
        }

        impl fmt::Display for $name<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl AsRef<str> for $name<'_> {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl<'a> From<&'a str> for $name<'a> {
            fn from(value: &'a str) -> Self {
                Self::new(value)
            }
        }

        impl From<String> for $name<'static> {
            fn from(value: String) -> Self {
                Self(Cow::Owned(value))
            }
        }
    };
}

identifier!(
    /// The name of a kind of job, such as `"emails.send"`; it selects the handler and the
    /// job definition.
    ///
    /// ```
    /// use runledger_engine::core::jobs::JobType;
    ///
    /// assert_eq!(JobType::new("emails.send").as_str(), "emails.send");
    /// assert_eq!(JobType::try_new("  ").unwrap_err().code(), "job.invalid_job_type");
    /// ```
    JobType,
    "job type"
);

identifier!(
    /// The name of a kind of workflow, such as `"profiles.research"`.
    ///
    /// ```
    /// use runledger_engine::core::jobs::WorkflowType;
    ///
    /// assert!(WorkflowType::try_new("profiles.research").is_ok());
    /// assert!(WorkflowType::try_new("").is_err());
    /// ```
    WorkflowType,
    "workflow type"
);

identifier!(
    /// The key of one step inside a workflow run, unique within the run.
    ///
    /// ```
    /// use runledger_engine::core::jobs::StepKey;
    ///
    /// let key = StepKey::new("approval");
    /// assert!(key.validate().is_ok());
    /// ```
    StepKey,
    "step key"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_and_oversized_identifiers_are_rejected() {
        assert!(matches!(
            JobType::try_new(""),
            Err(IdentifierError::Blank { kind: "job type" })
        ));
        assert!(matches!(
            StepKey::try_new(" \t"),
            Err(IdentifierError::Blank { .. })
        ));
        let long = "x".repeat(MAX_IDENTIFIER_CHARS + 1);
        let err = WorkflowType::try_new(long).unwrap_err();
        assert_eq!(err.code(), "workflow.invalid_workflow_type");
        assert!(err.to_string().contains("at most 255"));
        assert!(JobType::try_new("x".repeat(MAX_IDENTIFIER_CHARS)).is_ok());
        assert_eq!(
            JobType::try_new("emails\0send").unwrap_err().code(),
            "job.invalid_job_type"
        );
    }

    #[test]
    fn surrounding_whitespace_and_foreign_characters_are_rejected() {
        let err = JobType::try_new(" emails.send ").unwrap_err();
        assert_eq!(err.code(), "job.invalid_job_type");
        assert!(
            err.to_string().contains("start or end with whitespace"),
            "{err}"
        );
        let err = StepKey::try_new("fetch page").unwrap_err();
        assert_eq!(err.code(), "workflow.invalid_step_key");
        assert!(err.to_string().contains(NAME_CHARACTERS), "{err}");
        assert!(WorkflowType::try_new("reports/daily:eu-v2").is_ok());
    }

    #[test]
    fn unchecked_identifiers_validate_later() {
        let job_type = JobType::new("");
        assert_eq!(
            job_type.validate().unwrap_err().code(),
            "job.invalid_job_type"
        );
        assert_eq!(StepKey::new("a").into_owned().as_str(), "a");
    }
}
