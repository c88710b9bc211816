//! CPU time spent by the benchmark's processes and by the PostgreSQL server (when it runs on
//! this machine): the cost of a measure in CPU seconds, which a busy machine distorts far less
//! than wall-clock time.

use std::path::PathBuf;
use std::time::Duration;

use sqlx::PgPool;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// Reads CPU time of this process (with its waited-for children) and of the server.
#[derive(Debug, Clone)]
pub struct CpuMeter {
    postmaster: Option<u32>,
}

/// CPU time used so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSample {
    /// This process and its finished children (worker processes of a scale-out measure).
    pub client: Duration,
    /// The server's processes, when the server runs on this machine.
    pub server: Option<Duration>,
}

impl CpuSample {
    /// Client plus server time spent between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuSample) -> CpuSpent {
        CpuSpent {
            client: self.client.saturating_sub(earlier.client),
            server: self
                .server
                .zip(earlier.server)
                .map(|(now, then)| now.saturating_sub(then)),
        }
    }
}

/// CPU time spent by one measure.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSpent {
    /// By the benchmark's processes.
    pub client: Duration,
    /// By the server, when known.
    pub server: Option<Duration>,
}

impl CpuSpent {
    /// Jobs per CPU second, client and server together (client alone when the server's time
    /// is unknown).
    pub fn jobs_per_cpu_second(&self, jobs: usize) -> f64 {
        let total = self.client + self.server.unwrap_or_default();
        jobs as f64 / total.as_secs_f64().max(f64::EPSILON)
    }

    /// "1.23 s client + 4.56 s server".
    pub fn describe(&self) -> String {
        match self.server {
            Some(server) => format!(
                "{:.2} s client + {:.2} s server",
                self.client.as_secs_f64(),
                server.as_secs_f64()
            ),
            None => format!("{:.2} s client", self.client.as_secs_f64()),
        }
    }
}

impl CpuMeter {
    /// A meter for this process and the server behind `pool`, whose processes are found
    /// through its data directory's `postmaster.pid` (readable when the server runs here and
    /// the role may read `data_directory`).
    pub async fn new(pool: &PgPool) -> Self {
        let directory: Option<String> =
            sqlx::query_scalar("SELECT current_setting('data_directory')")
                .fetch_one(pool)
                .await
                .ok();
        let postmaster = directory.and_then(|directory| {
            let pid_file = PathBuf::from(directory).join("postmaster.pid");
            std::fs::read_to_string(pid_file)
                .ok()?
                .lines()
                .next()?
                .trim()
                .parse()
                .ok()
        });
        Self { postmaster }
    }

    /// CPU time used so far.
    pub fn sample(&self) -> CpuSample {
        CpuSample {
            client: stat_times("/proc/self/stat", true).unwrap_or_default(),
            server: self.postmaster.and_then(server_time),
        }
    }
}

/// The postmaster's own time and its reaped children's, plus every live child's.
fn server_time(postmaster: u32) -> Option<Duration> {
    let mut total = stat_times(&format!("/proc/{postmaster}/stat"), true)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let path = format!("/proc/{pid}/stat");
        if parent_of(&path) == Some(postmaster) {
            total += stat_times(&path, false).unwrap_or_default();
        }
    }
    Some(total)
}

/// The fields after the command name of a `/proc/<pid>/stat` line (the name may hold spaces).
fn stat_fields(path: &str) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(path).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(
        rest.split_whitespace()
            .skip(1) // the state letter
            .map(|field| field.parse().unwrap_or(0))
            .collect(),
    )
}

fn parent_of(path: &str) -> Option<u32> {
    u32::try_from(*stat_fields(path)?.first()?).ok()
}

/// utime + stime (and the waited-for children's cutime + cstime when asked).
fn stat_times(path: &str, with_children: bool) -> Option<Duration> {
    // After the state letter: ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime stime cutime cstime.
    let fields = stat_fields(path)?;
    let own = fields.get(10)? + fields.get(11)?;
    let children = if with_children {
        fields.get(12)? + fields.get(13)?
    } else {
        0
    };
    Some(Duration::from_millis(
        (own + children) * 1_000 / TICKS_PER_SECOND,
    ))
}

/// This process's peak resident set (`VmHWM`), in bytes.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
