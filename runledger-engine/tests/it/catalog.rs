//! Catalog validation and definition sync (additive and exact).

use runledger_engine::core::jobs::{JobCompletion, JobHandler};
use runledger_engine::postgres::jobs::{
    get_job_definition, list_job_definitions, set_job_definition_enabled,
};
use runledger_engine::runtime::catalog::{
    JobCatalog, JobCatalogDefaults, JobCatalogDefinitionOverrides, JobCatalogSyncScope,
};
use sqlx::PgPool;

use crate::support::handler;

fn noop(job_type: &'static str) -> impl JobHandler {
    handler(job_type, |_, _| async { Ok(JobCompletion::success()) })
}

async fn enabled(pool: &PgPool, job_type: &str) -> bool {
    get_job_definition(pool, job_type)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{job_type} has no definition"))
        .is_enabled
}

async fn add_active_schedule(pool: &PgPool, job_type: &str) {
    sqlx::query(
        "INSERT INTO runledger.job_schedules (name, job_type, cron_expr) VALUES ($1, $2, '0 * * * * *')",
    )
    .bind(format!("{job_type}.every-minute"))
    .bind(job_type)
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn additive_sync_writes_defaults_and_overrides(pool: PgPool) {
    let catalog = JobCatalog::new()
        .with_defaults(JobCatalogDefaults::new().max_attempts(9))
        .job("a", noop("a"))
        .job_with_definition_overrides(
            "b",
            noop("b"),
            JobCatalogDefinitionOverrides::new()
                .timeout_seconds(600)
                .priority(-3)
                .version(2),
        );
    catalog.sync_definitions(&pool).await.unwrap();

    let a = get_job_definition(&pool, "a").await.unwrap().unwrap();
    assert_eq!((a.max_attempts, a.timeout_seconds, a.priority), (9, 300, 0));
    let b = get_job_definition(&pool, "b").await.unwrap().unwrap();
    assert_eq!(
        (b.max_attempts, b.timeout_seconds, b.priority, b.version),
        (9, 600, -3, 2)
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn additive_sync_restores_owned_fields_but_keeps_an_operator_pause(pool: PgPool) {
    let catalog = JobCatalog::new().job("a", noop("a"));
    catalog.sync_definitions(&pool).await.unwrap();
    set_job_definition_enabled(&pool, "a", false).await.unwrap();
    sqlx::query("UPDATE runledger.job_definitions SET max_attempts = 99 WHERE job_type = 'a'")
        .execute(&pool)
        .await
        .unwrap();

    catalog.sync_definitions(&pool).await.unwrap();
    let a = get_job_definition(&pool, "a").await.unwrap().unwrap();
    assert_eq!(a.max_attempts, 5, "catalog-owned field restored");
    assert!(!a.is_enabled, "operator pause survives a restart");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn additive_sync_disables_on_explicit_false_and_never_touches_absent_rows(pool: PgPool) {
    JobCatalog::new()
        .job("keep", noop("keep"))
        .job("old", noop("old"))
        .sync_definitions(&pool)
        .await
        .unwrap();
    JobCatalog::new()
        .job_with_definition_overrides(
            "keep",
            noop("keep"),
            JobCatalogDefinitionOverrides::new().enabled(false),
        )
        .sync_definitions(&pool)
        .await
        .unwrap();
    assert!(!enabled(&pool, "keep").await);
    assert!(enabled(&pool, "old").await, "absent rows are not disabled");
    assert_eq!(
        list_job_definitions(&pool).await.unwrap().len(),
        2,
        "never deletes"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn exact_sync_disables_scoped_rows_the_catalog_lacks_and_restores_enabled(pool: PgPool) {
    JobCatalog::new()
        .job("billing.charge", noop("billing.charge"))
        .job("billing.refund", noop("billing.refund"))
        .job("email.send", noop("email.send"))
        .sync_definitions(&pool)
        .await
        .unwrap();
    set_job_definition_enabled(&pool, "billing.charge", false)
        .await
        .unwrap();

    let scope = JobCatalogSyncScope::new(["billing.charge", "billing.refund"]).unwrap();
    let disabled = JobCatalog::new()
        .job("billing.charge", noop("billing.charge"))
        .sync_definitions_exact(&pool, &scope)
        .await
        .unwrap();
    assert_eq!(disabled, vec!["billing.refund".to_owned()]);
    assert!(
        enabled(&pool, "billing.charge").await,
        "exact sync restores enabled"
    );
    assert!(!enabled(&pool, "billing.refund").await);
    assert!(enabled(&pool, "email.send").await, "outside the scope");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn exact_sync_refuses_to_disable_a_type_with_active_schedules(pool: PgPool) {
    JobCatalog::new()
        .job("a", noop("a"))
        .job("b", noop("b"))
        .sync_definitions(&pool)
        .await
        .unwrap();
    add_active_schedule(&pool, "b").await;
    let scope = JobCatalogSyncScope::new(["a", "b"]).unwrap();
    let err = JobCatalog::new()
        .job_with_definition_overrides(
            "a",
            noop("a"),
            JobCatalogDefinitionOverrides::new().priority(7),
        )
        .sync_definitions_exact(&pool, &scope)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "job_definition.active_schedule_exists");
    assert!(enabled(&pool, "b").await);
    let a = get_job_definition(&pool, "a").await.unwrap().unwrap();
    assert_eq!(a.priority, 0, "the whole sync rolled back");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn catalog_mistakes_are_reported_with_codes_and_nothing_is_written(pool: PgPool) {
    let cases = [
        (
            JobCatalog::new().job("a", noop("a")).job("a", noop("a")),
            "catalog.duplicate_job_type",
        ),
        (
            JobCatalog::new().job("a", noop("b")),
            "catalog.job_type_mismatch",
        ),
        (JobCatalog::new().job("", noop("")), "job.invalid_job_type"),
        (
            JobCatalog::new().job_with_definition_overrides(
                "a",
                noop("a"),
                JobCatalogDefinitionOverrides::new().max_attempts(0),
            ),
            "catalog.invalid_definition_value",
        ),
        (
            JobCatalog::new().with_defaults(JobCatalogDefaults::new().timeout_seconds(0)),
            "catalog.invalid_definition_value",
        ),
        (
            JobCatalog::new()
                .job("a", noop("a"))
                .definition_overrides("zzz", JobCatalogDefinitionOverrides::new()),
            "catalog.unknown_job_type",
        ),
    ];
    for (catalog, code) in cases {
        let err = catalog.sync_definitions(&pool).await.unwrap_err();
        assert_eq!(err.code(), code, "{catalog:?}");
    }
    assert!(list_job_definitions(&pool).await.unwrap().is_empty());
    assert_eq!(
        JobCatalogSyncScope::new(Vec::<String>::new())
            .unwrap_err()
            .code(),
        "catalog.invalid_scope"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn handler_registers_under_its_own_type_and_priority_may_be_negative(pool: PgPool) {
    let catalog = JobCatalog::new()
        .handler(noop("self.named"))
        .definition_overrides(
            "self.named",
            JobCatalogDefinitionOverrides::new().priority(-10),
        );
    assert_eq!(catalog.job_types(), vec!["self.named".to_owned()]);
    catalog.sync_definitions(&pool).await.unwrap();
    let definition = get_job_definition(&pool, "self.named")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(definition.priority, -10);
    assert_eq!(
        catalog.handlers().job_types(),
        vec!["self.named".to_owned()]
    );
}
