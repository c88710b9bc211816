//! Worker startup: engine handlers next to typed jobs, and the collisions it refuses.

use runledger::engine::core::prelude::{
    JobCompletion, JobFailure, JobHandler, JobType, async_trait,
};
use runledger::prelude::*;
use sqlx::PgPool;

use crate::support::{eventually, job_state};

/// An engine handler for any job type, succeeding with `{"engine": true}`.
struct EngineHandler(&'static str);

#[async_trait]
impl JobHandler for EngineHandler {
    fn job_type(&self) -> JobType<'static> {
        JobType::new(self.0)
    }

    async fn execute(
        &self,
        _: runledger::engine::core::jobs::JobContext,
        _: serde_json::Value,
    ) -> Result<JobCompletion, JobFailure> {
        Ok(JobCompletion::with_output(
            serde_json::json!({"engine": true}),
        ))
    }
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn an_engine_handler_with_a_typed_jobs_name_fails_startup_naming_both(pool: PgPool) {
    let err = Worker::builder(&pool)
        .handler(EngineHandler("it.add"))
        .build()
        .unwrap_err();
    assert_eq!(err.code(), "worker.duplicate_job");
    let message = err.to_string();
    assert!(message.contains("`it.add`"), "{message}");
    assert!(
        message.contains("#[job] at runledger/tests/it/jobs.rs:"),
        "{message}"
    );
    assert!(
        message.contains("the engine handler `it::worker::EngineHandler`"),
        "{message}"
    );

    let err = Worker::builder(&pool)
        .handler(EngineHandler("it.engine.twice"))
        .handler(EngineHandler("it.engine.twice"))
        .build()
        .unwrap_err();
    assert_eq!(err.code(), "worker.duplicate_job");
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn the_workers_catalog_holds_each_job_type_once_with_its_handler(pool: PgPool) {
    let worker = Worker::builder(&pool)
        .handler(EngineHandler("it.engine.listed"))
        .build()
        .unwrap();
    let catalog = worker.catalog();
    let job_types = catalog.job_types();
    for name in ["it.add", "it.summarize", "it.engine.listed"] {
        assert_eq!(
            job_types.iter().filter(|t| *t == name).count(),
            1,
            "{name} in {job_types:?}"
        );
        assert!(
            catalog.handlers().get(name).is_some(),
            "{name} has a handler"
        );
    }
    let typed: Vec<&String> = job_types
        .iter()
        .filter(|t| t.starts_with("it.") && *t != "it.engine.listed")
        .collect();
    assert!(typed.is_sorted(), "#[job]s by name: {typed:?}");
    assert_eq!(
        job_types.last().map(String::as_str),
        Some("it.engine.listed"),
        "engine handlers after the #[job]s"
    );
    catalog.validate().unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn an_engine_handler_runs_next_to_the_typed_jobs(pool: PgPool) {
    let config = runledger::engine::runtime::config::JobsConfig::from_lookup(|name| {
        (name == "JOBS_POLL_INTERVAL_MS").then(|| "50".to_owned())
    })
    .unwrap();
    let worker = Worker::builder(&pool)
        .config(config)
        .handler_with_defaults(
            EngineHandler("it.engine.run"),
            runledger::engine::core::jobs::JobDefaults::new().priority(3),
        )
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let definition = runledger::engine::postgres::jobs::get_job_definition(&pool, "it.engine.run")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(definition.priority, 3);
    let engine_job = runledger::engine::postgres::jobs::enqueue_job(
        &pool,
        &runledger::engine::postgres::jobs::JobEnqueue::new(
            "it.engine.run",
            &serde_json::json!({}),
        ),
    )
    .await
    .unwrap();
    let typed = crate::jobs::Add { a: 2, b: 3 }
        .enqueue(&pool)
        .await
        .unwrap();
    eventually("both jobs to succeed", || async {
        let engine = job_state(&pool, engine_job.id).await.0;
        let typed = job_state(&pool, typed.id()).await.0;
        (engine == "SUCCEEDED" && typed == "SUCCEEDED").then_some(())
    })
    .await;
    worker.shutdown().await.unwrap();
}

/// A hand-written `Job` whose name breaks the naming rule: enqueue refuses it with the
/// engine's code (`#[job]` refuses such a name at compile time).
#[derive(serde::Serialize, serde::Deserialize)]
struct Padded;

impl Job for Padded {
    const NAME: &'static str = " it.padded ";
    type Output = ();

    async fn run(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_name_with_surrounding_whitespace_is_refused_at_enqueue(pool: PgPool) {
    let err = Padded.enqueue(&pool).await.unwrap_err();
    assert_eq!(err.code(), "job.invalid_job_type");
    assert!(err.to_string().contains("whitespace"), "{err}");
}
