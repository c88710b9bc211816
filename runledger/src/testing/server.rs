//! [`TestServer`]: a PostgreSQL server to run against, wherever the machine has one.

use std::fmt;
use std::future::Future;
#[cfg(any(unix, feature = "testcontainers"))]
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::error::TestingError;
use crate::engine::postgres::check_connection;

/// How long a server may take to accept the first connection before it counts as unreachable.
const SERVER_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// The address of the local server looked for after `DATABASE_URL`.
const LOCAL_HOST: &str = "127.0.0.1";
const LOCAL_PORT: u16 = 5432;

/// A PostgreSQL server where tests and examples may create databases, found by
/// [`find`](Self::find) in this order:
///
/// 1. `DATABASE_URL`, when it is set and answers;
/// 2. a server on 127.0.0.1:5432 that lets user `postgres` in without a password;
/// 3. a throwaway cluster made from the PostgreSQL 14+ server binaries installed on the machine
///    (`initdb` and `postgres` in `PATH`, in `pg_config --bindir`, in Debian's
///    `/usr/lib/postgresql/*/bin` (highest version first), in Homebrew's
///    `/opt/homebrew/opt/postgresql@*/bin` or `/usr/local/opt/postgresql@*/bin`, or in
///    `/usr/local/pgsql/bin`), on a free port of 127.0.0.1; under root it runs as the
///    `postgres` system user;
/// 4. with the `testcontainers` feature, a PostgreSQL container, when a Docker engine is
///    reachable (image `RUNLEDGER_TEST_PG_IMAGE`, default `postgres:16-alpine`).
///
/// Its `Display` says which it is, e.g. `DATABASE_URL (db.internal:5432/app)`,
/// `local server on 127.0.0.1:5432`, `throwaway cluster of PostgreSQL 15
/// (/usr/lib/postgresql/15/bin) on 127.0.0.1:39017` or `container postgres:16-alpine on
/// localhost:32768`.
///
/// One throwaway cluster serves the whole process: the first `find` that gets that far starts
/// it, and it is stopped and its directory removed when the process ends, however it ends (a
/// panic, `std::process::exit` or a kill included). The container is shared by the values that
/// exist at the same time and removed when the last of them is dropped.
/// [`TestDatabase::new`](super::TestDatabase::new) creates each test's database on the server
/// `find` returns, so a project's own tests get the same fallback.
///
/// ```no_run
/// use runledger::testing::TestServer;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let server = TestServer::find().await?;
/// eprintln!("database: {server}");
/// let pool = runledger::sqlx::PgPool::connect_with(server.connect_options()).await?;
/// # let _ = pool;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TestServer {
    options: PgConnectOptions,
    url: String,
    source: Source,
}

/// What the server is; the cluster and the container stay up while a value holds them.
#[derive(Debug, Clone)]
enum Source {
    DatabaseUrl,
    LocalServer,
    #[cfg(unix)]
    Cluster(Arc<super::cluster::Cluster>),
    #[cfg(feature = "testcontainers")]
    Container(Arc<super::container::SharedContainer>),
}

/// The places [`TestServer::find`] looks, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    DatabaseUrl,
    LocalServer,
    Cluster,
    Container,
}

impl Place {
    const ORDER: [Self; 4] = [
        Self::DatabaseUrl,
        Self::LocalServer,
        Self::Cluster,
        Self::Container,
    ];

    /// The server at this place, or why there is none.
    async fn look(self) -> Result<TestServer, String> {
        match self {
            Self::DatabaseUrl => TestServer::database_url().await,
            Self::LocalServer => TestServer::local_server().await,
            Self::Cluster => TestServer::shared_cluster().await,
            Self::Container => TestServer::any_container().await,
        }
    }
}

/// Tries each place in order and returns the first server found, or why each place had none.
async fn first_found<T, F, Fut>(mut look: F) -> Result<T, Vec<String>>
where
    F: FnMut(Place) -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let mut passed_over = Vec::new();
    for place in Place::ORDER {
        match look(place).await {
            Ok(found) => return Ok(found),
            Err(why) => passed_over.push(why),
        }
    }
    Err(passed_over)
}

