//! Runtime errors and loop exit reasons.

use crate::core::jobs::JobId;
use crate::runtime::catalog::CatalogError;
use crate::runtime::config::JobsConfigError;
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
