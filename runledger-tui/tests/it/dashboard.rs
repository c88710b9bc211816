//! The dashboard on a pseudo-terminal: every screen of a seeded database, an unreachable
//! database, the startup schema check, bad flags, signals and hang-ups.

use std::process::Command;

use rustix::process::Signal;
use sqlx::PgPool;

use crate::terminal::Terminal;
use crate::{BINARY, database_url, seed};

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn binary_shows_every_screen_of_a_seeded_database_and_restores_the_terminal(pool: PgPool) {
    seed(&pool).await;
    let url = database_url(&pool);
    let mut tui = Terminal::start(BINARY, &["--database-url", &url, "--refresh-ms", "500"]);
    tui.wait_for("Dashboard")
        .wait_for("emails.send")
        .wait_for("live in")
        .wait_for("succeeded/min")
        .keys("2")
        .wait_for("2 matching")
        .wait_for("profiles.crawl")
        .keys("/")
        .keys("\r")
        .keys("f")
        .wait_for("status: PENDING")
        .keys("t")
        .keys("emails")
        .keys("\r")
        .wait_for("type ~ emails")
        .wait_for(" 1 matching ")
        .keys("\r")
        .wait_for("Attempts+Events")
        .keys("]")
        .keys("]")
        .wait_for("smoke log line")
        .keys("]")
        .wait_for("\"to\": \"ada@example.com\"")
        .keys("h")
        .wait_for("NEXT/FINISHED")
        .keys("3")
        .wait_for("profiles.research")
        .wait_for("0/0/2")
        .keys("\r")
        .wait_for("Workflow run")
        .wait_for("crawl")
        .wait_for("BLOCKED")
        .keys("4")
        .wait_for("{\"batch\":25}")
        .keys("?")
        .wait_for("Keys (any key closes)")
        .keys("x")
        .wait_for("RUNTIME CONFIG");
    let status = tui.quit();
    assert!(status.success(), "{status}");
    assert!(tui.restored(), "the terminal was not restored");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn binary_keeps_drawing_and_reports_reconnecting_when_the_database_is_unreachable(
    _pool: PgPool,
) {
    let mut tui = Terminal::start(BINARY, &UNREACHABLE);
    tui.wait_for("reconnecting, try")
        .wait_for("cannot load")
        .keys("2")
        .wait_for("Queue");
    let status = tui.quit();
    assert!(status.success(), "{status}");
    assert!(tui.restored());
}

#[sqlx::test(migrations = false)]
async fn binary_refuses_a_database_without_the_schema(pool: PgPool) {
    let output = Command::new(BINARY)
        .args(["--database-url", &database_url(&pool)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("schema check failed (schema.missing_history)"),
        "{stderr}"
    );
}

#[test]
fn binary_refuses_bad_flags_with_usage() {
    let output = Command::new(BINARY)
        .args(["--limit", "0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid value '0' for '--limit <N>': 0 is not in 1..=1000")
            && stderr.contains("try '--help'"),
        "{stderr}"
    );
}

/// The dashboard against an unreachable database: no seeding needed to reach a drawn screen.
const UNREACHABLE: [&str; 3] = [
    "--database-url",
    "postgres://postgres@127.0.0.1:1/nowhere",
    "--skip-schema-check",
];

#[test]
fn binary_exits_when_its_terminal_hangs_up() {
    for _ in 0..3 {
        let mut tui = Terminal::start(BINARY, &UNREACHABLE);
        tui.wait_for("reconnecting, try");
        let status = tui.hang_up();
        assert!(status.success(), "{status}");
    }
}

#[test]
fn binary_quits_cleanly_on_sigterm_and_sighup() {
    for signal in [Signal::TERM, Signal::HUP] {
        let mut tui = Terminal::start(BINARY, &UNREACHABLE);
        tui.wait_for("reconnecting, try");
        let status = tui.signal(signal);
        assert!(status.success(), "{signal:?}: {status}");
        assert!(tui.restored(), "{signal:?}: the terminal was not restored");
    }
}