impl TestServer {
    /// The first server of the order above; fails with `testing.no_server`, whose one-line
    /// message says what to set, start or install, when there is none.
    pub async fn find() -> Result<Self, TestingError> {
        first_found(Place::look)
            .await
            .map_err(|passed_over| TestingError::NoServer {
                reason: passed_over.join("; "),
            })
    }

    /// A throwaway cluster of its own (Unix only), whatever `DATABASE_URL` says: stopped and
    /// removed when the last clone of the value is dropped, or when the process ends.
    #[cfg(unix)]
    pub async fn start_cluster() -> Result<Self, TestingError> {
        let cluster = super::cluster::Cluster::start()
            .await
            .map_err(TestingError::Cluster)?;
        Ok(Self::of_cluster(Arc::new(cluster)))
    }

    /// The shared PostgreSQL container, whatever `DATABASE_URL` says (feature
    /// `testcontainers`; needs a Docker engine).
    #[cfg(feature = "testcontainers")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testcontainers")))]
    pub async fn container() -> Result<Self, TestingError> {
        let container = super::container::SharedContainer::get()
            .await
            .map_err(|err| {
                TestingError::Container(format!("{err}; is a Docker engine running?"))
            })?;
        let options = container.options().clone();
        Ok(Self {
            url: url_of(&options),
            options,
            source: Source::Container(container),
        })
    }

    /// The URL of the server's default database (for `DATABASE_URL`: the variable itself).
    /// Hand it to another process, e.g. as its `DATABASE_URL`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Connection options for the server's default database.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    async fn database_url() -> Result<Self, String> {
        let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
        let options: PgConnectOptions = url
            .parse()
            .map_err(|err| format!("DATABASE_URL is not a PostgreSQL URL: {err}"))?;
        answers(&options).await.map_err(|err| {
            tracing::warn!(error = %err, "DATABASE_URL does not answer; looking further");
            format!("DATABASE_URL: {err}")
        })?;
        Ok(Self {
            options,
            url,
            source: Source::DatabaseUrl,
        })
    }

    async fn local_server() -> Result<Self, String> {
        let options = PgConnectOptions::new_without_pgpass()
            .host(LOCAL_HOST)
            .port(LOCAL_PORT)
            .username("postgres")
            .database("postgres");
        answers(&options).await.map_err(|err| {
            format!(
                "no server on {LOCAL_HOST}:{LOCAL_PORT} lets `postgres` in without a password ({})",
                err.code()
            )
        })?;
        Ok(Self {
            url: url_of(&options),
            options,
            source: Source::LocalServer,
        })
    }

    #[cfg(unix)]
    async fn shared_cluster() -> Result<Self, String> {
        super::cluster::shared().await.map(Self::of_cluster)
    }

    #[cfg(not(unix))]
    async fn shared_cluster() -> Result<Self, String> {
        Err("throwaway clusters need a Unix system".to_owned())
    }

    #[cfg(unix)]
    fn of_cluster(cluster: Arc<super::cluster::Cluster>) -> Self {
        Self {
            options: cluster.connect_options(),
            url: cluster.url(),
            source: Source::Cluster(cluster),
        }
    }

    #[cfg(feature = "testcontainers")]
    async fn any_container() -> Result<Self, String> {
        Self::container().await.map_err(|err| err.to_string())
    }

    #[cfg(not(feature = "testcontainers"))]
    async fn any_container() -> Result<Self, String> {
        Err("runledger's `testcontainers` feature is off".to_owned())
    }
}

impl fmt::Display for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Source::DatabaseUrl => write!(f, "DATABASE_URL ({})", address_of(&self.options)),
            Source::LocalServer => write!(f, "local server on {LOCAL_HOST}:{LOCAL_PORT}"),
            #[cfg(unix)]
            Source::Cluster(cluster) => write!(f, "{cluster}"),
            #[cfg(feature = "testcontainers")]
            Source::Container(container) => write!(
                f,
                "container {} on {}:{}",
                container.image(),
                self.options.get_host(),
                self.options.get_port()
            ),
        }
    }
}

