//! The engine's statuses as command-line values. Their possible values are the engine's own
//! lists (`JobStatus::ALL`, ...) in lower case, so `--help`, shell completions and clap's
//! error for a bad value all name them, and a status the engine adds is offered at once.

use clap::ValueEnum;
use clap::builder::PossibleValue;
use runledger_engine::core::jobs::{JobStatus, WorkflowRunStatus};

/// A status of the engine given on the command line (`--status dead_lettered`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status<T>(pub(crate) T);

impl<T> Status<T> {
    /// The engine's status.
    pub(crate) fn into_inner(self) -> T {
        self.0
    }
}

/// A status enum of the engine that the command line offers.
pub(crate) trait StatusSet: Copy + Send + Sync + 'static {
    /// Every status, in the engine's order.
    const VALUES: &'static [Status<Self>];

    /// The status as the database stores it (`DEAD_LETTERED`).
    fn stored(self) -> &'static str;
}

impl<T: StatusSet> ValueEnum for Status<T> {
    fn value_variants<'a>() -> &'a [Self] {
        T::VALUES
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.stored().to_ascii_lowercase()))
    }
}

/// `all`, each status wrapped: the table [`StatusSet::VALUES`] is built from at compile time.
const fn wrap_all<T: Copy, const N: usize>(all: &[T]) -> [Status<T>; N] {
    assert!(all.len() == N && N > 0);
    let mut wrapped = [Status(all[0]); N];
    let mut i = 1;
    while i < N {
        wrapped[i] = Status(all[i]);
        i += 1;
    }
    wrapped
}

macro_rules! status_set {
    ($($status:ident),+) => {$(
        impl StatusSet for $status {
            const VALUES: &'static [Status<Self>] =
                &wrap_all::<Self, { $status::ALL.len() }>($status::ALL);

            fn stored(self) -> &'static str {
                self.as_str()
            }
        }
    )+};
}

status_set!(JobStatus, WorkflowRunStatus);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_status_is_offered_in_lower_case() {
        let names: Vec<String> = Status::<JobStatus>::value_variants()
            .iter()
            .filter_map(|status| status.to_possible_value())
            .map(|value| value.get_name().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "pending",
                "leased",
                "succeeded",
                "dead_lettered",
                "canceled"
            ]
        );
        assert_eq!(
            Status::<WorkflowRunStatus>::value_variants().len(),
            WorkflowRunStatus::ALL.len()
        );
    }

    #[test]
    fn a_status_is_read_in_any_case() {
        for text in ["dead_lettered", "DEAD_LETTERED"] {
            let status = Status::<JobStatus>::from_str(text, true).unwrap();
            assert_eq!(status.into_inner(), JobStatus::DeadLettered);
        }
        assert!(Status::<WorkflowRunStatus>::from_str("done", true).is_err());
    }
}
