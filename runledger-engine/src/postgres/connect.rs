//! The first connection a process makes, checked with a short timeout and explained in one line:
//! where it tried to connect, what went wrong, and what to check; and the connections a worker
//! opens together before its loops start.

use std::fmt;
use std::io;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, PgPool};

/// How long [`check_connection`] waits for the server by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a connection to PostgreSQL could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionFailure {
    /// Nothing listens on the host and port (the server is down or the port is wrong).
    Refused,
    /// No answer within the timeout (a firewall, a wrong host, or an overloaded server).
    TimedOut,
    /// The host could not be resolved or reached.
    Unreachable,
    /// The server refused the user: wrong password, unknown role, or no `pg_hba.conf` entry.
    AuthenticationFailed,
    /// The database named in the URL does not exist.
    DatabaseMissing,
    /// The server accepts only encrypted connections, and the URL asked for none.
    TlsRequired,
    /// TLS was asked for but could not be set up (the server has no TLS, or its certificate
    /// was refused).
    TlsFailed,
    /// The server is starting up, shutting down, or out of connection slots.
    ServerUnavailable,
    /// Anything else; the source error has the detail.
    Other,
}

impl ConnectionFailure {
    /// Stable dotted code, e.g. `connection.refused`.
    pub fn code(self) -> &'static str {
        match self {
            Self::Refused => "connection.refused",
            Self::TimedOut => "connection.timed_out",
            Self::Unreachable => "connection.unreachable",
            Self::AuthenticationFailed => "connection.authentication_failed",
            Self::DatabaseMissing => "connection.database_missing",
            Self::TlsRequired => "connection.tls_required",
            Self::TlsFailed => "connection.tls_failed",
            Self::ServerUnavailable => "connection.server_unavailable",
            Self::Other => "connection.failed",
        }
    }

    /// Classifies an error of `sqlx`; `None` when it is not about reaching or entering the
    /// server (a failed statement, a decode error).
    pub fn classify(error: &sqlx::Error) -> Option<Self> {
        match error {
            sqlx::Error::Io(err) => Some(match err.kind() {
                io::ErrorKind::ConnectionRefused => Self::Refused,
                io::ErrorKind::TimedOut => Self::TimedOut,
                _ => Self::Unreachable,
            }),
            sqlx::Error::Tls(_) => Some(Self::TlsFailed),
            sqlx::Error::PoolTimedOut => Some(Self::TimedOut),
            sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed | sqlx::Error::Protocol(_) => {
                Some(Self::Other)
            }
            sqlx::Error::Database(err) => match err.code().as_deref() {
                // invalid_authorization_specification: no pg_hba.conf entry or unknown role.
                Some("28000") if err.message().contains("no encryption") => Some(Self::TlsRequired),
                Some(code) if code.starts_with("28") => Some(Self::AuthenticationFailed),
                Some("3D000") => Some(Self::DatabaseMissing),
                // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections.
                Some("57P01" | "57P02" | "57P03" | "53300") => Some(Self::ServerUnavailable),
                _ => None,
            },
            _ => None,
        }
    }

    fn cause(self) -> &'static str {
        match self {
            Self::Refused => "connection refused",
            Self::TimedOut => "no answer",
            Self::Unreachable => "the host could not be reached",
            Self::AuthenticationFailed => "authentication failed",
            Self::DatabaseMissing => "the database does not exist",
            Self::TlsRequired => "the server requires TLS",
            Self::TlsFailed => "TLS could not be set up",
            Self::ServerUnavailable => "the server is not accepting connections",
            Self::Other => "the connection failed",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Self::Refused => "is PostgreSQL running there? Check the host and port in DATABASE_URL",
            Self::TimedOut => "check the host and port in DATABASE_URL, and any firewall between",
            Self::Unreachable => "check the host name in DATABASE_URL",
            Self::AuthenticationFailed => {
                "check the user name and password in DATABASE_URL, and the server's pg_hba.conf"
            }
            Self::DatabaseMissing => {
                "create it (`createdb <name>`) or fix the database name in DATABASE_URL"
            }
            Self::TlsRequired => "add `?sslmode=require` to DATABASE_URL",
            Self::TlsFailed => {
                "check `sslmode` (and `sslrootcert`) in DATABASE_URL and the server's TLS setup"
            }
            Self::ServerUnavailable => {
                "it is starting, stopping or out of connection slots; retry shortly"
            }
            Self::Other => "check DATABASE_URL",
        }
    }
}

/// A connection to PostgreSQL failed: where it was going, why, and what to check.
///
/// `Display` is one line naming the host, port, database and user (never the password), the
/// cause and a hint; [`source`](std::error::Error::source) is the `sqlx` error, when there is
/// one.
///
/// ```
/// use runledger_engine::postgres::{ConnectionError, ConnectionFailure};
///
/// let options: sqlx::postgres::PgConnectOptions =
///     "postgres://app:secret@db.internal:6543/orders".parse().unwrap();
/// let err = ConnectionError::new(&options, ConnectionFailure::Refused, None);
/// assert_eq!(err.code(), "connection.refused");
/// assert_eq!(
///     err.to_string(),
///     "cannot connect to PostgreSQL at db.internal:6543, database `orders`, user `app`: \
///      connection refused; is PostgreSQL running there? Check the host and port in DATABASE_URL",
/// );
/// ```
#[derive(Debug)]
pub struct ConnectionError {
    target: String,
    failure: ConnectionFailure,
    detail: Option<String>,
    source: Option<sqlx::Error>,
}

