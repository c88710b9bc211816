//! The worker runtime: the handler registry, with the Supervisor and its loops built on top.

pub mod registry;

/// Common imports for worker processes.
pub mod prelude {
    pub use super::registry::JobHandler;
}
