//! The bundled migrations and the two startup modes: apply them, or validate an existing schema.
//!
//! The migrations bring a database to the definitions kept in `runledger-engine/sql/`, where
//! each table, function, trigger and view has its current text and its contract; a test builds
//! a database from each and compares their schemas.

use std::collections::BTreeMap;

use sqlx::PgPool;
use sqlx::migrate::{MigrateError, Migrator};

use super::error::QueryError;

/// The bundled migrations. History is kept in `runledger._sqlx_migrations`, inside Runledger's
/// own schema, so it never mixes with the host application's migrations.
///
/// Usable with `#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]`.
pub static MIGRATOR: Migrator = sqlx::migrate!();

/// Why the schema could not be applied or is not compatible with this version.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaCompatibilityError {
    /// The database has no Runledger migration history: it was never migrated.
    #[error("the database has no Runledger migration history; run migrate() first")]
    MissingHistory,
    /// An applied migration differs from the bundled one with the same version, or failed
    /// part-way.
    #[error("migration {version} in the database is incompatible with this version: {reason}")]
    IncompatibleHistory {
        /// The migration version.
        version: i64,
        /// What differs.
        reason: &'static str,
    },
    /// The database has applied a migration this version does not know (it was migrated by a
    /// newer Runledger).
    #[error("migration {version} in the database is unknown to this version of Runledger")]
    UnknownMigration {
        /// The unknown version.
        version: i64,
    },
    /// Bundled migrations that the database has not applied yet.
    #[error("the database is missing {} Runledger migration(s); run migrate()", versions.len())]
    PendingMigrations {
        /// The versions not yet applied.
        versions: Vec<i64>,
    },
    /// Applying a migration failed.
    #[error("applying the Runledger migrations failed")]
    MigrationFailed {
        /// The migrator's diagnostic, for logs.
        detail: String,
    },
    /// The database could not be reached or the validation query failed.
    #[error(transparent)]
    Database(#[from] QueryError),
}

impl SchemaCompatibilityError {
    /// Stable error code, e.g. `schema.missing_history`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingHistory => "schema.missing_history",
            Self::IncompatibleHistory { .. } => "schema.incompatible_history",
            Self::UnknownMigration { .. } => "schema.unknown_migration",
            Self::PendingMigrations { .. } => "schema.pending_migrations",
            Self::MigrationFailed { .. } => "schema.migration_failed",
            Self::Database(err) if err.is_connection_error() => "schema.database_unavailable",
            Self::Database(_) => "schema.query_failed",
        }
    }

    /// Full diagnostic for server-side logs.
    pub fn internal_message(&self) -> String {
        match self {
            Self::Database(err) => err.internal_message(),
            Self::MigrationFailed { detail } => detail.clone(),
            other => other.to_string(),
        }
    }
}

impl From<sqlx::Error> for SchemaCompatibilityError {
    fn from(source: sqlx::Error) -> Self {
        Self::Database(QueryError::from(source))
    }
}

impl From<MigrateError> for SchemaCompatibilityError {
    fn from(err: MigrateError) -> Self {
        match err {
            MigrateError::Execute(source) => Self::Database(QueryError::from(source)),
            MigrateError::VersionMismatch(version) => Self::IncompatibleHistory {
                version,
                reason: "checksum differs from the bundled migration",
            },
            MigrateError::Dirty(version) => Self::IncompatibleHistory {
                version,
                reason: "the migration failed part-way",
            },
            MigrateError::VersionMissing(version) => Self::UnknownMigration { version },
            other => Self::MigrationFailed {
                detail: other.to_string(),
            },
        }
    }
}

/// Applies the bundled migrations (creating schema `runledger` if needed). Safe to call from
/// many processes at once: the migrator serializes them with an advisory lock.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// runledger_engine::postgres::migrate(&pool).await?;
/// # Ok(()) }
/// ```
pub async fn migrate(pool: &PgPool) -> Result<(), SchemaCompatibilityError> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// Checks, without writing anything, that the database's migration history matches the
/// bundled migrations exactly. Use it when migrations are applied by other tooling.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) {
/// match runledger_engine::postgres::ensure_schema_compatible(&pool).await {
///     Ok(()) => {}
///     Err(err) => eprintln!("schema check failed ({}): {err}", err.code()),
/// }
/// # }
/// ```
pub async fn ensure_schema_compatible(pool: &PgPool) -> Result<(), SchemaCompatibilityError> {
    let history_exists: bool =
        sqlx::query_scalar("SELECT to_regclass('runledger._sqlx_migrations') IS NOT NULL")
            .fetch_one(pool)
            .await?;
    if !history_exists {
        return Err(SchemaCompatibilityError::MissingHistory);
    }
    let applied: Vec<(i64, Vec<u8>, bool)> = sqlx::query_as(
        "SELECT version, checksum, success FROM runledger._sqlx_migrations ORDER BY version",
    )
    .fetch_all(pool)
    .await?;
    if applied.is_empty() {
        return Err(SchemaCompatibilityError::MissingHistory);
    }
    check_history(&applied)
}

fn check_history(applied: &[(i64, Vec<u8>, bool)]) -> Result<(), SchemaCompatibilityError> {
    let bundled: BTreeMap<i64, &[u8]> = MIGRATOR
        .iter()
        .filter(|migration| !migration.migration_type.is_down_migration())
        .map(|migration| (migration.version, migration.checksum.as_ref()))
        .collect();
    for (version, checksum, success) in applied {
        let Some(expected) = bundled.get(version) else {
            return Err(SchemaCompatibilityError::UnknownMigration { version: *version });
        };
        if !success {
            return Err(SchemaCompatibilityError::IncompatibleHistory {
                version: *version,
                reason: "the migration failed part-way",
            });
        }
        if checksum.as_slice() != *expected {
            return Err(SchemaCompatibilityError::IncompatibleHistory {
                version: *version,
                reason: "checksum differs from the bundled migration",
            });
        }
    }
    let pending: Vec<i64> = bundled
        .keys()
        .filter(|version| !applied.iter().any(|(applied, ..)| applied == *version))
        .copied()
        .collect();
    if pending.is_empty() {
        Ok(())
    } else {
        Err(SchemaCompatibilityError::PendingMigrations { versions: pending })
    }
}

/// Alias of [`migrate`] under the original name. Every keyed row carries its enqueue-request
/// snapshot from the baseline on (a CHECK constraint enforces it), so there is no legacy state
/// to cut over.
pub async fn migrate_after_idempotency_cutover(
    pool: &PgPool,
) -> Result<(), SchemaCompatibilityError> {
    migrate(pool).await
}

/// Alias of [`ensure_schema_compatible`] under the original name.
pub async fn ensure_schema_compatible_after_idempotency_cutover(
    pool: &PgPool,
) -> Result<(), SchemaCompatibilityError> {
    ensure_schema_compatible(pool).await
}
