//! A long job split into runs: `pages.crawl` crawls a site one batch of pages per run, commits
//! its cursor as a checkpoint and continues; each run starts with a fresh attempt budget and
//! reads the cursor the last run committed, and the run that reaches the end returns the
//! job's output. The job's output type is what that last run returns.
//!
//! ```sh
//! cargo run -p runledger-examples --example continuation
//! ```

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use runledger::engine::core::jobs::JobStatus;
use runledger::engine::postgres::jobs::{TenantScope, get_job_by_id};
use runledger::prelude::*;
use runledger::{Continuation, JobProgressUpdate};
use runledger_examples::wait_for;

/// Pages crawled per run.
const BATCH: u64 = 40;

/// Where a crawl stands between runs.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Cursor {
    next_page: u64,
    links_found: u64,
}

#[job(name = "pages.crawl", max_attempts = 3)]
async fn crawl_site(ctx: JobContext, site: String, pages: u64) -> Result<u64, JobError> {
    let cursor: Cursor = ctx.checkpoint()?.unwrap_or(Cursor {
        next_page: 0,
        links_found: 0,
    });
    let end = (cursor.next_page + BATCH).min(pages);
    // ... fetch pages `next_page..end` of `site`; here every page has three links ...
    let links_found = cursor.links_found + (end - cursor.next_page) * 3;
    ctx.info(format!("{site}: pages {}..{end}", cursor.next_page));
    if end < pages {
        let next = Cursor {
            next_page: end,
            links_found,
        };
        return Err(Continuation::after(Duration::from_millis(50))
            .checkpoint(&next)
            .progress(JobProgressUpdate::new().completed(end).total(pages))
            .into());
    }
    Ok(links_found)
}

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let db = runledger_examples::database().await?;
    let worker = Worker::builder(db.pool()).build()?;
    let pool = worker.pool().clone();
    let running = worker.start().await?;

    let crawl = CrawlSite {
        site: "docs.example.com".into(),
        pages: 100,
    }
    .enqueue(&pool)
    .await?;
    wait_for("the crawl", Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            Ok::<_, runledger::Error>(
                (crawl.status(&pool).await? == JobStatus::Succeeded).then_some(()),
            )
        }
    })
    .await?;
    let links = crawl.output(&pool).await?;
    let record = get_job_by_id(&pool, crawl.id(), TenantScope::Global)
        .await?
        .ok_or("the crawl job disappeared")?;
    println!(
        "found {links:?} links in {} runs; last checkpoint {}",
        record.run_number,
        record.checkpoint.unwrap_or_default()
    );
    assert_eq!(links, Some(300));
    assert_eq!(record.run_number, 3);
    running.shutdown().await?;
    Ok(())
}
