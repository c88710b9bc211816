//! Reaching the database: the startup check's one-line errors, and TLS.

use std::time::Duration;

use runledger::prelude::*;
use runledger::sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use sqlx::PgPool;

use crate::support::{WAIT, eventually, start_worker};

#[job(name = "it.connection.echo")]
async fn echo(text: String) -> Result<String, JobError> {
    Ok(text)
}

/// A worker whose pool connects lazily with `options`, checked at start within `timeout`.
fn worker(options: PgConnectOptions, timeout: Duration) -> Worker {
    let pool = PgPoolOptions::new().connect_lazy_with(options);
    Worker::builder(&pool)
        .connect_timeout(timeout)
        .build()
        .unwrap()
}

/// Starts a worker that must fail its startup check; returns the error's code and message.
async fn startup_error(options: PgConnectOptions) -> (String, String) {
    let err = worker(options, Duration::from_secs(5))
        .start()
        .await
        .expect_err("the startup check must fail");
    let source = std::error::Error::source(&err).map(ToString::to_string);
    eprintln!("{}: {err} (source: {source:?})", err.code());
    (err.code().to_owned(), err.to_string())
}

/// The options of the test's own database, as `sqlx::test` made them.
fn options_of(pool: &PgPool) -> PgConnectOptions {
    pool.connect_options().as_ref().clone()
}

#[tokio::test]
async fn a_closed_port_fails_at_once_naming_the_server_and_never_the_password() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("postgres://app:s3cret-pw@127.0.0.1:{port}/orders");
    let (code, message) = startup_error(url.parse().unwrap()).await;
    assert_eq!(code, "connection.refused");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("database `orders`"), "{message}");
    assert!(message.contains("user `app`"), "{message}");
    assert!(message.contains("connection refused"), "{message}");
    assert!(message.contains("DATABASE_URL"), "{message}");
    assert!(!message.contains("s3cret-pw"), "{message}");
    assert!(!message.contains('\n'), "one line: {message}");
}

#[tokio::test]
async fn a_server_that_never_answers_fails_after_the_connect_timeout() {
    // Accepts the TCP connection and then says nothing, like a wrong host behind a firewall.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let options: PgConnectOptions = format!("postgres://app@127.0.0.1:{port}/orders")
        .parse()
        .unwrap();
    let err = worker(options, Duration::from_millis(300))
        .prepare()
        .await
        .expect_err("nothing answers");
    assert_eq!(err.code(), "connection.timed_out");
    let message = err.to_string();
    assert!(message.contains("no answer (within 300 ms)"), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    silent.abort();
}

#[sqlx::test]
async fn a_missing_database_is_a_connection_error_that_names_it(pool: PgPool) {
    let options = options_of(&pool).database("runledger_no_such_database");
    let (code, message) = startup_error(options.clone()).await;
    assert_eq!(code, "connection.database_missing");
    assert!(
        message.contains("database `runledger_no_such_database`"),
        "{message}"
    );
    assert!(message.contains("does not exist"), "{message}");

    // The engine's own calls classify it as a connection problem too.
    let lazy = PgPoolOptions::new()
        .acquire_timeout(WAIT)
        .connect_lazy_with(options);
    let err = runledger::engine::postgres::migrate(&lazy)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "schema.database_unavailable");
}

#[sqlx::test]
async fn an_unknown_role_is_an_authentication_failure(pool: PgPool) {
    let options = options_of(&pool).username("runledger_no_such_role");
    let (code, message) = startup_error(options).await;
    assert_eq!(code, "connection.authentication_failed");
    assert!(
        message.contains("user `runledger_no_such_role`"),
        "{message}"
    );
    assert!(message.contains("user name and password"), "{message}");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_worker_connects_with_sslmode_require_and_runs_a_job(pool: PgPool) {
    let options = options_of(&pool).ssl_mode(PgSslMode::Require);
    pool.close().await;
    let tls_pool = PgPoolOptions::new()
        .max_connections(10)
        .connect_with(options)
        .await
        .unwrap();
    let encrypted: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&tls_pool)
            .await
            .unwrap();
    assert!(encrypted, "the session must be encrypted");

    let running = start_worker(&tls_pool).await;
    let job = Echo {
        text: "over TLS".into(),
    }
    .enqueue(&tls_pool)
    .await
    .unwrap();
    let output = eventually("the job's output", || async {
        job.output(&tls_pool).await.unwrap()
    })
    .await;
    assert_eq!(output, "over TLS");
    let plaintext_sessions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
         WHERE a.datname = current_database() AND NOT s.ssl",
    )
    .fetch_one(&tls_pool)
    .await
    .unwrap();
    assert_eq!(
        plaintext_sessions, 0,
        "every session of the worker is encrypted"
    );
    running.shutdown().await.unwrap();
}
