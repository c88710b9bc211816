use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn classify() -> Result<u8, JobError> { Ok(1) }
#[job] async fn score() -> Result<u8, JobError> { Ok(2) }

#[workflow(name = "docs.review")]
struct Review {
    crawl: Crawl,
    #[after(crawl)]
    approval: External<bool>,
}

async fn approve(pool: sqlx::PgPool, run: WorkflowHandle<Review>) {
    // The gate's output is a bool, not a string.
    let _ = run.complete_gate(&pool, Review::APPROVAL, &"yes".to_string()).await;
}

fn main() {
    let _ = approve;
}
