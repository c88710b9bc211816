//! Handlers by job type.

pub use crate::core::jobs::JobHandler;
