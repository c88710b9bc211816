//! Two structs named alike in two modules get the same default workflow name.
use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }

mod billing {
    use runledger::prelude::*;

    #[workflow]
    pub struct Report {
        pub crawl: super::Crawl,
    }
}

mod marketing {
    use runledger::prelude::*;

    #[workflow]
    pub struct Report {
        pub crawl: super::Crawl,
    }
}

#[tokio::main]
async fn main() {
    assert_eq!(<billing::Report as Workflow>::NAME, "report");
    assert_eq!(<marketing::Report as Workflow>::NAME, "report");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let err = Worker::builder(&pool).build().unwrap_err();
    assert_eq!(err.code(), "worker.duplicate_workflow");
    let message = err.to_string();
    assert!(message.contains("default_workflow_names_collide_across_modules.rs:9:5"), "{message}");
    assert!(message.contains("default_workflow_names_collide_across_modules.rs:18:5"), "{message}");
}
