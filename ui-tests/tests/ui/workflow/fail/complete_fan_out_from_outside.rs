use runledger::prelude::*;

#[job] async fn list(site: String) -> Result<String, JobError> { Ok(site) }
#[job] async fn fetch(url: String) -> Result<usize, JobError> { Ok(url.len()) }

#[workflow(name = "sites.crawl")]
struct Crawl {
    list: List,
    #[after(list)]
    pages: FanOut<Fetch>,
}

async fn fill(pool: sqlx::PgPool, run: WorkflowHandle<Crawl>) {
    // Only the run's own steps fill a fan-out.
    let _ = run.complete_gate(&pool, Crawl::PAGES, &vec![1]).await;
}

fn main() {
    let _ = fill;
}
