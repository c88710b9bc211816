//! A private PostgreSQL cluster for checks that restart the server or change its
//! authentication: created with Debian's `pg_createcluster` on its own port, dropped on `Drop`.
//! The shared server is never touched.

use std::path::PathBuf;
use std::process::Command;

use crate::BoxError;

/// A running cluster of the newest installed PostgreSQL version, owned by this process.
#[derive(Debug)]
pub struct PrivateCluster {
    version: String,
    name: String,
    port: u16,
}

impl PrivateCluster {
    /// Creates and starts cluster `name` on `port` (dropping a leftover of an earlier run).
    /// Local socket connections use trust; TCP connections from 127.0.0.1 use `host_auth`
    /// (`trust`, `scram-sha-256`, ...).
    pub fn create(name: &str, port: u16, host_auth: &str) -> Result<Self, BoxError> {
        let version = newest_version()?;
        drop_cluster(&version, name);
        run(Command::new("pg_createcluster").args([
            &version,
            name,
            "--port",
            &port.to_string(),
            "--",
            "--auth-local=trust",
            &format!("--auth-host={host_auth}"),
        ]))?;
        let cluster = Self {
            version,
            name: name.to_owned(),
            port,
        };
        cluster.ctl("start")?;
        Ok(cluster)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL that reaches it through its Unix socket as the superuser (trust auth).
    pub fn socket_url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@localhost:{}/{database}?host=/var/run/postgresql",
            self.port
        )
    }

    /// Replaces `pg_hba.conf` with `lines` (the local trust line is kept first) and reloads.
    pub fn set_hba(&self, lines: &[&str]) -> Result<(), BoxError> {
        let mut text = String::from("local all all trust\n");
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(self.config_dir().join("pg_hba.conf"), text)?;
        self.ctl("reload")
    }

    /// Replaces this cluster's extra settings (`postgresql.conf` lines in its `conf.d/`) with
    /// `lines` and reloads.
    pub fn set_settings(&self, lines: &[&str]) -> Result<(), BoxError> {
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(self.config_dir().join("conf.d/private-cluster.conf"), text)?;
        self.ctl("reload")
    }

    /// Runs `pg_ctlcluster <action>` (`start`, `stop`, `restart`, `reload`, with extra
    /// arguments such as `-m immediate`).
    pub fn ctl(&self, action: &str) -> Result<(), BoxError> {
        let mut args = vec!["--skip-systemctl-redirect", &self.version, &self.name];
        args.extend(action.split_whitespace());
        run(Command::new("pg_ctlcluster").args(args))
    }

    fn config_dir(&self) -> PathBuf {
        PathBuf::from(format!("/etc/postgresql/{}/{}", self.version, self.name))
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        drop_cluster(&self.version, &self.name);
    }
}

/// Stops and removes a cluster with everything it leaves behind: `pg_dropcluster` keeps a
/// configuration directory that still holds files it did not create (our `conf.d` settings),
/// and `pg_createcluster` would reuse them.
fn drop_cluster(version: &str, name: &str) {
    let _ = Command::new("pg_dropcluster")
        .args(["--stop", version, name])
        .output();
    let _ = std::fs::remove_dir_all(format!("/etc/postgresql/{version}/{name}"));
}

fn newest_version() -> Result<String, BoxError> {
    let mut versions: Vec<String> = std::fs::read_dir("/etc/postgresql")
        .map_err(|err| format!("no PostgreSQL clusters under /etc/postgresql: {err}"))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    versions.sort_by_key(|v| v.parse::<u32>().unwrap_or(0));
    versions
        .pop()
        .ok_or_else(|| "no PostgreSQL version under /etc/postgresql".into())
}

fn run(command: &mut Command) -> Result<(), BoxError> {
    let output = command.output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into())
    }
}
