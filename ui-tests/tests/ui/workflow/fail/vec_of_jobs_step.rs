use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn publish() -> Result<(), JobError> { Ok(()) }

#[workflow(name = "profiles.research")]
struct Research {
    pages: Vec<Crawl>,
    #[after(pages)]
    publish: Publish,
}

fn main() {}
