//! The quick start: two jobs feeding a third (a diamond with data flow), a gate-free typed
//! workflow whose result is a struct, and a schedule, all declared with the macros; a `Worker`
//! started in-process picks everything up, the workflow is enqueued, and its typed result is
//! printed. Exits 0 once the result is in.
//!
//! ```sh
//! cargo run -p runledger-examples --example quickstart
//! ```
//!
//! It uses `DATABASE_URL` (the workspace's `.cargo/config.toml` points it at
//! `postgres://postgres@127.0.0.1:5432/postgres`) and creates the `runledger` schema there on
//! first run.
//!
//! Its tests, at the end of this file, show how to test such code with `runledger::testing`
//! (`cargo test -p runledger-examples --example quickstart`); copy them as a starting point.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use runledger::prelude::*;
use serde::{Deserialize, Serialize};

/// Step 1: fetch a profile page (here: made up from the handle).
#[job(name = "quickstart.crawl", max_attempts = 5, timeout = "30s")]
async fn crawl(handle: String) -> Result<String, JobError> {
    Ok(format!(
        "{handle} writes Rust and PostgreSQL; {handle} maintains a job queue"
    ))
}

/// Step 2a: receives step 1's output, typed; the compiler checks that `crawl` is one of its
/// prerequisites in `Research`.
#[job(name = "quickstart.classify")]
async fn classify(#[output(Research::CRAWL)] page: String) -> Result<String, JobError> {
    let topic = if page.contains("Rust") {
        "systems"
    } else {
        "general"
    };
    Ok(topic.to_owned())
}

/// Step 2b: runs in parallel with 2a.
#[job(name = "quickstart.score")]
async fn score(#[output(Research::CRAWL)] page: String) -> Result<u32, JobError> {
    Ok(page.split_whitespace().count() as u32 * 10)
}

/// The workflow's result.
#[derive(Debug, Serialize, Deserialize)]
pub struct Profile {
    /// Whose profile.
    pub handle: String,
    /// From `classify`.
    pub topic: String,
    /// From `score`.
    pub score: u32,
}

/// Step 3: joins 2a and 2b.
#[job(name = "quickstart.persist")]
async fn persist(
    handle: String,
    #[output(Research::CLASSIFY)] topic: String,
    #[output(Research::SCORE)] score: u32,
) -> Result<Profile, JobError> {
    Ok(Profile {
        handle,
        topic,
        score,
    })
}

/// crawl -> (classify, score) -> persist; the compiler checks these edges.
#[workflow(name = "quickstart.research")]
struct Research {
    crawl: Crawl,
    #[after(crawl)]
    classify: Classify,
    #[after(crawl)]
    score: Score,
    #[after(classify, score)]
    #[result]
    persist: Persist,
}

/// Recurring work: re-crawl a pinned profile every hour (synced when the worker starts).
#[schedule(cron = "@hourly", name = "quickstart.crawl.pinned", jitter = "1m")]
fn crawl_pinned() -> Crawl {
    Crawl {
        handle: "ada".into(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn run() -> Result<(), runledger::Error> {
    let worker = Worker::from_env()?;
    let pool = worker.pool().clone();
    let running = worker.start().await?;

    let handle = "ada".to_owned();
    let run = Research {
        crawl: Crawl {
            handle: handle.clone(),
        },
        classify: Classify {},
        score: Score {},
        persist: Persist { handle },
    }
    .enqueue(&pool)
    .await?;
    println!("enqueued workflow run {}", run.id());

    let profile: Profile = run
        .result(&pool, Wait::up_to(Duration::from_secs(60)))
        .await?;
    println!("result: {profile:?}");

    running.shutdown().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use runledger::prelude::*;
    use runledger::testing::{TestDatabase, assert_enqueued, drain};

    use super::*;

    /// A step handler is a plain async fn: pass the outputs of its prerequisites as arguments.
    #[tokio::test]
    async fn classify_reads_the_crawled_page() {
        assert_eq!(
            classify("ada writes Rust".to_owned()).await.unwrap(),
            "systems"
        );
    }

    /// The whole workflow, run inline against a fresh database: no worker, no sleeping.
    #[tokio::test]
    async fn the_research_workflow_builds_a_profile() {
        let db = TestDatabase::new().await.unwrap();
        let run = Research {
            crawl: Crawl {
                handle: "grace".into(),
            },
            classify: Classify {},
            score: Score {},
            persist: Persist {
                handle: "grace".into(),
            },
        }
        .enqueue(db.pool())
        .await
        .unwrap();

        let report = drain(db.pool()).await.unwrap();
        assert_eq!(report.succeeded(), 4);
        let profile = run
            .result(db.pool(), Wait::up_to(Duration::from_secs(1)))
            .await
            .unwrap();
        assert_eq!(profile.topic, "systems");
        assert_eq!(profile.score, 100);
    }

    /// The schedule's payload is what its fn returns; the worker registers it by name.
    #[tokio::test]
    async fn the_pinned_crawl_is_scheduled_hourly() {
        let db = TestDatabase::new().await.unwrap();
        let worker = Worker::builder(db.pool()).build().unwrap();
        let schedule = worker
            .catalog()
            .schedules()
            .iter()
            .find(|s| s.name() == "quickstart.crawl.pinned")
            .expect("the schedule is registered");
        assert_eq!(
            (schedule.job_type(), schedule.cron_expr()),
            ("quickstart.crawl", "@hourly")
        );

        crawl_pinned().enqueue(db.pool()).await.unwrap();
        assert_enqueued::<Crawl>(db.pool(), |job| job.handle == "ada").await;
    }
}
