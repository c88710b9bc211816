//! Job definitions: upsert, reads, enable/disable and validation.

use runledger_engine::postgres::jobs::{
    DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_SECONDS, JobDefinitionUpsert, get_job_definition,
    list_job_definitions, set_job_definition_enabled, upsert_job_definition,
};
use sqlx::PgPool;

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn upsert_inserts_defaults_then_overwrites_every_field(pool: PgPool) {
    let created = upsert_job_definition(&pool, &JobDefinitionUpsert::new("emails.send"))
        .await
        .unwrap();
    assert_eq!(created.max_attempts, DEFAULT_MAX_ATTEMPTS);
    assert_eq!(created.timeout_seconds, DEFAULT_TIMEOUT_SECONDS);
    assert!(created.is_enabled);

    let updated = upsert_job_definition(
        &pool,
        &JobDefinitionUpsert::new("emails.send")
            .version(3)
            .max_attempts(9)
            .timeout_seconds(12)
            .priority(-4)
            .retry_delays_ms(250, 2_000)
            .enabled(false),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            updated.version,
            updated.max_attempts,
            updated.timeout_seconds,
            updated.priority
        ),
        (3, 9, 12, -4)
    );
    assert_eq!(
        (updated.retry_base_delay_ms, updated.retry_max_delay_ms),
        (250, 2_000)
    );
    assert!(!updated.is_enabled);
    assert_eq!(updated.created_at, created.created_at);
    assert_eq!(
        get_job_definition(&pool, "emails.send").await.unwrap(),
        Some(updated)
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn list_returns_definitions_by_type_and_get_misses_unknown(pool: PgPool) {
    for job_type in ["b.job", "a.job", "c.job"] {
        upsert_job_definition(&pool, &JobDefinitionUpsert::new(job_type))
            .await
            .unwrap();
    }
    let types: Vec<String> = list_job_definitions(&pool)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.job_type)
        .collect();
    assert_eq!(types, ["a.job", "b.job", "c.job"]);
    assert_eq!(get_job_definition(&pool, "nope").await.unwrap(), None);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn enabling_and_disabling_toggles_only_the_flag(pool: PgPool) {
    upsert_job_definition(&pool, &JobDefinitionUpsert::new("x").max_attempts(7))
        .await
        .unwrap();
    let disabled = set_job_definition_enabled(&pool, "x", false).await.unwrap();
    assert!(!disabled.is_enabled);
    assert_eq!(disabled.max_attempts, 7);
    assert!(
        set_job_definition_enabled(&pool, "x", true)
            .await
            .unwrap()
            .is_enabled
    );

    let err = set_job_definition_enabled(&pool, "missing", false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job_definition.not_found");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn invalid_definitions_are_rejected_with_codes_and_not_stored(pool: PgPool) {
    let cases = [
        (JobDefinitionUpsert::new(""), "job.invalid_job_type"),
        (
            JobDefinitionUpsert::new("t").version(0),
            "job_definition.invalid_version",
        ),
        (
            JobDefinitionUpsert::new("t").max_attempts(0),
            "job_definition.invalid_max_attempts",
        ),
        (
            JobDefinitionUpsert::new("t").timeout_seconds(-1),
            "job_definition.invalid_timeout",
        ),
        (
            JobDefinitionUpsert::new("t").retry_delays_ms(0, 10),
            "job_definition.invalid_retry_delay",
        ),
        (
            JobDefinitionUpsert::new("t").retry_delays_ms(500, 100),
            "job_definition.invalid_retry_delay",
        ),
    ];
    for (upsert, code) in cases {
        let err = upsert_job_definition(&pool, &upsert).await.unwrap_err();
        assert_eq!(err.code(), code, "{upsert:?}");
    }
    assert!(list_job_definitions(&pool).await.unwrap().is_empty());
}
