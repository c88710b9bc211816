use runledger::prelude::*;

// A job that reads nothing is a step of any number of workflows; a job whose reads name one
// workflow's steps is a step of that workflow.
#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn notify(channel: String) -> Result<(), JobError> { let _ = channel; Ok(()) }
#[job] async fn score(#[output(Research::CRAWL)] page: String) -> Result<usize, JobError> {
    Ok(page.len())
}

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
    #[after(crawl)]
    score: Score,
    #[after(score)]
    notify: Notify,
}

#[workflow(name = "profiles.backfill")]
struct Backfill {
    crawl: Crawl,
    #[after(crawl)]
    notify: Notify,
}

fn main() {
    assert_eq!(Research::CRAWL.key(), Backfill::CRAWL.key());
}
