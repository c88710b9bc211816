//! The workspace's own commands, run as `cargo xtask <command>` (an alias in
//! `.cargo/config.toml`).
//!
//! `cargo xtask test [ARGS]...` finds a PostgreSQL server as `runledger::testing::TestServer`
//! does (`DATABASE_URL`, a server on 127.0.0.1:5432, a throwaway cluster of the PostgreSQL
//! binaries installed on the machine, a container), says which, and runs
//! `cargo test --workspace [ARGS]...` with `DATABASE_URL` naming it, keeping a throwaway cluster
//! up until the tests end. It exits with the tests' status.
//!
//! `#[sqlx::test]` reads `DATABASE_URL` when each test starts, so the server must be known
//! before `cargo test` runs; this is what finds it.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::process::{Command, ExitCode};

use runledger::testing::TestServer;

const USAGE: &str = "usage: cargo xtask test [ARGS]...   (ARGS go to `cargo test --workspace`)";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    match args.next().as_deref().and_then(|command| command.to_str()) {
        Some("test") => test(args.collect()),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `cargo test --workspace ARGS` on the server found.
fn test(args: Vec<OsString>) -> ExitCode {
    let found = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| err.to_string())
        .and_then(|runtime| {
            runtime
                .block_on(TestServer::find())
                .map_err(|err| err.to_string())
        });
    let server = match found {
        Ok(server) => server,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("database: {server}");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["test", "--workspace"])
        .args(args)
        .env("DATABASE_URL", server.url());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(describes_this_package) {
            command.env_remove(name);
        }
    }
    let status = command.status();
    drop(server);
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => status
            .code()
            .and_then(|code| u8::try_from(code).ok())
            .map_or(ExitCode::FAILURE, ExitCode::from),
        Err(err) => {
            eprintln!("error: could not run cargo test: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `variable` is one of those `cargo run` sets about the package it runs (this one).
/// The tests' cargo must not inherit them: a build script that watches one (ring's watches
/// `CARGO_MANIFEST_DIR`) would see it change and rebuild everything above it, on every run.
fn describes_this_package(variable: &str) -> bool {
    const PREFIXES: [&str; 5] = [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
        "CARGO_PRIMARY_PACKAGE",
    ];
    PREFIXES.iter().any(|prefix| variable.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tests_cargo_keeps_the_users_settings_but_not_this_packages_description() {
        for variable in [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_NAME",
            "CARGO_CRATE_NAME",
        ] {
            assert!(describes_this_package(variable), "{variable}");
        }
        for variable in [
            "CARGO_TARGET_DIR",
            "CARGO_HOME",
            "CARGO_PROFILE_DEV_DEBUG",
            "DATABASE_URL",
        ] {
            assert!(!describes_this_package(variable), "{variable}");
        }
    }
}
