//! `TestServer`: the throwaway cluster made from the PostgreSQL binaries on the machine, and
//! that nothing of it outlives the process that started it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use runledger::testing::{TestDatabase, TestServer};
use sqlx::{Connection, PgConnection};

/// Set in the environment of the helper process of
/// `a_throwaway_cluster_does_not_outlive_a_process_that_exits_abruptly`.
const HELPER: &str = "RUNLEDGER_TEST_CLUSTER_HELPER";

/// A throwaway cluster of its own, or why this machine cannot make one (no PostgreSQL 14+
/// server binaries), for the test to print and stop.
async fn start_cluster() -> Result<TestServer, String> {
    match TestServer::start_cluster().await {
        Ok(server) => Ok(server),
        Err(err) if err.to_string().contains("server binaries") => Err(err.to_string()),
        Err(err) => panic!("the cluster did not start: {err}"),
    }
}

fn openssl_is_installed() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Where the cluster lives: its directory (the parent of the data directory) and the
/// postmaster's process id.
async fn whereabouts(server: &TestServer) -> (PathBuf, u32) {
    let mut connection = PgConnection::connect_with(&server.connect_options())
        .await
        .unwrap();
    let data: String = sqlx::query_scalar("SELECT current_setting('data_directory')")
        .fetch_one(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();
    let data = PathBuf::from(data);
    let pid = std::fs::read_to_string(data.join("postmaster.pid")).unwrap();
    let pid = pid.lines().next().unwrap().trim().parse().unwrap();
    (data.parent().unwrap().to_path_buf(), pid)
}

/// What is left of a cluster: its directory, a process of it, a server on its port.
async fn remains(dir: &Path, pid: u32, url: &str) -> Vec<String> {
    let mut remains = Vec::new();
    if dir.exists() {
        remains.push(format!("the directory {}", dir.display()));
    }
    if Path::new(&format!("/proc/{pid}")).exists() {
        remains.push(format!("the postmaster, process {pid}"));
    }
    remains.extend(processes_inside(dir));
    if PgConnection::connect(url).await.is_ok() {
        remains.push(format!("a server at {url}"));
    }
    remains
}

/// Processes whose working directory is inside `dir` (the script, the server and its
/// backends all work there); Linux only.
fn processes_inside(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|entry| {
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            cwd.starts_with(dir).then(|| {
                format!(
                    "process {} working in {}",
                    entry.file_name().to_string_lossy(),
                    cwd.display()
                )
            })
        })
        .collect()
}

/// Polls until nothing of the cluster remains, or says what does after 30 s.
async fn wait_until_gone(dir: &Path, pid: u32, url: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = remains(dir, pid, url).await;
        if left.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "left behind: {}",
            left.join(", ")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_throwaway_cluster_takes_a_test_database_and_is_removed_when_dropped() {
    let server = match start_cluster().await {
        Ok(server) => server,
        Err(reason) => {
            eprintln!("NOT RUN: {reason}");
            return;
        }
    };
    let described = server.to_string();
    assert!(
        described.starts_with("throwaway cluster of PostgreSQL ")
            && described.contains(" on 127.0.0.1:"),
        "{described}"
    );
    assert!(server.url().starts_with("postgres://postgres@127.0.0.1:"));
    let (dir, pid) = whereabouts(&server).await;
    assert!(dir.exists());

    let db = TestDatabase::on(&server).await.unwrap();
    let (version, fsync): (i32, String) = sqlx::query_as(
        "SELECT current_setting('server_version_num')::int, current_setting('fsync')",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert!(version >= 140_000, "PostgreSQL 14 or newer: {version}");
    assert_eq!(fsync, "off");
    if openssl_is_installed() {
        let ssl: String = sqlx::query_scalar("SELECT current_setting('ssl')")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(
            ssl, "on",
            "TLS on a self-signed certificate, as a packaged server"
        );
    }
    let migrated: bool =
        sqlx::query_scalar("SELECT to_regclass('runledger.job_queue') IS NOT NULL")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert!(migrated, "the test database has Runledger's schema");
    db.close().await.unwrap();

    let url = server.url().to_owned();
    drop(server);
    assert_eq!(
        remains(&dir, pid, &url).await,
        Vec::<String>::new(),
        "dropping the last value stops the cluster before it returns"
    );
}

/// Run by the test below in a process of its own: starts a cluster, says where it is, and
/// exits without running a destructor.
#[tokio::test]
#[ignore = "the helper process of a_throwaway_cluster_does_not_outlive_a_process_that_exits_abruptly"]
async fn helper_starts_a_cluster_and_exits_abruptly() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    match start_cluster().await {
        Ok(server) => {
            let (dir, pid) = whereabouts(&server).await;
            eprintln!("CLUSTER {pid} {} {}", server.url(), dir.display());
            std::process::exit(0);
        }
        Err(reason) => {
            eprintln!("NO CLUSTER {reason}");
            std::process::exit(0);
        }
    }
}

#[tokio::test]
async fn a_throwaway_cluster_does_not_outlive_a_process_that_exits_abruptly() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "test_server::helper_starts_a_cluster_and_exits_abruptly",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER, "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the helper failed: {said}");
    if let Some(reason) = said
        .lines()
        .find_map(|line| line.strip_prefix("NO CLUSTER "))
    {
        eprintln!("NOT RUN: {reason}");
        return;
    }
    let cluster = said
        .lines()
        .find_map(|line| line.strip_prefix("CLUSTER "))
        .unwrap_or_else(|| panic!("the helper did not start a cluster: {said}"));
    let mut fields = cluster.splitn(3, ' ');
    let pid: u32 = fields.next().unwrap().parse().unwrap();
    let url = fields.next().unwrap();
    let dir = PathBuf::from(fields.next().unwrap());

    wait_until_gone(&dir, pid, url).await;
}
