//! A fresh, migrated database per test.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, PgPool};

use super::error::TestingError;
use crate::engine::postgres::{check_connection, migrate};

/// How long the first connection to `DATABASE_URL` may take before the server counts as
/// unreachable.
const SERVER_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// A database created for one test, with Runledger's schema applied and the definitions of the
/// binary's `#[job]`s and `#[schedule]`s synced, dropped when the value is dropped (or by
/// [`close`](Self::close)).
///
/// The server is the one `DATABASE_URL` names (its database part is only used to connect; the
/// role must be allowed to create databases). With the `testcontainers` feature, when
/// `DATABASE_URL` is unset or unreachable and a Docker engine is available, one PostgreSQL
/// container is started and shared by the tests of the binary that run at the same time
/// (image `RUNLEDGER_TEST_PG_IMAGE`, default `postgres:16-alpine`); it is removed once the last
/// of them drops its database. Without either, [`new`](Self::new) fails with
/// `testing.no_server`, saying what to set.
///
/// Works with `#[tokio::test]` (any flavor). Under `#[sqlx::test]`, use the pool it gives
/// (`#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]`) with the rest of this
/// module instead.
///
/// ```no_run
/// use runledger::testing::TestDatabase;
///
/// #[tokio::test]
/// async fn uses_its_own_database() {
///     let db = TestDatabase::new().await.unwrap();
///     let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(db.pool()).await.unwrap();
///     assert_eq!(one, 1);
/// }
/// ```
#[derive(Debug)]
pub struct TestDatabase {
    pool: PgPool,
    name: String,
    server: Server,
    dropped: bool,
}

/// Where test databases are created.
#[derive(Debug, Clone)]
struct Server {
    options: PgConnectOptions,
    /// Keeps the shared container alive while a database on it exists.
    #[cfg(feature = "testcontainers")]
    _container: Option<std::sync::Arc<super::container::SharedContainer>>,
}

impl TestDatabase {
    /// Creates a database named `runledger_test_<uuid>` and applies the migrations.
    pub async fn new() -> Result<Self, TestingError> {
        Self::on(Server::find().await?).await
    }

    /// Like [`new`](Self::new), but always in the shared PostgreSQL container, whatever
    /// `DATABASE_URL` says (feature `testcontainers`; needs a Docker engine).
    #[cfg(feature = "testcontainers")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testcontainers")))]
    pub async fn in_container() -> Result<Self, TestingError> {
        Self::on(Server::container("a container was asked for".to_owned()).await?).await
    }

    async fn on(server: Server) -> Result<Self, TestingError> {
        let name = format!("runledger_test_{}", uuid::Uuid::now_v7().simple());
        let mut admin = PgConnection::connect_with(&server.options)
            .await
            .map_err(|e| TestingError::database("created", e))?;
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .map_err(|e| TestingError::database("created", e))?;
        let _ = admin.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect_lazy_with(server.options.clone().database(&name));
        let database = Self {
            pool,
            name,
            server,
            dropped: false,
        };
        migrate(&database.pool)
            .await
            .map_err(|e| TestingError::Runledger(e.into()))?;
        super::prepare(&database.pool).await?;
        Ok(database)
    }

    /// A pool on the test database (up to 10 connections).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connection options for the test database, to build another pool or hand to a process.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.server.options.clone().database(&self.name)
    }

    /// Closes the pool and drops the database now (dropping the value does the same, on a
    /// helper thread).
    pub async fn close(mut self) -> Result<(), TestingError> {
        self.pool.close().await;
        self.dropped = true;
        drop_database(&self.server.options, &self.name).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        // Drop cannot await, and the test's runtime may be shutting down: drop the database on
        // a thread with a runtime of its own. `WITH (FORCE)` ends the pool's sessions.
        let (options, name) = (self.server.options.clone(), self.name.clone());
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime
                && let Err(err) = runtime.block_on(drop_database(&options, &name))
            {
                tracing::warn!(database = %name, error = %err, "test database not dropped");
            }
        });
        let _ = cleanup.join();
    }
}

async fn drop_database(options: &PgConnectOptions, name: &str) -> Result<(), TestingError> {
    let mut admin = PgConnection::connect_with(options)
        .await
        .map_err(|e| TestingError::database("dropped", e))?;
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .await
        .map_err(|e| TestingError::database("dropped", e))?;
    let _ = admin.close().await;
    Ok(())
}

impl Server {
    /// `DATABASE_URL` when it answers; else, with the `testcontainers` feature, a container.
    async fn find() -> Result<Self, TestingError> {
        let reason = match std::env::var("DATABASE_URL") {
            Err(_) => "DATABASE_URL is not set".to_owned(),
            Ok(url) => match url.parse::<PgConnectOptions>() {
                Err(err) => format!("DATABASE_URL is not a PostgreSQL URL: {err}"),
                Ok(options) => {
                    let probe = PgPoolOptions::new().connect_lazy_with(options.clone());
                    match check_connection(&probe, SERVER_CHECK_TIMEOUT).await {
                        Ok(()) => return Ok(Self::at(options)),
                        Err(err) => err.to_string(),
                    }
                }
            },
        };
        Self::without_database_url(reason).await
    }

    fn at(options: PgConnectOptions) -> Self {
        Self {
            options,
            #[cfg(feature = "testcontainers")]
            _container: None,
        }
    }

    #[cfg(feature = "testcontainers")]
    async fn without_database_url(reason: String) -> Result<Self, TestingError> {
        Self::container(reason).await
    }

    #[cfg(feature = "testcontainers")]
    async fn container(reason: String) -> Result<Self, TestingError> {
        let container = super::container::SharedContainer::get()
            .await
            .map_err(|err| {
                TestingError::Container(format!(
                    "{err} (tried because {reason}; is a Docker engine running?)"
                ))
            })?;
        Ok(Self {
            options: container.options().clone(),
            _container: Some(container),
        })
    }

    #[cfg(not(feature = "testcontainers"))]
    async fn without_database_url(reason: String) -> Result<Self, TestingError> {
        Err(TestingError::NoServer { reason })
    }
}
