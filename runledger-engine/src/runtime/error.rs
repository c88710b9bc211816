//! Runtime errors: invalid settings, the Supervisor's errors, the errors of one pass of each
//! loop, and loop exit reasons.

use crate::core::jobs::JobId;
use crate::runtime::catalog::CatalogError;
use crate::runtime::registry::RegistryError;

/// Result alias for runtime calls.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Alias kept for code written against the original crate.
pub type Error = RuntimeError;

/// Why a low-level runtime loop returned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuntimeLoopExit {
    /// Shutdown was requested and the loop finished its work.
    Shutdown,
    /// Shutdown's hard stop fired before the loop drained; the listed jobs' handlers were
    /// dropped (their leases will expire and the reaper will retry them).
    Aborted {
        /// Jobs whose handlers were dropped.
        aborted_jobs: Vec<JobId>,
    },
    /// The loop's configuration was invalid; it never started.
    InvalidConfig(JobsConfigError),
}

/// A setting that is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobsConfigError {
    /// An environment variable is set but is not a valid value.
    #[error("environment variable {variable} has an invalid value {value:?}: expected {expected}")]
    InvalidEnvVar {
        /// The variable's name.
        variable: &'static str,
        /// What it contained.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A field of a hand-built config is out of range.
    #[error("invalid jobs config: {field} {problem}")]
    InvalidField {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The pool allows too few connections for a worker to make progress.
    #[error(
        "the database pool allows {max_connections} connection(s); a worker needs at least {required} (one is held by LISTEN)"
    )]
    PoolTooSmall {
        /// The pool's `max_connections`.
        max_connections: u32,
        /// The fewest that work,
        /// [`MIN_POOL_CONNECTIONS`](crate::runtime::config::MIN_POOL_CONNECTIONS).
        required: u32,
    },
}

impl JobsConfigError {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidEnvVar { .. } => "config.invalid_env_var",
            Self::InvalidField { .. } => "config.invalid_field",
            Self::PoolTooSmall { .. } => "config.pool_too_small",
        }
    }
}

/// Errors of the Supervisor and its builder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The jobs config is invalid.
    #[error(transparent)]
    InvalidJobsConfig(#[from] JobsConfigError),
    /// A handler could not be registered.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The catalog is invalid.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// No handler is registered, so the worker could claim nothing.
    #[error("no job handlers are registered")]
    NoHandlers,
    /// A supervised loop panicked.
    #[error("the {loop_name} loop panicked")]
    LoopPanicked {
        /// Which loop.
        loop_name: &'static str,
    },
    /// A supervised loop returned before shutdown was requested.
    #[error("the {loop_name} loop exited before shutdown was requested: {exit:?}")]
    LoopExitedEarly {
        /// Which loop.
        loop_name: &'static str,
        /// What it returned.
        exit: RuntimeLoopExit,
    },
    /// Shutdown did not finish within the deadline; the remaining tasks were aborted and the
    /// listed jobs' handlers dropped.
    #[error("shutdown missed its deadline; {} in-flight job(s) were aborted", aborted_jobs.len())]
    ShutdownDeadlineExceeded {
        /// Jobs whose handlers were dropped.
        aborted_jobs: Vec<JobId>,
    },
}

impl RuntimeError {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidJobsConfig(err) => err.code(),
            Self::Registry(err) => err.code(),
            Self::Catalog(err) => err.code(),
            Self::NoHandlers => "runtime.no_handlers",
            Self::LoopPanicked { .. } => "runtime.loop_panicked",
            Self::LoopExitedEarly { .. } => "runtime.loop_exited_early",
            Self::ShutdownDeadlineExceeded { .. } => "runtime.shutdown_deadline_exceeded",
        }
    }
}

/// Defines the error of one pass of a background loop: a database statement failed. The loop
/// itself logs it and tries again at its next pass; tests and custom orchestration calling
/// `run_once` see it.
macro_rules! pass_error {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, thiserror::Error)]
        #[non_exhaustive]
        pub enum $name {
            /// A statement of the pass failed (see the persistence error's code); nothing of
            /// the failed batch was committed.
            #[error(transparent)]
            Persistence(#[from] crate::postgres::Error),
        }

        impl $name {
            /// Stable error code (the persistence error's, e.g. `storage.unavailable`).
            pub fn code(&self) -> &'static str {
                match self {
                    Self::Persistence(err) => err.code(),
                }
            }

            /// Full diagnostic for server-side logs.
            pub fn internal_message(&self) -> String {
                match self {
                    Self::Persistence(err) => err.internal_message(),
                }
            }

            /// The persistence error underneath.
            pub fn into_persistence(self) -> crate::postgres::Error {
                match self {
                    Self::Persistence(err) => err,
                }
            }
        }
    };
}

pass_error!(
    /// Why a pass of the worker loop failed: the persistence error that
    /// [`WorkerLoop::run_once`](crate::runtime::worker::WorkerLoop::run_once) returns, under the
    /// name the other loops' errors share (`?` and `From` convert it).
    WorkerError
);
pass_error!(
    /// Why a reaper sweep ([`Reaper::run_once`](crate::runtime::reaper::Reaper::run_once))
    /// failed.
    ReaperError
);
pass_error!(
    /// Why a scheduler pass
    /// ([`Scheduler::run_once`](crate::runtime::scheduler::Scheduler::run_once)) failed.
    SchedulerError
);
pass_error!(
    /// Why an intent promotion pass
    /// ([`IntentPromoter::run_once`](crate::runtime::intent_promoter::IntentPromoter::run_once))
    /// failed.
    IntentPromoterError
);
