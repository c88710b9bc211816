//! A throwaway PostgreSQL cluster made from the server binaries installed on the machine:
//! `initdb` into a temporary directory, `postgres` on a free port of 127.0.0.1 (with TLS on a
//! self-signed certificate when `openssl` is installed, as a packaged server has), and both
//! gone when the cluster is dropped or the process ends, however it ends.
//!
//! A small shell script (`supervise.sh`) owns the cluster. Its standard input is a pipe whose
//! other end only this process holds; when the pipe closes (on drop, or when the kernel closes
//! the process's descriptors at exit, `std::process::exit` and SIGKILL included) the script
//! stops the server and removes the directory. Statics are never dropped, so this is what
//! cleans up the cluster that [`shared`] keeps for the whole process.

mod binaries;
mod run_as;

use std::fmt;
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::OnceCell;

use self::binaries::{Binaries, Search};
use self::run_as::RunAs;

/// The script that runs the cluster, see the module's documentation.
const SUPERVISE: &str = include_str!("supervise.sh");

/// How long `initdb` and the server's start may take together.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Between two attempts to connect while the server starts.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// How often a start is retried when another process took the chosen port first.
const PORT_ATTEMPTS: u32 = 3;

/// The prefix of a cluster's directory in the temporary directory; the process id and a
/// counter follow.
pub(crate) const DIRECTORY_PREFIX: &str = "runledger-pg-";

static SHARED: OnceCell<Result<Arc<Cluster>, String>> = OnceCell::const_new();

/// The process's cluster, started by the first caller and shared by all; it lives until the
/// process ends. A failure to start is remembered, so that later callers do not retry it.
pub(crate) async fn shared() -> Result<Arc<Cluster>, String> {
    SHARED
        .get_or_init(|| async { Cluster::start().await.map(Arc::new) })
        .await
        .clone()
}

/// A running cluster: its superuser is `postgres`, without a password, on 127.0.0.1.
#[derive(Debug)]
pub(crate) struct Cluster {
    binaries: Binaries,
    port: u16,
    /// The supervising script; its standard input is the pipe that keeps the cluster alive.
    supervisor: Child,
}

impl Cluster {
    /// Finds the binaries, creates the cluster and waits until it accepts connections.
    pub(crate) async fn start() -> Result<Self, String> {
        let binaries = Search::on_this_machine().find()?;
        let run_as = RunAs::for_this_process()?;
        let mut attempt = 1;
        loop {
            match Self::start_once(&binaries, &run_as).await {
                Err(StartError::PortTaken(_)) if attempt < PORT_ATTEMPTS => attempt += 1,
                Err(StartError::PortTaken(reason) | StartError::Failed(reason)) => {
                    return Err(format!("{binaries} did not start: {reason}"));
                }
                Ok(cluster) => return Ok(cluster),
            }
        }
    }

    async fn start_once(binaries: &Binaries, run_as: &RunAs) -> Result<Self, StartError> {
        let port = free_port().map_err(StartError::Failed)?;
        let dir = create_directory().map_err(StartError::Failed)?;
        if let Err(err) = run_as.take_ownership(&dir) {
            let _ = std::fs::remove_dir(&dir);
            return Err(StartError::Failed(err));
        }
        let script = format!(
            "set -- {} {} {port}\n{SUPERVISE}",
            shell_quote(&binaries.dir),
            shell_quote(&dir)
        );
        let spawned = run_as
            .shell(&script)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C in the terminal reaches this process, whose
            // exit then stops the cluster, and not the script in the middle of its work.
            .process_group(0)
            .spawn();
        let supervisor = match spawned {
            Ok(child) => child,
            Err(err) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(StartError::Failed(format!("could not run sh: {err}")));
            }
        };
        let mut cluster = Self {
            binaries: binaries.clone(),
            port,
            supervisor,
        };
        cluster.wait_until_ready().await?;
        Ok(cluster)
    }

    /// Polls until the server accepts a connection, the script ends, or the deadline passes.
    async fn wait_until_ready(&mut self) -> Result<(), StartError> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        let options = self.connect_options();
        loop {
            if let Ok(Some(_)) = self.supervisor.try_wait() {
                let output = self.stop_and_read_output();
                return Err(
                    if output.contains("could not bind") || output.contains("in use") {
                        StartError::PortTaken(output)
                    } else {
                        StartError::Failed(output)
                    },
                );
            }
            let attempt = PgConnection::connect_with(&options);
            if let Ok(Ok(connection)) = tokio::time::timeout(Duration::from_secs(1), attempt).await
            {
                let _ = connection.close().await;
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StartError::Failed(format!(
                    "it did not accept connections within {} s",
                    START_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Closes the pipe, waits for the script to clean up, and returns what it printed.
    fn stop_and_read_output(&mut self) -> String {
        drop(self.supervisor.stdin.take());
        let mut output = String::new();
        if let Some(mut stderr) = self.supervisor.stderr.take() {
            let _ = stderr.read_to_string(&mut output);
        }
        let _ = self.supervisor.wait();
        let output = output.split_whitespace().collect::<Vec<_>>().join(" ");
        if output.is_empty() {
            "the cluster's script ended without a word".to_owned()
        } else {
            output
        }
    }

    /// Options reaching the cluster's `postgres` database as the superuser.
    pub(crate) fn connect_options(&self) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .host("127.0.0.1")
            .port(self.port)
            .username("postgres")
            .database("postgres")
    }

    /// The URL of [`connect_options`](Self::connect_options).
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "throwaway cluster of {} on 127.0.0.1:{}",
            self.binaries, self.port
        )
    }
}

impl Drop for Cluster {
    /// Stops the server and removes its directory before returning.
    fn drop(&mut self) {
        let _ = self.stop_and_read_output();
    }
}

enum StartError {
    /// The server could not listen on the port chosen (another process took it meanwhile).
    PortTaken(String),
    Failed(String),
}

/// A port of 127.0.0.1 that nothing listens on right now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|err| format!("no free port on 127.0.0.1: {err}"))
}

/// A new, empty directory `runledger-pg-<pid>-<n>` in the temporary directory.
fn create_directory() -> Result<PathBuf, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let parent = std::env::temp_dir();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("{DIRECTORY_PREFIX}{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            // Left by an earlier process that had the same id.
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(format!("could not create {}: {err}", dir.display())),
        }
    }
}

/// `path` as one word of a shell script.
fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_quoted_as_one_shell_word() {
        assert_eq!(shell_quote(Path::new("/tmp/a b")), "'/tmp/a b'");
        assert_eq!(shell_quote(Path::new("/tmp/it's")), r"'/tmp/it'\''s'");
    }
}