/// Whether a first connection succeeds within [`SERVER_CHECK_TIMEOUT`].
async fn answers(
    options: &PgConnectOptions,
) -> Result<(), crate::engine::postgres::ConnectionError> {
    let probe = PgPoolOptions::new().connect_lazy_with(options.clone());
    let answer = check_connection(&probe, SERVER_CHECK_TIMEOUT).await;
    probe.close().await;
    answer
}

/// `host:port/database` (or `socket/database`), without user or password.
fn address_of(options: &PgConnectOptions) -> String {
    let database = options.get_database().unwrap_or(options.get_username());
    match options.get_socket() {
        Some(socket) => format!("{}/{database}", socket.display()),
        None => format!("{}:{}/{database}", options.get_host(), options.get_port()),
    }
}

/// The URL of a server reached as `postgres` without a password.
fn url_of(options: &PgConnectOptions) -> String {
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("postgres")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs [`first_found`] over fake places: `answering` is the one place that has a server.
    fn look_with(answering: Option<Place>) -> (Result<Place, Vec<String>>, Vec<Place>) {
        let mut looked = Vec::new();
        let found = block_on(first_found(|place| {
            looked.push(place);
            async move {
                if Some(place) == answering {
                    Ok(place)
                } else {
                    Err(format!("nothing at {place:?}"))
                }
            }
        }));
        (found, looked)
    }

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn database_url_is_tried_first_and_nothing_else_when_it_answers() {
        let (found, looked) = look_with(Some(Place::DatabaseUrl));
        assert_eq!(found, Ok(Place::DatabaseUrl));
        assert_eq!(looked, [Place::DatabaseUrl]);
    }

    #[test]
    fn the_local_server_comes_before_a_cluster_and_a_cluster_before_a_container() {
        let (found, looked) = look_with(Some(Place::Cluster));
        assert_eq!(found, Ok(Place::Cluster));
        assert_eq!(
            looked,
            [Place::DatabaseUrl, Place::LocalServer, Place::Cluster]
        );
        let (found, _) = look_with(Some(Place::LocalServer));
        assert_eq!(found, Ok(Place::LocalServer));
    }

    #[test]
    fn when_no_place_has_a_server_each_says_why_in_order() {
        let (found, looked) = look_with(None);
        assert_eq!(looked, Place::ORDER);
        assert_eq!(
            found,
            Err(vec![
                "nothing at DatabaseUrl".to_owned(),
                "nothing at LocalServer".to_owned(),
                "nothing at Cluster".to_owned(),
                "nothing at Container".to_owned(),
            ])
        );
    }

    #[test]
    fn nothing_found_is_one_line_saying_what_to_set_start_or_install() {
        let err = TestingError::NoServer {
            reason: "DATABASE_URL is not set; no server on 127.0.0.1:5432".to_owned(),
        };
        let message = err.to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(
            message.starts_with(
                "no PostgreSQL found: set DATABASE_URL, start a server on 127.0.0.1:5432, \
                 install PostgreSQL 14+ server binaries (Debian/Ubuntu: apt-get install \
                 postgresql; macOS: brew install postgresql@16) or "
            ),
            "{message}"
        );
        assert!(message.contains("Docker"), "{message}");
        assert!(
            message.ends_with("(DATABASE_URL is not set; no server on 127.0.0.1:5432)"),
            "{message}"
        );
        assert_eq!(err.code(), "testing.no_server");
    }

    #[test]
    fn a_database_url_is_described_without_user_or_password() {
        let options: PgConnectOptions = "postgres://app:secret@db.internal:6543/orders"
            .parse()
            .unwrap();
        assert_eq!(address_of(&options), "db.internal:6543/orders");
        let server = TestServer {
            url: "postgres://app:secret@db.internal:6543/orders".to_owned(),
            options,
            source: Source::DatabaseUrl,
        };
        assert_eq!(server.to_string(), "DATABASE_URL (db.internal:6543/orders)");
    }
}
