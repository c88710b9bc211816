use runledger::prelude::*;

#[job] async fn list(site: String) -> Result<String, JobError> { Ok(site) }
#[job] async fn fetch(url: String) -> Result<usize, JobError> { Ok(url.len()) }

#[workflow(name = "sites.crawl")]
struct Crawl {
    list: List,
    #[after(list)]
    #[step(timeout = "5m")]
    pages: FanOut<Fetch>,
}

fn main() {}
