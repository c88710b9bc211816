//! Connection-error check on a private cluster: the startup check's one-line message for a
//! wrong password, a server that accepts only TLS, and a server without TLS when TLS is
//! required. (Refused, timed-out, missing-database and unknown-role cases need no private
//! server; they are tests of the `runledger` crate.)
//!
//! ```sh
//! cargo run -p runledger-bench --bin connection-check
//! ```
//!
//! It creates the cluster `runledger_conncheck` on port 5498 (`--port` to change) with Debian's
//! `pg_createcluster`, so it needs the PostgreSQL server packages and the rights to create a
//! cluster (root, or the postgres user); the cluster is dropped at the end.

#![allow(clippy::print_stdout)]

use std::time::Duration;

use runledger_bench::{BoxError, PrivateCluster};
use runledger_engine::postgres::{ConnectionError, check_connection};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};

const PASSWORD: &str = "right-horse-battery";

/// Runs the startup check with `options`.
async fn check(options: PgConnectOptions) -> Result<(), ConnectionError> {
    let pool = PgPoolOptions::new().connect_lazy_with(options);
    check_connection(&pool, Duration::from_secs(5)).await
}

/// Expects the check to fail with `code`, the message to contain `needle` and never the password.
async fn expect_failure(
    case: &str,
    options: PgConnectOptions,
    code: &str,
    needle: &str,
) -> Result<(), BoxError> {
    let err = match check(options).await {
        Ok(()) => return Err(format!("{case}: the connection succeeded").into()),
        Err(err) => err,
    };
    println!("{case}:\n  {}: {err}", err.code());
    let message = err.to_string();
    if err.code() != code || !message.contains(needle) || message.contains(PASSWORD) {
        return Err(format!("{case}: expected {code} mentioning `{needle}`").into());
    }
    Ok(())
}

async fn expect_success(case: &str, options: PgConnectOptions) -> Result<(), BoxError> {
    check(options)
        .await
        .map_err(|err| format!("{case}: {err}"))?;
    println!("{case}: connected");
    Ok(())
}

/// Checks the startup messages for connection errors on a private cluster.
#[derive(clap::Parser)]
struct Options {
    /// Port of the private cluster.
    #[arg(long, default_value_t = 5498)]
    port: u16,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Options { port } = clap::Parser::parse();
    let cluster = PrivateCluster::create("runledger_conncheck", port, "scram-sha-256")?;
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&cluster.socket_url("postgres"))
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE app LOGIN PASSWORD '{PASSWORD}'"
    )))
    .execute(&admin)
    .await?;
    admin.close().await;

    let app = |password: &str| {
        PgConnectOptions::new()
            .host("127.0.0.1")
            .port(cluster.port())
            .username("app")
            .password(password)
            .database("postgres")
    };

    // Password authentication over plain TCP.
    cluster.set_hba(&["host all all 127.0.0.1/32 scram-sha-256"])?;
    expect_success("right password", app(PASSWORD)).await?;
    expect_failure(
        "wrong password",
        app("wrong-password"),
        "connection.authentication_failed",
        "authentication failed",
    )
    .await?;

    // Only TLS connections are accepted.
    cluster.set_hba(&["hostssl all all 127.0.0.1/32 scram-sha-256"])?;
    expect_failure(
        "TLS-only server, sslmode=disable",
        app(PASSWORD).ssl_mode(PgSslMode::Disable),
        "connection.tls_required",
        "sslmode=require",
    )
    .await?;
    expect_success(
        "TLS-only server, sslmode=require",
        app(PASSWORD).ssl_mode(PgSslMode::Require),
    )
    .await?;

    // The server has TLS switched off.
    cluster.set_hba(&["host all all 127.0.0.1/32 scram-sha-256"])?;
    cluster.set_settings(&["ssl = off"])?;
    expect_failure(
        "server without TLS, sslmode=require",
        app(PASSWORD).ssl_mode(PgSslMode::Require),
        "connection.tls_failed",
        "TLS could not be set up",
    )
    .await?;

    drop(cluster);
    println!("connection-check: PASS");
    Ok(())
}
