use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }

#[workflow(name = "docs.review")]
struct Review {
    crawl: Crawl,
    #[after(crawl)]
    approval: External<bool>,
}

async fn approve(pool: sqlx::PgPool, run: WorkflowHandle<Review>) {
    // `crawl` runs a job: only the `approval` gate can be completed from outside.
    let _ = run.complete_gate(&pool, Review::CRAWL, &"page".to_string()).await;
}

fn main() {
    let _ = approve;
}
