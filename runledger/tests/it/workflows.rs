//! Typed workflows: the diamond with data flow and a typed result, gates completed with typed
//! outputs, and compile-checked step references.

use std::time::Duration;

use runledger::prelude::*;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::support::start_worker;

// A diamond: fetch -> (count_words, count_links) -> report.

#[job(name = "it.diamond.fetch")]
async fn fetch(url: String) -> Result<String, JobError> {
    Ok(format!("<a>{url}</a> durable jobs <a>docs</a>"))
}

#[job(name = "it.diamond.words")]
async fn count_words(#[output(Diamond::FETCH)] page: String) -> Result<usize, JobError> {
    Ok(page.split_whitespace().count())
}

#[job(name = "it.diamond.links")]
async fn count_links(#[output(Diamond::FETCH)] page: String) -> Result<usize, JobError> {
    Ok(page.matches("<a>").count())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Report {
    pub(crate) words: usize,
    pub(crate) links: usize,
    pub(crate) title: String,
}

// `payload = ...` names the generated struct (the default, `Report`, is taken by the output).
#[job(name = "it.diamond.report", payload = BuildReport)]
async fn report(
    title: String,
    #[output(Diamond::WORDS)] words: usize,
    #[output(Diamond::LINKS)] links: usize,
) -> Result<Report, JobError> {
    Ok(Report {
        words,
        links,
        title,
    })
}

#[workflow(name = "it.diamond")]
struct Diamond {
    fetch: Fetch,
    #[after(fetch)]
    #[step(key = "words", priority = 3)]
    words: CountWords,
    #[after(fetch)]
    links: CountLinks,
    #[after(words, links)]
    #[result]
    report: BuildReport,
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn the_typed_diamond_passes_data_and_returns_a_typed_result(pool: PgPool) {
    let worker = start_worker(&pool).await;
    let run = Diamond {
        fetch: Fetch {
            url: "runledger.dev".into(),
        },
        words: CountWords {},
        links: CountLinks {},
        report: BuildReport {
            title: "weekly".into(),
        },
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let report: Report = run
        .result(&pool, Wait::up_to(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(
        report,
        Report {
            words: 4,
            links: 2,
            title: "weekly".into()
        }
    );
    assert_eq!(run.status(&pool).await.unwrap().as_str(), "SUCCEEDED");
    let priority: i32 = sqlx::query_scalar(
        "SELECT j.priority FROM runledger.job_queue j WHERE j.workflow_run_id = $1 AND j.workflow_step_key = 'words'",
    )
    .bind(run.id().0)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(priority, 3, "#[step(priority)] reaches the step's job");
    worker.shutdown().await.unwrap();
}

// A gate: draft -> approval (External<Decision>) -> publish, with an after_terminal audit.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Decision {
    pub(crate) approved: bool,
    pub(crate) reviewer: String,
}

#[job(name = "it.gate.draft")]
async fn draft(title: String) -> Result<String, JobError> {
    Ok(format!("draft of {title}"))
}

#[job(name = "it.gate.publish")]
async fn publish(
    ctx: JobContext,
    #[output(Review::APPROVAL)] decision: Decision,
) -> Result<String, JobError> {
    // `draft` is not a prerequisite of `publish`: an `#[output(Review::DRAFT)]` argument does
    // not compile, and the engine's untyped read by key is refused at run time.
    let refused = ctx.engine().prerequisite_output("draft").await.unwrap_err();
    assert_eq!(refused.code, "workflow.not_a_prerequisite");
    // Read together, the outputs come in the order asked; a refusal names the first key that
    // is not a prerequisite.
    let keys = ["approval", "draft", "missing"].map(str::to_owned);
    let refused = ctx.engine().prerequisite_outputs(&keys).await.unwrap_err();
    assert_eq!(refused.code, "workflow.not_a_prerequisite");
    assert!(refused.message.contains("`draft`"), "{}", refused.message);
    let approval = ctx.engine().prerequisite_outputs(&keys[..1]).await.unwrap();
    assert_eq!(approval.len(), 1);
    assert_eq!(
        approval[0].as_ref().map(|v| v["reviewer"].clone()),
        Some(runledger::serde_json::json!(decision.reviewer))
    );
    Ok(format!("published, approved by {}", decision.reviewer))
}

#[job(name = "it.gate.audit")]
async fn audit(#[output(Review::APPROVAL)] decision: Option<Decision>) -> Result<bool, JobError> {
    Ok(decision.is_some())
}

#[workflow(name = "it.review")]
struct Review {
    draft: Draft,
    #[after(draft)]
    approval: External<Decision>,
    #[after(approval)]
    #[result]
    publish: Publish,
    #[after_terminal(approval)]
    audit: Audit,
}

fn review() -> Review {
    Review {
        draft: Draft {
            title: "launch".into(),
        },
        approval: External::new(),
        publish: Publish {},
        audit: Audit {},
    }
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_gate_completed_with_a_typed_output_releases_its_dependents(pool: PgPool) {
    let worker = start_worker(&pool).await;
    let run = review().enqueue(&pool).await.unwrap();
    let decision = Decision {
        approved: true,
        reviewer: "ada".into(),
    };
    // The gate opens once `draft` succeeded; completing it earlier is refused.
    crate::support::eventually("the gate to open", || async {
        run.complete_gate(&pool, Review::APPROVAL, &decision)
            .await
            .ok()
    })
    .await;
    let again = run
        .complete_gate(&pool, Review::APPROVAL, &decision)
        .await
        .unwrap();
    assert_eq!(
        again,
        runledger::engine::postgres::jobs::ExternalStepCompletion::AlreadyCompleted
    );
    let other = Decision {
        approved: false,
        reviewer: "bob".into(),
    };
    let conflict = run
        .complete_gate(&pool, Review::APPROVAL, &other)
        .await
        .unwrap_err();
    assert_eq!(
        conflict.code(),
        "workflow.external_step_conflicting_output_retry"
    );

    let published = run
        .result(&pool, Wait::up_to(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(published, "published, approved by ada");
    worker.shutdown().await.unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_failed_gate_cancels_after_dependents_and_the_result_says_so(pool: PgPool) {
    let worker = start_worker(&pool).await;
    let run = review().enqueue(&pool).await.unwrap();
    crate::support::eventually("the gate to open", || async {
        run.fail_gate(&pool, Review::APPROVAL, "review.rejected", "not this week")
            .await
            .ok()
    })
    .await;
    let err = run
        .result(&pool, Wait::up_to(Duration::from_secs(30)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workflow.result_unsuccessful_terminal");
    let steps: Vec<(String, String)> = sqlx::query_as(
        "SELECT step_key, status FROM runledger.workflow_steps WHERE workflow_run_id = $1 ORDER BY step_key",
    )
    .bind(run.id().0)
    .fetch_all(&pool)
    .await
    .unwrap();
    let status = |key: &str| {
        steps
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| s.as_str())
    };
    assert_eq!(status("publish"), Some("CANCELED"));
    assert_eq!(
        status("audit"),
        Some("SUCCEEDED"),
        "after_terminal still runs"
    );
    worker.shutdown().await.unwrap();
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn workflow_idempotency_keys_return_the_same_run(pool: PgPool) {
    runledger::testing::prepare(&pool).await.unwrap();
    let options = WorkflowOptions::new().idempotency_key("review:launch");
    let first = review().enqueue_with(&pool, options.clone()).await.unwrap();
    let second = review().enqueue_with(&pool, options.clone()).await.unwrap();
    assert_eq!(first.id(), second.id());
    assert!(!second.was_created());
    let mut changed = review();
    changed.draft.title = "other".into();
    let err = changed.enqueue_with(&pool, options).await.unwrap_err();
    assert_eq!(err.code(), "workflow.idempotency_conflict");
    first.cancel(&pool).await.unwrap();
    assert_eq!(first.status(&pool).await.unwrap().as_str(), "CANCELED");
}

#[test]
fn step_constants_carry_the_step_keys() {
    assert_eq!(Diamond::WORDS.key(), "words");
    assert_eq!(Review::APPROVAL.key(), "approval");
    assert_eq!(<Diamond as Workflow>::RESULT_STEP, Some("report"));
    assert_eq!(<Diamond as Workflow>::NAME, "it.diamond");
}

// A workflow without a #[result]: `result` resolves to `()` once the run succeeds.

#[job(name = "it.no_result.touch")]
async fn touch(fail: bool) -> Result<(), JobError> {
    if fail {
        return Err(JobError::terminal("asked to fail"));
    }
    Ok(())
}

#[workflow(name = "it.no_result")]
struct Cleanup {
    first: Touch,
    #[after(first)]
    second: Touch,
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn a_workflow_without_a_result_resolves_to_unit_or_reports_its_failure(pool: PgPool) {
    let worker = start_worker(&pool).await;
    let wait = Wait::up_to(Duration::from_secs(30));
    let ok = Cleanup {
        first: Touch { fail: false },
        second: Touch { fail: false },
    }
    .enqueue(&pool)
    .await
    .unwrap();
    ok.result(&pool, wait).await.unwrap();
    assert_eq!(ok.status(&pool).await.unwrap().as_str(), "SUCCEEDED");

    let failing = Cleanup {
        first: Touch { fail: true },
        second: Touch { fail: false },
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let err = failing.result(&pool, wait).await.unwrap_err();
    assert_eq!(err.code(), "workflow.result_unsuccessful_terminal");
    worker.shutdown().await.unwrap();
}
