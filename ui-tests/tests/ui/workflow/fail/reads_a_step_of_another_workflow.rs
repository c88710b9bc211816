use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }

#[job]
async fn report(#[output(Research::CRAWL)] page: String) -> Result<usize, JobError> { Ok(page.len()) }

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
    #[after(crawl)]
    report: Report,
}

#[workflow(name = "profiles.backfill")]
struct Backfill {
    crawl: Crawl,
    #[after(crawl)]
    report: Report,
}

fn main() {}
