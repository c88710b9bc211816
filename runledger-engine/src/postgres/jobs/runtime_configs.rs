//! Per-job-type runtime configuration: a JSON object per job type that operators can change
//! without a deploy (stored in `runledger.job_runtime_configs`, keyed by the job type).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

use crate::core::jobs::JobType;
use crate::postgres::error::{Error, Result};
use crate::postgres::input::check_json_field;

/// The stored runtime configuration of one job type.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct JobRuntimeConfig {
    /// The job type.
    pub job_type: String,
    /// The settings (a JSON object).
    pub config: Value,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// Reads the runtime configuration of `job_type`, if one was stored.
pub async fn get_job_runtime_config<'e>(
    executor: impl PgExecutor<'e>,
    job_type: &str,
) -> Result<Option<JobRuntimeConfig>> {
    let row = sqlx::query_as!(
        JobRuntimeConfig,
        r#"
        SELECT config_key AS job_type, config, updated_at
        FROM runledger.job_runtime_configs
        WHERE config_key = $1
        "#,
        job_type,
    )
    .fetch_optional(executor)
    .await?;
    Ok(row)
}

/// Stores (inserting or replacing) the runtime configuration of `job_type` and returns it.
///
/// Fails with `job.invalid_job_type` for a blank or over-long type and
/// `job.invalid_runtime_config` when `config` is not a JSON object.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger_engine::postgres::Error> {
/// use runledger_engine::postgres::jobs::upsert_job_runtime_config;
///
/// let stored = upsert_job_runtime_config(&pool, "emails.send", &serde_json::json!({"batch": 50})).await?;
/// assert_eq!(stored.config["batch"], 50);
/// # Ok(()) }
/// ```
pub async fn upsert_job_runtime_config<'e>(
    executor: impl PgExecutor<'e>,
    job_type: &str,
    config: &Value,
) -> Result<JobRuntimeConfig> {
    JobType::try_new(job_type)?;
    if !config.is_object() {
        return Err(Error::InvalidInput {
            code: "job.invalid_runtime_config",
            message: "a runtime configuration must be a JSON object".to_owned(),
        });
    }
    check_json_field(config, "job.invalid_runtime_config", "the configuration")?;
    let row = sqlx::query_as!(
        JobRuntimeConfig,
        r#"
        INSERT INTO runledger.job_runtime_configs (config_key, config)
        VALUES ($1, $2)
        ON CONFLICT (config_key) DO UPDATE SET config = EXCLUDED.config, updated_at = now()
        RETURNING config_key AS job_type, config, updated_at
        "#,
        job_type,
        config,
    )
    .fetch_one(executor)
    .await?;
    Ok(row)
}

/// Lists every stored runtime configuration, by job type.
pub async fn list_job_runtime_configs<'e>(
    executor: impl PgExecutor<'e>,
) -> Result<Vec<JobRuntimeConfig>> {
    let rows = sqlx::query_as!(
        JobRuntimeConfig,
        r#"
        SELECT config_key AS job_type, config, updated_at
        FROM runledger.job_runtime_configs
        ORDER BY config_key
        "#,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
