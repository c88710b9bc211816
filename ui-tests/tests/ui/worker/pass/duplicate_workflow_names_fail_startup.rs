use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
}

#[workflow(name = "profiles.research")]
struct DeepResearch {
    crawl: Crawl,
}

#[tokio::main]
async fn main() {
    let _ = (Research::CRAWL, DeepResearch::CRAWL);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let err = Worker::builder(&pool).build().unwrap_err();
    assert_eq!(err.code(), "worker.duplicate_workflow");
    let message = err.to_string();
    assert!(message.contains("profiles.research"), "{message}");
    assert!(message.contains("duplicate_workflow_names_fail_startup.rs:5:1"), "{message}");
    assert!(message.contains("duplicate_workflow_names_fail_startup.rs:10:1"), "{message}");
}
