//! What the testing kit can fail with.

use crate::engine;

/// The last way to a server that [`TestingError::NoServer`] proposes.
#[cfg(feature = "testcontainers")]
const DOCKER_HINT: &str = "start Docker";
#[cfg(not(feature = "testcontainers"))]
const DOCKER_HINT: &str = "start Docker and enable runledger's `testcontainers` feature";

/// Why a test database could not be set up, or a drain or read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestingError {
    /// No PostgreSQL server to run against: none of the places
    /// [`TestServer::find`](super::TestServer::find) looks at has one.
    #[error(
        "no PostgreSQL found: set DATABASE_URL, start a server on 127.0.0.1:5432, install \
         PostgreSQL 14+ server binaries (Debian/Ubuntu: apt-get install postgresql; macOS: brew \
         install postgresql@16) or {docker} ({reason})",
        docker = DOCKER_HINT
    )]
    NoServer {
        /// Why each place had none, in the order they were tried.
        reason: String,
    },
    /// The throwaway cluster could not be started.
    #[error("no throwaway PostgreSQL cluster: {0}")]
    Cluster(String),
    /// The PostgreSQL container could not be started.
    #[error("the PostgreSQL test container could not be started: {0}")]
    Container(String),
    /// Creating, migrating or dropping the test database failed.
    #[error("the test database could not be {action}: {source}")]
    Database {
        /// What was being done.
        action: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// A Runledger call failed (syncing definitions, claiming, reading).
    #[error(transparent)]
    Runledger(#[from] crate::Error),
    /// Draining did not settle: jobs kept becoming due (a job that always enqueues another,
    /// for instance).
    #[error("draining did not settle after {passes} passes; jobs keep becoming due")]
    DrainDidNotSettle {
        /// The passes run.
        passes: usize,
    },
    /// A stored payload does not match the job's Rust type.
    #[error("a stored payload of `{job_type}` does not match its Rust type: {message}")]
    PayloadInvalid {
        /// The job type.
        job_type: String,
        /// serde's message.
        message: String,
    },
}

impl TestingError {
    /// Stable dotted code, e.g. `testing.no_server`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NoServer { .. } => "testing.no_server",
            Self::Cluster(_) => "testing.cluster_failed",
            Self::Container(_) => "testing.container_failed",
            Self::Database { .. } => "testing.database_failed",
            Self::Runledger(err) => err.code(),
            Self::DrainDidNotSettle { .. } => "testing.drain_did_not_settle",
            Self::PayloadInvalid { .. } => "job.payload_invalid",
        }
    }

    pub(super) fn database(action: &'static str, source: sqlx::Error) -> Self {
        Self::Database { action, source }
    }
}

impl From<engine::postgres::Error> for TestingError {
    fn from(err: engine::postgres::Error) -> Self {
        Self::Runledger(err.into())
    }
}
