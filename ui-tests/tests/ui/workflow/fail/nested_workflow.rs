use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn publish() -> Result<(), JobError> { Ok(()) }

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
}

#[workflow(name = "profiles.publish")]
struct Publication {
    research: Research,
    #[after(research)]
    publish: Publish,
}

fn main() {}
