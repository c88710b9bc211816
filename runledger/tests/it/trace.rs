//! Trace propagation with OpenTelemetry: a job or workflow run enqueued inside a traced span
//! runs in handler spans whose parent is that span, in the same trace.

use std::sync::{Arc, Mutex};

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use runledger::prelude::*;
use runledger::testing::{drain, prepare};
use sqlx::PgPool;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[job(name = "it.traced")]
async fn traced(n: u32) -> Result<u32, JobError> {
    Ok(n)
}

#[workflow(name = "it.traced_flow")]
struct TracedFlow {
    #[result]
    only: Traced,
}

/// Keeps every finished span.
#[derive(Debug, Clone, Default)]
struct Finished(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Finished {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[sqlx::test(migrator = "runledger::engine::postgres::MIGRATOR")]
async fn jobs_and_steps_enqueued_in_a_traced_span_run_in_handler_spans_parented_on_it(
    pool: PgPool,
) {
    prepare(&pool).await.unwrap();
    runledger::opentelemetry::install();
    let finished = Finished::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(finished.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("it"));
    // `sqlx::test` runs the test on one thread: the worker's tasks see this subscriber too.
    let _subscriber = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let request = tracing::info_span!("POST /signup");
    let request_context = request.context().span().span_context().clone();
    let (job, run) = async {
        let job = Traced { n: 7 }.enqueue(&pool).await.unwrap();
        let flow = TracedFlow {
            only: Traced { n: 9 },
        };
        (job, flow.enqueue(&pool).await.unwrap())
    }
    .instrument(request)
    .await;
    let untraced = Traced { n: 8 }.enqueue(&pool).await.unwrap();
    assert_eq!(drain(&pool).await.unwrap().succeeded(), 3);

    let spans = finished.0.lock().unwrap().clone();
    let handler_span = |key: &str, id: String| {
        spans
            .iter()
            .find(|span| span.name == "runledger.job" && attribute(span, key).as_ref() == Some(&id))
            .unwrap_or_else(|| panic!("no handler span with {key} {id}"))
            .clone()
    };
    let span = handler_span("job.id", job.id().to_string());
    assert!(request_context.is_valid());
    assert_eq!(span.span_context.trace_id(), request_context.trace_id());
    assert_eq!(span.parent_span_id, request_context.span_id());
    assert_eq!(attribute(&span, "job.type").as_deref(), Some("it.traced"));
    assert_eq!(attribute(&span, "job.attempt").as_deref(), Some("1"));

    let other = handler_span("job.id", untraced.id().to_string());
    assert_ne!(other.span_context.trace_id(), request_context.trace_id());

    let step = handler_span("workflow.run_id", run.id().to_string());
    assert_eq!(
        attribute(&step, "workflow.step_key").as_deref(),
        Some("only")
    );
    assert!(attribute(&step, "workflow.step_id").is_some());
}
