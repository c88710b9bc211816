//! Migrations, schema placement and the startup compatibility check.

use std::time::Duration;

use runledger_engine::postgres::{
    MIGRATOR, ensure_schema_compatible, ensure_schema_compatible_after_idempotency_cutover,
    migrate, migrate_after_idempotency_cutover,
};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const TABLES: [&str; 17] = [
    "job_attempts",
    "job_dead_letters",
    "job_definitions",
    "job_enqueue_intents",
    "job_events",
    "job_logs",
    "job_queue",
    "job_queues",
    "job_replays",
    "job_runtime_configs",
    "job_schedules",
    "queue_depth_sample",
    "worker_presence",
    "workflow_run_mutations",
    "workflow_runs",
    "workflow_step_dependencies",
    "workflow_steps",
];

async fn tables_in(pool: &PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn migrate_puts_every_table_and_its_history_in_the_runledger_schema(pool: PgPool) {
    migrate(&pool).await.unwrap();

    let mut expected: Vec<String> = TABLES.iter().map(|t| (*t).to_owned()).collect();
    expected.push("_sqlx_migrations".to_owned());
    expected.sort();
    assert_eq!(tables_in(&pool, "runledger").await, expected);
    assert!(
        tables_in(&pool, "public").await.is_empty(),
        "nothing may land in the host application's schema"
    );
    let view: Option<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.views
         WHERE table_schema = 'runledger' AND table_name = 'job_metrics_rollup'",
    )
    .fetch_optional(&pool)
    .await
    .unwrap();
    assert_eq!(view.as_deref(), Some("job_metrics_rollup"));
}

#[sqlx::test(migrations = false)]
async fn migrate_twice_is_a_no_op_and_the_schema_then_validates(pool: PgPool) {
    migrate(&pool).await.unwrap();
    migrate_after_idempotency_cutover(&pool).await.unwrap();
    ensure_schema_compatible(&pool).await.unwrap();
    ensure_schema_compatible_after_idempotency_cutover(&pool)
        .await
        .unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM runledger._sqlx_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(applied, MIGRATOR.iter().count() as i64);
}

#[sqlx::test(migrations = false)]
async fn unmigrated_database_reports_missing_history(pool: PgPool) {
    let err = ensure_schema_compatible(&pool).await.unwrap_err();
    assert_eq!(err.code(), "schema.missing_history");
    assert!(err.to_string().contains("run migrate()"));
}

#[sqlx::test(migrations = false)]
async fn altered_migration_checksum_reports_incompatible_history(pool: PgPool) {
    migrate(&pool).await.unwrap();
    sqlx::query("UPDATE runledger._sqlx_migrations SET checksum = '\\x00'::bytea")
        .execute(&pool)
        .await
        .unwrap();
    let err = ensure_schema_compatible(&pool).await.unwrap_err();
    assert_eq!(err.code(), "schema.incompatible_history");
    // migrate refuses too rather than re-running anything.
    assert_eq!(
        migrate(&pool).await.unwrap_err().code(),
        "schema.incompatible_history"
    );
}

#[sqlx::test(migrations = false)]
async fn half_applied_migration_reports_incompatible_history(pool: PgPool) {
    migrate(&pool).await.unwrap();
    sqlx::query("UPDATE runledger._sqlx_migrations SET success = false")
        .execute(&pool)
        .await
        .unwrap();
    let err = ensure_schema_compatible(&pool).await.unwrap_err();
    assert_eq!(err.code(), "schema.incompatible_history");
}

#[sqlx::test(migrations = false)]
async fn migration_from_a_newer_version_reports_unknown_migration(pool: PgPool) {
    migrate(&pool).await.unwrap();
    sqlx::query(
        "INSERT INTO runledger._sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (299912310001, 'from the future', true, '\\x01'::bytea, 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let err = ensure_schema_compatible(&pool).await.unwrap_err();
    assert_eq!(err.code(), "schema.unknown_migration");
    assert!(err.to_string().contains("299912310001"));
}

#[tokio::test]
async fn unreachable_database_reports_a_connection_error() {
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy("postgres://postgres@127.0.0.1:1/postgres")
        .unwrap();
    let err = ensure_schema_compatible(&pool).await.unwrap_err();
    assert_eq!(err.code(), "schema.database_unavailable");
    assert!(
        !err.to_string().contains("127.0.0.1"),
        "the client-facing message must not leak connection detail: {err}"
    );
    assert_eq!(
        migrate(&pool).await.unwrap_err().code(),
        "schema.database_unavailable"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn uuidv7_function_yields_time_ordered_version_7_ids(pool: PgPool) {
    let ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT runledger.uuidv7() FROM generate_series(1, 50)")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(ids.iter().all(|id| id.get_version_num() == 7));
    let mut sorted = ids.clone();
    sorted.sort();
    // Same-millisecond ids may tie on the timestamp, so compare the 48-bit time prefix.
    let prefix = |id: &uuid::Uuid| id.as_u128() >> 80;
    assert!(ids.windows(2).all(|w| prefix(&w[0]) <= prefix(&w[1])));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn claim_index_is_partial_on_pending_ungated_rows_in_claim_order(pool: PgPool) {
    let definition: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'runledger' AND indexname = 'job_queue_claim_idx'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        definition.contains("(priority DESC, next_run_at, id)"),
        "{definition}"
    );
    assert!(
        definition.contains("WHERE ((status = 'PENDING'::text) AND (NOT gated))"),
        "{definition}"
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn check_constraints_reject_invalid_statuses(pool: PgPool) {
    sqlx::query("INSERT INTO runledger.job_definitions (job_type) VALUES ('t')")
        .execute(&pool)
        .await
        .unwrap();
    let err = sqlx::query(
        "INSERT INTO runledger.job_queue (job_type, status, max_attempts, timeout_seconds)
         VALUES ('t', 'RUNNING', 1, 1)",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    let constraint = err
        .as_database_error()
        .and_then(|e| e.constraint())
        .map(str::to_owned);
    assert_eq!(constraint.as_deref(), Some("job_queue_status_valid"));
}
