use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }

#[workflow(name = "profiles.research ")]
struct Research {
    crawl: Crawl,
}

fn main() {}
