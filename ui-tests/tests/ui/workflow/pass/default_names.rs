//! Default names: a job is named after its fn, a workflow after its struct in snake case,
//! acronyms kept whole.
use runledger::prelude::*;

#[job] async fn fetch_page(url: String) -> Result<String, JobError> { Ok(url) }

#[workflow]
struct HTTPCrawl {
    fetch: FetchPage,
}

#[workflow]
struct ResearchProfileV2 {
    fetch: FetchPage,
}

fn main() {
    assert_eq!(FetchPage::NAME, "fetch_page");
    assert_eq!(<HTTPCrawl as Workflow>::NAME, "http_crawl");
    assert_eq!(<ResearchProfileV2 as Workflow>::NAME, "research_profile_v2");
}
