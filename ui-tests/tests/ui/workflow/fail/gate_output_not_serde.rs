use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }

struct Verdict {
    approved: bool,
}

#[workflow(name = "docs.review")]
struct Review {
    crawl: Crawl,
    #[after(crawl)]
    approval: External<Verdict>,
}

fn main() {}
