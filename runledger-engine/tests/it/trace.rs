//! Trace propagation through a propagator installed for the whole test binary. It reports a
//! context only inside [`REQUEST`] scopes, so the other tests' jobs carry none.

use std::sync::{Arc, Mutex, OnceLock};

use runledger_engine::core::jobs::{JobCompletion, WorkflowDagBuilder};
use runledger_engine::core::trace::{TraceContext, TracePropagator, set_trace_propagator};
use runledger_engine::postgres::jobs::{JobEnqueue, enqueue_jobs, enqueue_workflow_run};
use runledger_engine::runtime::observer::JobLifecycleObservers;
use runledger_engine::runtime::registry::JobRegistry;
use runledger_engine::runtime::worker::{WorkerConfig, WorkerLoop};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{DefinitionOpts, claim_one, define, fast_config, handler, insert_job};

tokio::task_local! {
    /// The request id the enqueuing code runs under.
    static REQUEST: &'static str;
}

/// Stores the task's request id as `traceparent`, and remembers every context it was asked to
/// parent a handler's span on.
struct RequestPropagator {
    parented: Arc<Mutex<Vec<TraceContext>>>,
}

impl TracePropagator for RequestPropagator {
    fn current(&self) -> Option<TraceContext> {
        let request = REQUEST.try_with(|request| *request).ok()?;
        let mut context = TraceContext::new();
        context.insert("traceparent", request);
        Some(context)
    }

    fn set_parent(&self, _span: &tracing::Span, context: &TraceContext) {
        self.parented.lock().unwrap().push(context.clone());
    }
}

fn parented() -> &'static Arc<Mutex<Vec<TraceContext>>> {
    static PARENTED: OnceLock<Arc<Mutex<Vec<TraceContext>>>> = OnceLock::new();
    PARENTED.get_or_init(|| {
        let parented = Arc::new(Mutex::new(Vec::new()));
        set_trace_propagator(RequestPropagator {
            parented: Arc::clone(&parented),
        })
        .expect("no other propagator is installed");
        parented
    })
}

async fn stored_context(pool: &PgPool) -> Vec<Option<serde_json::Value>> {
    sqlx::query_scalar("SELECT trace_context FROM runledger.job_queue ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_job_enqueued_in_a_traced_scope_carries_its_context_to_the_handler_span(pool: PgPool) {
    let parented = parented();
    define(&pool, "trace.job", DefinitionOpts::default()).await;
    let payload = json!({});
    let batch = [
        JobEnqueue::new("trace.job", &payload),
        JobEnqueue::new("trace.job", &payload),
    ];
    REQUEST
        .scope("00-trace-request-a-01", enqueue_jobs(&pool, &batch))
        .await
        .unwrap();
    insert_job(&pool, "trace.job", json!({})).await;

    let request = json!({"traceparent": "00-trace-request-a-01"});
    assert_eq!(
        stored_context(&pool).await,
        [Some(request.clone()), Some(request), None]
    );

    let mut registry = JobRegistry::new();
    registry
        .register(handler("trace.job", |_, _| async {
            Ok(JobCompletion::success())
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-trace")),
        JobLifecycleObservers::new(),
    )
    .unwrap();
    assert_eq!(worker.run_once().await.unwrap().succeeded, 3);

    let parents: Vec<TraceContext> = parented
        .lock()
        .unwrap()
        .iter()
        .filter(|context| context.get("traceparent") == Some("00-trace-request-a-01"))
        .cloned()
        .collect();
    assert_eq!(parents.len(), 2, "one handler span per job of the request");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn every_step_job_of_a_run_enqueued_in_a_traced_scope_carries_its_context(pool: PgPool) {
    parented();
    define(&pool, "trace.step", DefinitionOpts::default()).await;
    let (meta, payload) = (json!({}), json!({}));
    let run = WorkflowDagBuilder::new("trace.flow", &meta)
        .job("first", "trace.step", &payload)
        .unwrap()
        .job("second", "trace.step", &payload)
        .unwrap()
        .after_success("second", ["first"])
        .unwrap()
        .build()
        .unwrap();
    REQUEST
        .scope("00-trace-request-b-01", enqueue_workflow_run(&pool, &run))
        .await
        .unwrap();
    let mut registry = JobRegistry::new();
    registry
        .register(handler("trace.step", |_, _| async {
            Ok(JobCompletion::success())
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-trace-flow")),
        JobLifecycleObservers::new(),
    )
    .unwrap();

    // The root is released at enqueue, the second step once the first succeeded.
    assert_eq!(worker.run_once().await.unwrap().succeeded, 1);
    assert_eq!(worker.run_once().await.unwrap().succeeded, 1);

    let request = json!({"traceparent": "00-trace-request-b-01"});
    assert_eq!(
        stored_context(&pool).await,
        [Some(request.clone()), Some(request)]
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_stored_context_that_is_not_an_object_of_strings_never_fails_the_claim(pool: PgPool) {
    parented();
    define(&pool, "trace.odd", DefinitionOpts::default()).await;
    insert_job(&pool, "trace.odd", json!({})).await;
    sqlx::query(
        r#"UPDATE runledger.job_queue
           SET trace_context = '{"traceparent": 42, "tracestate": "a=1", "nested": {"x": "y"}}'"#,
    )
    .execute(&pool)
    .await
    .unwrap();

    let job = claim_one(&pool).await;

    let context = job.trace_context.unwrap();
    assert_eq!(context.iter().collect::<Vec<_>>(), [("tracestate", "a=1")]);
}
