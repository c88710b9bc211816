use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }

// `crawl` outputs a String.
#[job]
async fn report(#[output(Research::CRAWL)] page: u64) -> Result<u64, JobError> { Ok(page) }

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
    #[after(crawl)]
    report: Report,
}

fn main() {}
