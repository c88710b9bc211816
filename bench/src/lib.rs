//! Helpers shared by the benchmark and check binaries (`runledger-bench`, `admin-reads`,
//! `crash-soak`, `pg-chaos`, `connection-check`).

use sqlx::PgPool;

mod cluster;
pub mod cpu;

pub use cluster::PrivateCluster;

/// The error type of the benchmark binaries.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The `DATABASE_URL` to measure against, or the local trust-auth server.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Drops (forcing other sessions out) and recreates database `name` on the server of `url`,
/// and returns the URL of the new database.
pub async fn fresh_database(url: &str, name: &str) -> Result<String, BoxError> {
    let admin = PgPool::connect(url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&admin)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await?;
    admin.close().await;
    let base = url.split('?').next().unwrap_or(url);
    let (server, _) = base
        .rsplit_once('/')
        .ok_or("DATABASE_URL has no database name")?;
    Ok(format!("{server}/{name}"))
}
