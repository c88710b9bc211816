use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn publish() -> Result<(), JobError> { Ok(()) }

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Option<Crawl>,
    #[after(crawl)]
    publish: Publish,
}

fn main() {}
