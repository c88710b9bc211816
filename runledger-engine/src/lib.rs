//! Runledger's untyped engine: job and workflow contracts ([`core`]), the PostgreSQL store
//! ([`postgres`]) and the worker runtime ([`runtime`]).
//!
//! Most services use the typed `runledger` crate, which re-exports this one as
//! `runledger::engine`. Depend on the engine directly to work with raw JSON payloads and
//! hand-written handlers.
//!
//! ```no_run
//! use runledger_engine::postgres::jobs::{enqueue_job, upsert_job_definition, JobDefinitionUpsert, JobEnqueue};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
//! runledger_engine::postgres::migrate(&pool).await?;
//! upsert_job_definition(&pool, &JobDefinitionUpsert::new("emails.send")).await?;
//! let payload = serde_json::json!({"to": "ada@example.com"});
//! let job = enqueue_job(&pool, &JobEnqueue::new("emails.send", &payload)).await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod core;
pub mod postgres;
pub mod runtime;

/// Everything a typical worker or producer imports.
pub mod prelude {
    pub use crate::core::prelude::*;
    pub use crate::postgres::prelude::*;
}
