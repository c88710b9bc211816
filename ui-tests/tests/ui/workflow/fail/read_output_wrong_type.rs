use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn classify() -> Result<u8, JobError> { Ok(1) }
#[job] async fn score() -> Result<u8, JobError> { Ok(2) }

#[job]
async fn report(ctx: JobContext) -> Result<(), JobError> {
    // `crawl` outputs a String.
    let page: u64 = ctx.output(Research::CRAWL).await?;
    let _ = page;
    Ok(())
}

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
    #[after(crawl)]
    report: Report,
}

fn main() {}
