//! A durable enqueue intent (an outbox): an API process records "confirm this order" in the
//! transaction that writes the order, even though no worker has defined the job type yet.
//! A rolled-back transaction leaves no intent behind; a committed one is promoted into a job
//! by the intent promoter of the first worker that runs the type, and the job runs.
//!
//! ```sh
//! cargo run -p runledger-examples --example enqueue_intent
//! ```

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::Duration;

use runledger::prelude::*;
use runledger_examples::wait_for;

/// The job the intent asks for; registered only in the worker that starts below.
#[job(name = "orders.confirm")]
async fn confirm_order(order_number: u64) -> Result<String, JobError> {
    Ok(format!("order {order_number} confirmed"))
}

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let db = runledger_examples::database().await?;
    let worker = Worker::builder(db.pool()).build()?;
    let pool = worker.pool().clone();
    runledger::engine::postgres::migrate(&pool).await?;
    // A fresh order number per run, so the example can run again on the same database.
    let order_number = runledger::chrono::Utc::now()
        .timestamp_millis()
        .unsigned_abs();
    let key = format!("order:{order_number}:confirm");

    // The API process: the order row and the intent commit together (or not at all).
    let mut tx = pool.begin().await?;
    // sqlx::query("INSERT INTO orders ...").execute(&mut *tx).await?;
    let intent = ConfirmOrder { order_number }
        .record_intent(&mut *tx, &key)
        .await?;
    tx.commit().await?;
    println!(
        "intent {} recorded: {:?}",
        intent.id(),
        intent.status(&pool).await?
    );

    // A request that fails after recording its intent rolls it back with everything else.
    let mut tx = pool.begin().await?;
    let abandoned = ConfirmOrder {
        order_number: order_number + 1,
    }
    .record_intent(&mut *tx, &format!("order:{}:confirm", order_number + 1))
    .await?;
    tx.rollback().await?;
    let gone = abandoned.status(&pool).await.map_err(|err| err.code());
    assert_eq!(gone, Err("job.intent_not_found"));
    println!("the rolled-back intent left nothing behind");

    // The worker that runs `orders.confirm` deploys: it syncs the definition, and its intent
    // promoter turns the pending intent into a job, which it then runs.
    let running = worker.start().await?;
    let job = wait_for("the intent's job", Duration::from_secs(60), || {
        intent.job(&pool)
    })
    .await?;
    let output = wait_for("the job's output", Duration::from_secs(60), || {
        job.output(&pool)
    })
    .await?;
    println!("promoted into job {}: {output}", job.id());

    // Recording the same request again is harmless: it returns the promoted intent.
    let again = ConfirmOrder { order_number }
        .record_intent(&pool, &key)
        .await?;
    assert!(!again.was_created());
    running.shutdown().await?;
    Ok(())
}
