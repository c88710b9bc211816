use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn classify() -> Result<u8, JobError> { Ok(1) }
#[job] async fn score() -> Result<u8, JobError> { Ok(2) }

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
    #[after(crawl)]
    #[after_terminal(crawl)]
    classify: Classify,
}

fn main() {}