impl ConnectionError {
    /// A failure to connect with `options`, caused by `source` when there is one.
    pub fn new(
        options: &PgConnectOptions,
        failure: ConnectionFailure,
        source: Option<sqlx::Error>,
    ) -> Self {
        // The I/O and TLS errors say which lookup or handshake step failed, and hold no secret.
        let detail = match (&failure, &source) {
            (ConnectionFailure::Unreachable, Some(sqlx::Error::Io(err))) => Some(err.to_string()),
            (ConnectionFailure::TlsFailed, Some(sqlx::Error::Tls(err))) => Some(err.to_string()),
            _ => None,
        };
        Self {
            target: describe_target(options),
            failure,
            detail,
            source,
        }
    }

    /// Classifies `source`; every error counts as a connection failure here
    /// ([`ConnectionFailure::Other`] when it is not recognized).
    pub fn from_sqlx(options: &PgConnectOptions, source: sqlx::Error) -> Self {
        let failure = ConnectionFailure::classify(&source).unwrap_or(ConnectionFailure::Other);
        Self::new(options, failure, Some(source))
    }

    /// Why the connection failed.
    pub fn failure(&self) -> ConnectionFailure {
        self.failure
    }

    /// Stable dotted code, e.g. `connection.authentication_failed`.
    pub fn code(&self) -> &'static str {
        self.failure.code()
    }

    /// The full diagnostic, including the server's own message, for logs.
    pub fn internal_message(&self) -> String {
        match &self.source {
            Some(source) => format!("{self} ({source})"),
            None => self.to_string(),
        }
    }
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot connect to PostgreSQL at {}: ", self.target)?;
        f.write_str(self.failure.cause())?;
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        write!(f, "; {}", self.failure.hint())
    }
}

impl std::error::Error for ConnectionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|err| err as &(dyn std::error::Error + 'static))
    }
}

/// Where a connection goes, without the password: `host:port, database `db`, user `u``.
fn describe_target(options: &PgConnectOptions) -> String {
    let user = options.get_username();
    let address = match options.get_socket() {
        Some(socket) => format!("socket {}", socket.display()),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    };
    let database = options.get_database().unwrap_or(user);
    format!("{address}, database `{database}`, user `{user}`")
}

/// Opens one connection with `pool`'s settings, within `timeout`, and closes it: the check a
/// process makes before it starts, so that a wrong `DATABASE_URL` fails at once with a message
/// that says what to fix instead of after the pool's acquire timeout.
///
/// ```no_run
/// use runledger_engine::postgres::{DEFAULT_CONNECT_TIMEOUT, check_connection};
///
/// # async fn demo(pool: sqlx::PgPool) {
/// if let Err(err) = check_connection(&pool, DEFAULT_CONNECT_TIMEOUT).await {
///     eprintln!("error: {err}"); // names host, port, database, the cause and a hint
///     std::process::exit(1);
/// }
/// # }
/// ```
pub async fn check_connection(pool: &PgPool, timeout: Duration) -> Result<(), ConnectionError> {
    let options = pool.connect_options();
    let connecting = PgConnection::connect_with(&options);
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(connection)) => {
            // The check has its answer; a failure to say goodbye changes nothing.
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(err)) => Err(ConnectionError::from_sqlx(&options, err)),
        Err(_) => {
            let mut err = ConnectionError::new(&options, ConnectionFailure::TimedOut, None);
            err.detail = Some(format!("within {} ms", timeout.as_millis()));
            Err(err)
        }
    }
}

/// Longest [`open_connections`] waits for the pool to open its connections.
const OPEN_CONNECTIONS_TIMEOUT: Duration = Duration::from_secs(2);

/// Opens `wanted` connections of `pool` together (at most as many as it has room for besides
/// the connections taken from it) and leaves them idle in it. A worker calls it with the
/// connections its loops hold at once
/// ([`WorkerConfig::connections_used`](crate::runtime::worker::WorkerConfig::connections_used))
/// before they start.
///
/// Opened one by one by the loops, each as it first needed one, a TLS connection (sqlx's
/// default is `sslmode=prefer`) takes tens of milliseconds, and each loop would wait for its own
/// before its first statement. Connections the pool cannot open within two seconds are left to
/// whoever needs them next; this never fails.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) {
/// runledger_engine::postgres::open_connections(&pool, 8).await;
/// # }
/// ```
pub async fn open_connections(pool: &PgPool, wanted: u32) {
    // Only connections no one holds: waiting for the ones the application has taken would keep
    // the others from it meanwhile.
    let free = pool
        .options()
        .get_max_connections()
        .saturating_sub(pool.size())
        .saturating_add(u32::try_from(pool.num_idle()).unwrap_or(u32::MAX));
    let opening = futures_util::future::join_all((0..wanted.min(free)).map(|_| pool.acquire()));
    drop(tokio::time::timeout(OPEN_CONNECTIONS_TIMEOUT, opening).await);
}
