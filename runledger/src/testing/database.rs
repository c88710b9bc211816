//! A fresh, migrated database per test.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, PgPool};

use super::error::TestingError;
use super::server::TestServer;
use crate::engine::postgres::migrate;

/// A database created for one test, with Runledger's schema applied and the definitions of the
/// binary's `#[job]`s and `#[schedule]`s synced, dropped when the value is dropped (or by
/// [`close`](Self::close)).
///
/// The server is the one [`TestServer::find`] finds: `DATABASE_URL`, a local server on
/// 127.0.0.1:5432, a throwaway cluster of the PostgreSQL binaries installed on the machine, or,
/// with the `testcontainers` feature, a container (its database part is only used to connect;
/// the role must be allowed to create databases). When there is none, [`new`](Self::new) fails
/// with `testing.no_server`, saying what to set, start or install.
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
    /// Also keeps a throwaway cluster or container alive while the database exists.
    server: TestServer,
    dropped: bool,
}

impl TestDatabase {
    /// Creates a database named `runledger_test_<uuid>` and applies the migrations.
    pub async fn new() -> Result<Self, TestingError> {
        Self::on(&TestServer::find().await?).await
    }

    /// Like [`new`](Self::new), but always in the shared PostgreSQL container, whatever
    /// `DATABASE_URL` says (feature `testcontainers`; needs a Docker engine).
    #[cfg(feature = "testcontainers")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testcontainers")))]
    pub async fn in_container() -> Result<Self, TestingError> {
        Self::on(&TestServer::container().await?).await
    }

    /// Like [`new`](Self::new), on the given server.
    pub async fn on(server: &TestServer) -> Result<Self, TestingError> {
        let name = format!("runledger_test_{}", uuid::Uuid::now_v7().simple());
        let mut admin = PgConnection::connect_with(&server.connect_options())
            .await
            .map_err(|e| TestingError::database("created", e))?;
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .map_err(|e| TestingError::database("created", e))?;
        let _ = admin.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect_lazy_with(server.connect_options().database(&name));
        let database = Self {
            pool,
            name,
            server: server.clone(),
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
        self.server.connect_options().database(&self.name)
    }

    /// Closes the pool and drops the database now (dropping the value does the same, on a
    /// helper thread).
    pub async fn close(mut self) -> Result<(), TestingError> {
        self.pool.close().await;
        self.dropped = true;
        drop_database(&self.server.connect_options(), &self.name).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        // Drop cannot await, and the test's runtime may be shutting down: drop the database on
        // a thread with a runtime of its own. `WITH (FORCE)` ends the pool's sessions.
        let (options, name) = (self.server.connect_options(), self.name.clone());
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
