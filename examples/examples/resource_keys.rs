//! Execution resource keys: print jobs name the printer they use, and at most one job holding a
//! given printer runs at a time across all workers, while thumbnails (no key) run in parallel.
//! The handlers record when they start and end, and the program checks that no two jobs of
//! one printer overlapped.
//!
//! ```sh
//! cargo run -p runledger-examples --example resource_keys
//! ```

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use runledger::engine::core::jobs::JobStatus;
use runledger::prelude::*;
use runledger::{EnqueueOptions, JobHandle};
use runledger_examples::wait_for;

/// When each print job ran, per printer: (start, end).
static PRINTED: Mutex<Vec<(String, Instant, Instant)>> = Mutex::new(Vec::new());

#[job(name = "printer.print")]
async fn print(printer: String, pages: u32) -> Result<(), JobError> {
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(50 * u64::from(pages))).await;
    PRINTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((printer, start, Instant::now()));
    Ok(())
}

#[job(name = "thumbnails.make")]
async fn make_thumbnail(image: String) -> Result<usize, JobError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(image.len())
}

async fn wait_until_succeeded<J: Job>(
    pool: &sqlx::PgPool,
    job: JobHandle<J>,
) -> Result<(), Box<dyn std::error::Error>> {
    wait_for("a job", Duration::from_secs(60), || async move {
        let status = job.status(pool).await?;
        Ok::<_, runledger::Error>((status == JobStatus::Succeeded).then_some(()))
    })
    .await
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

    let mut handles = Vec::new();
    for (n, printer) in ["lobby", "annex", "lobby", "lobby", "annex", "lobby"]
        .into_iter()
        .enumerate()
    {
        // The key is the printer: two jobs for the lobby printer never print at once.
        let options = EnqueueOptions::new().resource_key(format!("printer:{printer}"));
        let job = Print {
            printer: printer.to_owned(),
            pages: 2 + n as u32 % 3,
        };
        handles.push(job.enqueue_with(&pool, options).await?);
    }
    let mut thumbnails = Vec::new();
    for n in 0..8 {
        let job = MakeThumbnail {
            image: format!("photo-{n}.jpg"),
        };
        thumbnails.push(job.enqueue(&pool).await?);
    }

    for handle in &handles {
        wait_until_succeeded(&pool, *handle).await?;
    }
    for thumbnail in &thumbnails {
        wait_until_succeeded(&pool, *thumbnail).await?;
    }
    running.shutdown().await?;

    let mut by_printer: HashMap<String, Vec<(Instant, Instant)>> = HashMap::new();
    for (printer, start, end) in PRINTED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        by_printer
            .entry(printer.clone())
            .or_default()
            .push((*start, *end));
    }
    for (printer, mut spans) in by_printer {
        spans.sort();
        let overlaps = spans
            .windows(2)
            .filter(|pair| pair[1].0 < pair[0].1)
            .count();
        println!(
            "printer {printer}: {} jobs, {overlaps} overlapping",
            spans.len()
        );
        if overlaps > 0 {
            return Err(format!("two jobs of printer {printer} ran at once").into());
        }
    }
    println!("thumbnails (no key) ran in parallel beside them");
    Ok(())
}
