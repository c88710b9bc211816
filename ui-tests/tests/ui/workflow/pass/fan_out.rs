use runledger::prelude::*;

#[job] async fn fetch(url: String) -> Result<usize, JobError> { Ok(url.len()) }

#[job]
async fn list(ctx: JobContext, site: String) -> Result<usize, JobError> {
    let pages = (0..3).map(|n| Fetch { url: format!("{site}/{n}") });
    ctx.fan_out(Crawl::PAGES, pages).await
}

#[job]
async fn total(#[output(Crawl::PAGES)] sizes: Vec<usize>) -> Result<usize, JobError> {
    Ok(sizes.iter().sum())
}

#[workflow(name = "sites.crawl")]
struct Crawl {
    list: List,
    #[after(list)]
    #[result]
    pages: FanOut<Fetch>,
    #[after(pages)]
    total: Total,
}

fn main() {
    fn result_type<W: Workflow<Output = Vec<usize>>>() {}
    result_type::<Crawl>();
    let _step: Step<Crawl, FanOut<Fetch>> = Crawl::PAGES;
}
