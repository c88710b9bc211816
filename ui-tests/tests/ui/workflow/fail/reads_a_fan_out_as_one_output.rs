use runledger::prelude::*;

#[job] async fn list(site: String) -> Result<String, JobError> { Ok(site) }
#[job] async fn fetch(url: String) -> Result<usize, JobError> { Ok(url.len()) }

// A fan-out's output is the `Vec` of its children's outputs.
#[job]
async fn total(#[output(Crawl::PAGES)] size: usize) -> Result<usize, JobError> { Ok(size) }

#[workflow(name = "sites.crawl")]
struct Crawl {
    list: List,
    #[after(list)]
    pages: FanOut<Fetch>,
    #[after(pages)]
    total: Total,
}

fn main() {}
