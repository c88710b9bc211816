use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn classify() -> Result<u8, JobError> { Ok(1) }

#[job]
async fn report(#[output(Research::CLASSIFY)] label: u8) -> Result<u8, JobError> { Ok(label) }

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
    #[after(crawl)]
    classify: Classify,
    #[after(crawl)]
    report: Report,
}

fn main() {}
