//! Dynamic fan-out with typed data flow: a step lists the pages of a site (a number known only
//! at run time) and fills a `FanOut<FetchPage>` with one job per page; a later step receives
//! every page's word count, in order, as a `Vec<usize>`. The handlers share an HTTP-like
//! client through `WorkerBuilder::data` and report progress on the job row. Exits 0 once the
//! result is in.
//!
//! ```sh
//! cargo run -p runledger-examples --example fan_out
//! ```
//!
//! It runs on the first PostgreSQL it finds (see the quick start) and creates the `runledger`
//! schema there on first run.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use runledger::JobProgressUpdate;
use runledger::prelude::*;

/// Stands in for an HTTP client shared by every handler.
struct Site {
    pages: usize,
}

impl Site {
    fn body(&self, path: &str) -> String {
        format!("the page {path} of a site with {} pages", self.pages)
    }
}

/// Lists the site's pages and fans out one fetch per page.
#[job(name = "fan_out.list")]
async fn list_pages(ctx: JobContext, site: String) -> Result<usize, JobError> {
    let pages = ctx.data::<Site>()?.pages;
    let fetches = (0..pages).map(|n| FetchPage {
        path: format!("{site}/page-{n}"),
    });
    ctx.fan_out(Crawl::PAGES, fetches).await
}

/// One page: its word count.
#[job(name = "fan_out.fetch", max_attempts = 3, timeout = "30s")]
async fn fetch_page(ctx: JobContext, path: String) -> Result<usize, JobError> {
    let body = ctx.data::<Site>()?.body(&path);
    Ok(body.split_whitespace().count())
}

/// Receives every page's count, in the order the pages were listed.
#[job(name = "fan_out.total")]
async fn total(
    ctx: JobContext,
    #[output(Crawl::PAGES)] counts: Vec<usize>,
) -> Result<usize, JobError> {
    let mut sum = 0;
    for (done, count) in counts.iter().enumerate() {
        sum += count;
        if done % 10 == 0 {
            let progress = JobProgressUpdate::new()
                .stage("summing")
                .completed(done as u64)
                .total(counts.len() as u64);
            ctx.progress(progress).await?;
        }
    }
    Ok(sum)
}

/// list -> pages (one fetch per page, chosen by `list`) -> total.
#[workflow(name = "fan_out.crawl")]
struct Crawl {
    list: ListPages,
    #[after(list)]
    pages: FanOut<FetchPage>,
    #[after(pages)]
    #[result]
    total: Total,
}

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let db = runledger_examples::database().await?;
    let pool = db.pool().clone();
    // The worker shares the `Site` with every handler.
    let worker = Worker::builder(&pool).data(Site { pages: 25 }).build()?;
    let running = worker.start().await?;

    let run = Crawl {
        list: ListPages {
            site: "https://example.com".into(),
        },
        pages: FanOut::new(),
        total: Total {},
    }
    .enqueue(&pool)
    .await?;
    println!("enqueued workflow run {}", run.id());

    let words = run
        .result(&pool, Wait::up_to(Duration::from_secs(60)))
        .await?;
    println!("25 pages, {words} words in all");

    running.shutdown().await?;
    Ok(())
}
