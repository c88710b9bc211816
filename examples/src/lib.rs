//! Runnable Runledger examples live in `examples/examples/`; run one with
//! `cargo run -p runledger-examples --example <name>`.

#![forbid(unsafe_code)]

use std::fmt::Display;
use std::process::ExitCode;

use runledger::testing::{TestServer, TestingError};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// The most connections an example's pool opens: what `Worker::from_env` gives a worker with
/// the default settings.
const MAX_CONNECTIONS: u32 = 50;

/// The database an example runs on: `DATABASE_URL`, a local server on 127.0.0.1:5432, a
/// throwaway cluster of the PostgreSQL binaries installed on the machine, or a container, in
/// that order ([`TestServer::find`]). Prints which on stderr, e.g. `database: throwaway cluster
/// of PostgreSQL 15 (/usr/lib/postgresql/15/bin) on 127.0.0.1:39017`; when there is none, the
/// error says in one line what to set, start or install.
///
/// A throwaway cluster lasts as long as the example's process: two examples that must share a
/// database (a worker and an enqueuer) need `DATABASE_URL` or a local server.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let db = runledger_examples::database().await?;
/// let worker = runledger::Worker::builder(db.pool()).build()?;
/// # let _ = worker;
/// # Ok(()) }
/// ```
pub async fn database() -> Result<Database, TestingError> {
    let server = TestServer::find().await?;
    eprintln!("database: {server}");
    let pool = PgPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .connect_lazy_with(server.connect_options());
    Ok(Database { pool, server })
}

/// An example's database, from [`database`]: a pool on it, and the server, which stays up (a
/// throwaway cluster or a container) as long as this value exists.
#[derive(Debug)]
pub struct Database {
    pool: PgPool,
    server: TestServer,
}

impl Database {
    /// A pool on the database (it connects on first use).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The server it is on.
    pub fn server(&self) -> &TestServer {
        &self.server
    }
}

/// Ends an example the way a command-line tool ends: status 0, or the error's one-line message
/// (its `Display`, which names the cause and what to check) on stderr and status 1.
///
/// ```
/// use std::process::ExitCode;
///
/// assert_eq!(runledger_examples::exit_code(Ok::<(), String>(())), ExitCode::SUCCESS);
/// assert_eq!(runledger_examples::exit_code(Err("no database")), ExitCode::FAILURE);
/// ```
pub fn exit_code<E: Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, giving up with an error naming `what`
/// after `limit`: how the examples wait for a worker without a fixed sleep.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
///
/// let value = runledger_examples::wait_for("a value", Duration::from_secs(1), || async {
///     Ok::<_, std::io::Error>(Some(7))
/// })
/// .await
/// .unwrap();
/// assert_eq!(value, 7);
/// # }
/// ```
pub async fn wait_for<T, E, F, Fut>(
    what: &str,
    limit: std::time::Duration,
    mut probe: F,
) -> Result<T, Box<dyn std::error::Error>>
where
    E: std::error::Error + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, E>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("gave up waiting for {what} after {limit:?}").into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
