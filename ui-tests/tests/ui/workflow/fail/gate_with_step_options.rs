use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }

#[workflow(name = "docs.review")]
struct Review {
    crawl: Crawl,
    #[after(crawl)]
    #[step(key = "approval", priority = 5)]
    approval: External<bool>,
}

fn main() {}
