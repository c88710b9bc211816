//! Runledger: a durable job queue and workflow engine for Rust, backed only by PostgreSQL.
//!
//! The untyped engine is available as [`engine`].
//!
//! ```
//! use runledger::engine::core::jobs::JobType;
//!
//! assert!(JobType::try_new("emails.send").is_ok());
//! ```

pub use runledger_engine as engine;
