//! PostgreSQL persistence: the schema and its migrations, and every SQL statement Runledger
//! runs. All objects live in the `runledger` schema; the current definition of each table,
//! function, trigger and view, with its contract, is in `runledger-engine/sql/`.

mod connect;
mod error;
mod input;
pub mod jobs;
mod schema;
mod types;

pub use connect::{
    ConnectionError, ConnectionFailure, DEFAULT_CONNECT_TIMEOUT, check_connection, open_connections,
};
pub use error::{Error, ErrorCategory, QueryError, Result};
pub use schema::{
    MIGRATOR, SchemaCompatibilityError, ensure_schema_compatible,
    ensure_schema_compatible_after_idempotency_cutover, migrate, migrate_after_idempotency_cutover,
};

/// Common imports for code that enqueues and inspects jobs.
///
/// ```
/// use runledger_engine::postgres::prelude::*;
///
/// let payload = serde_json::json!({});
/// let _request = JobEnqueue::new("emails.send", &payload);
/// ```
pub mod prelude {
    pub use super::jobs::{
        EnqueuedJob, JobDefinitionUpsert, JobEnqueue, JobListFilter, enqueue_job, enqueue_jobs,
        get_job_by_id, list_jobs, upsert_job_definition,
    };
    pub use super::{Error, ErrorCategory, QueryError, ensure_schema_compatible, migrate};
}
