//! A service that embeds a Runledger worker: it migrates its database, starts the worker in the
//! background, enqueues a typed job and a typed workflow, waits for both results, shuts down and
//! exits 0. Only `runledger`'s own re-exports are used for sqlx.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use runledger::JobHandle;
use runledger::prelude::*;
use runledger::sqlx::PgPool;
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Greeting {
    text: String,
    words: usize,
}

#[job(name = "smoke.greet", max_attempts = 3, timeout = "10s")]
async fn greet(name: String) -> Result<Greeting, JobError> {
    let text = format!("hello, {name}");
    Ok(Greeting {
        words: text.split_whitespace().count(),
        text,
    })
}

#[job(name = "smoke.shout")]
async fn shout(#[output(Welcome::GREET)] greeting: Greeting) -> Result<String, JobError> {
    Ok(greeting.text.to_uppercase())
}

#[workflow(name = "smoke.welcome")]
struct Welcome {
    greet: Greet,
    #[after(greet)]
    #[result]
    shout: Shout,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Enqueues inside a transaction; `?` turns sqlx's errors into `runledger::Error`.
async fn enqueue_in_transaction(pool: &PgPool) -> Result<JobHandle<Greet>, runledger::Error> {
    let mut tx = pool.begin().await?;
    let job = Greet {
        name: "smoke".into(),
    }
    .enqueue(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(job)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let worker = Worker::from_env()?;
    let pool = worker.pool().clone();
    let running = worker.start().await?; // migrates the unmigrated database first

    let job = enqueue_in_transaction(&pool).await?;
    let run = Welcome {
        greet: Greet {
            name: "world".into(),
        },
        shout: Shout {},
    }
    .enqueue(&pool)
    .await?;

    let shouted = run
        .result(&pool, Wait::up_to(Duration::from_secs(60)))
        .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let greeting = loop {
        if let Some(greeting) = job.output(&pool).await? {
            break greeting;
        }
        if Instant::now() > deadline {
            return Err("the job did not finish within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    running.shutdown().await?;

    assert_eq!(shouted, "HELLO, WORLD");
    assert_eq!(
        greeting,
        Greeting {
            text: "hello, smoke".into(),
            words: 2
        }
    );
    println!("job output: {greeting:?}");
    println!("workflow result: {shouted}");
    Ok(())
}
