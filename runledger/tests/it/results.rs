//! Results that are JSON `null`: a workflow whose `#[result]` step returns `()` or `Ok(None)`
//! has a result, and reads of such step outputs see them.

use std::time::Duration;

use runledger::prelude::*;
use sqlx::PgPool;

use crate::support::start_worker;

#[job(name = "it.null.nothing")]
async fn nothing(#[output(Unit::FIRST)] first: ()) -> Result<(), JobError> {
    // A dependent reads the `()` output of its prerequisite.
    Ok(first)
}

#[job(name = "it.null.first")]
async fn first() -> Result<(), JobError> {
    Ok(())
}

#[workflow(name = "it.null.unit")]
struct Unit {
    first: First,
    #[after(first)]
    #[result]
    last: Nothing,
}

#[job(name = "it.null.lookup")]
async fn lookup(key: String) -> Result<Option<u32>, JobError> {
    Ok((key == "known").then_some(7))
}

#[workflow(name = "it.null.maybe")]
struct Maybe {
    #[result]
    lookup: Lookup,
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_unit_result_step_gives_the_run_a_unit_result(pool: PgPool) {
    let worker = start_worker(&pool).await;
    let run = Unit {
        first: First {},
        last: Nothing {},
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let result: () = run
        .result(&pool, Wait::up_to(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(result, ());
    assert_eq!(run.status(&pool).await.unwrap().as_str(), "SUCCEEDED");
    worker.shutdown().await.unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn an_ok_none_result_step_gives_the_run_a_none_result(pool: PgPool) {
    let worker = start_worker(&pool).await;
    let unknown = Maybe {
        lookup: Lookup {
            key: "unknown".into(),
        },
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let known = Maybe {
        lookup: Lookup {
            key: "known".into(),
        },
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let wait = Wait::up_to(Duration::from_secs(30));
    assert_eq!(unknown.result(&pool, wait).await.unwrap(), None);
    assert_eq!(known.result(&pool, wait).await.unwrap(), Some(7));
    worker.shutdown().await.unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_job_returning_none_reports_its_output_as_some_none(pool: PgPool) {
    runledger::testing::prepare(&pool).await.unwrap();
    let job = Lookup {
        key: "unknown".into(),
    }
    .enqueue(&pool)
    .await
    .unwrap();
    assert_eq!(job.output(&pool).await.unwrap(), None, "not run yet");
    assert_eq!(
        runledger::testing::drain(&pool).await.unwrap().succeeded(),
        1
    );
    assert_eq!(
        job.output(&pool).await.unwrap(),
        Some(None),
        "succeeded, with `None` as its output"
    );
}
