//! Test support for code that uses Runledger (feature `testing`): a PostgreSQL server wherever
//! the machine has one (or a throwaway cluster of its binaries), a fresh, migrated database
//! per test, running queued work inline until nothing is left, typed assertions on what was
//! enqueued, and contexts for calling a step handler without a database.
//!
//! Add it to your dev-dependencies (`runledger = { version = "0.1", features = ["testing"] }`).
//! The guide is `docs/testing.md`.
//!
//! ```no_run
//! use runledger::prelude::*;
//! use runledger::testing::{TestDatabase, assert_enqueued, drain};
//!
//! #[job(name = "emails.welcome")]
//! async fn send_welcome(user_id: u64) -> Result<(), JobError> {
//!     let _ = user_id;
//!     Ok(())
//! }
//!
//! #[tokio::test]
//! async fn signing_up_sends_the_welcome_email() {
//!     let db = TestDatabase::new().await.unwrap();
//!     SendWelcome { user_id: 7 }.enqueue(db.pool()).await.unwrap();
//!
//!     assert_enqueued::<SendWelcome>(db.pool(), |job| job.user_id == 7).await;
//!     let report = drain(db.pool()).await.unwrap();
//!     assert_eq!(report.succeeded(), 1);
//! }
//! ```

mod assertions;
#[cfg(unix)]
mod cluster;
#[cfg(feature = "testcontainers")]
mod container;
mod context;
mod database;
mod drain;
mod error;
mod server;

pub use assertions::{assert_enqueued, assert_workflow_enqueued, enqueued, enqueued_workflows};
pub use context::TestContext;
pub use database::TestDatabase;
pub use drain::{
    DEFAULT_MAX_PASSES, DrainOptions, DrainOutcome, DrainReport, DrainedRun, drain, drain_with,
    drain_worker, prepare,
};
pub use error::TestingError;
pub use server::TestServer;
