//! The queues a worker serves, each with its own local concurrency.

use crate::runtime::error::JobsConfigError;

/// One queue a worker serves and how many of its jobs the worker runs at once.
///
/// The concurrency is this worker's own: a limit across all workers is set on the queue in the
/// database (`set_queue_global_concurrency`) and enforced by the claim.
///
/// ```
/// use runledger_engine::runtime::queues::{QueueConcurrency, parse_queues};
///
/// let queues = parse_queues("default:10, emails:2", 16).unwrap();
/// assert_eq!(queues, vec![QueueConcurrency::new("default", 10), QueueConcurrency::new("emails", 2)]);
/// assert_eq!(parse_queues("reports", 16).unwrap(), vec![QueueConcurrency::new("reports", 16)]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueConcurrency {
    /// The queue's name.
    pub name: String,
    /// Most of its jobs this worker runs at once (at least 1).
    pub concurrency: u32,
}

impl QueueConcurrency {
    /// Serve `name`, running up to `concurrency` of its jobs at once.
    pub fn new(name: impl Into<String>, concurrency: u32) -> Self {
        Self {
            name: name.into(),
            concurrency,
        }
    }
}

/// What `JOBS_QUEUES` must look like.
const EXPECTED: &str = "comma-separated queue names, each optionally followed by :concurrency (at least 1), each named once";

/// Parses `JOBS_QUEUES`: `name[:concurrency]` entries separated by commas; a name without a
/// concurrency gets `default_concurrency`. An empty value is no queues (serve every queue).
pub fn parse_queues(
    value: &str,
    default_concurrency: u32,
) -> Result<Vec<QueueConcurrency>, JobsConfigError> {
    let invalid = || JobsConfigError::InvalidEnvVar {
        variable: "JOBS_QUEUES",
        value: value.to_owned(),
        expected: EXPECTED,
    };
    let mut queues = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, concurrency) = match entry.rsplit_once(':') {
            Some((name, n)) => (name.trim(), n.trim().parse().map_err(|_| invalid())?),
            None => (entry, default_concurrency),
        };
        queues.push(QueueConcurrency::new(name, concurrency));
    }
    check_queues(&queues).map_err(|_| invalid())?;
    Ok(queues)
}

/// Checks a list of served queues: valid names (1 to 255 characters, not blank, no NUL), each
/// once, each with a concurrency of at least 1.
pub(crate) fn check_queues(queues: &[QueueConcurrency]) -> Result<(), JobsConfigError> {
    let invalid = |problem| {
        Err(JobsConfigError::InvalidField {
            field: "queues",
            problem,
        })
    };
    for (index, queue) in queues.iter().enumerate() {
        if queue.name.trim().is_empty()
            || queue.name.chars().count() > 255
            || queue.name.contains('\0')
        {
            return invalid("must be named with 1 to 255 characters, not blank, without NUL");
        }
        if queue.concurrency == 0 {
            return invalid("must each have a concurrency of at least 1");
        }
        if queues[..index].iter().any(|q| q.name == queue.name) {
            return invalid("must each be named once");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_entries_are_refused_naming_the_variable() {
        for value in ["emails:0", "emails:many", "a:1,a:2", " :3"] {
            let err = parse_queues(value, 4).unwrap_err();
            assert_eq!(err.code(), "config.invalid_env_var", "{value}");
            assert!(err.to_string().contains("JOBS_QUEUES"), "{value}");
        }
        assert!(parse_queues("", 4).unwrap().is_empty());
    }
}
