//! Helpers shared by the benchmark and check binaries (`runledger-bench`, `admin-reads`,
//! `crash-soak`, `pg-chaos`, `connection-check`).

#![forbid(unsafe_code)]

use std::time::Duration;

use sqlx::PgPool;

mod cluster;
pub mod cpu;
pub mod successes;

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

/// The `qs` quantiles of `samples` (nearest rank: the sample at `(n - 1) * q`, rounded), zero
/// where there is no sample.
///
/// ```
/// use std::time::Duration;
///
/// let samples = [3, 1, 2].map(Duration::from_millis).to_vec();
/// let [median, max] = runledger_bench::quantiles(samples, [0.5, 1.0]);
/// assert_eq!((median, max), (Duration::from_millis(2), Duration::from_millis(3)));
/// ```
pub fn quantiles<const N: usize>(mut samples: Vec<Duration>, qs: [f64; N]) -> [Duration; N] {
    samples.sort();
    qs.map(|q| {
        let rank = ((samples.len() as f64 - 1.0) * q).round().max(0.0) as usize;
        samples.get(rank).copied().unwrap_or_default()
    })
}
