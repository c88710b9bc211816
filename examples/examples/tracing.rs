//! Trace propagation: a job enqueued while a request is being traced runs in a span of the
//! same trace, whose parent is the request's span. `tracing-opentelemetry` turns `tracing`
//! spans into OpenTelemetry spans; an exporter that prints each finished span stands in for a
//! collector, so the example needs nothing but PostgreSQL and exits 0 once the job's span is
//! exported in the request's trace.
//!
//! ```sh
//! cargo run -p runledger-examples --example tracing
//! ```
//!
//! It runs on the first PostgreSQL it finds (see the quick start) and creates the `runledger`
//! schema there on first run.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use runledger::prelude::*;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// Sends the welcome email of a new user; its own span nests in the job's span.
#[job(name = "tracing.welcome")]
async fn welcome(user: String) -> Result<(), JobError> {
    let _span = tracing::info_span!("smtp.send", %user).entered();
    Ok(())
}

/// Prints every finished span and keeps it, in place of a collector.
#[derive(Debug, Clone, Default)]
struct PrintSpans(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for PrintSpans {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        for span in &batch {
            println!(
                "span {:<24} trace {} span {} parent {}",
                span.name,
                span.span_context.trace_id(),
                span.span_context.span_id(),
                span.parent_span_id,
            );
        }
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(batch);
        Ok(())
    }
}

impl PrintSpans {
    /// The exported span named `name` in `trace`'s trace, if any.
    fn find(&self, name: &str, trace: &SpanContext) -> Option<SpanData> {
        let spans = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        spans
            .iter()
            .find(|span| span.name == name && span.span_context.trace_id() == trace.trace_id())
            .cloned()
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    runledger_examples::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // The tracing pipeline: spans become OpenTelemetry spans, exported as they end.
    let spans = PrintSpans::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("example"));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;
    // Jobs now carry the W3C trace context of the span that enqueues them.
    runledger::opentelemetry::install();

    let db = runledger_examples::database().await?;
    let worker = Worker::builder(db.pool()).build()?;
    let pool = worker.pool().clone();
    let running = worker.start().await?;

    // What an HTTP handler does: enqueue inside the request's span.
    let request = tracing::info_span!("POST /signup");
    let request_context = request.context().span().span_context().clone();
    let job = async { Welcome { user: "ada".into() }.enqueue(&pool).await }
        .instrument(request)
        .await?;
    println!("enqueued job {} during the request", job.id());

    let handler_span = runledger_examples::wait_for(
        "the job's span in the request's trace",
        Duration::from_secs(30),
        || async {
            Ok::<_, std::convert::Infallible>(spans.find("runledger.job", &request_context))
        },
    )
    .await?;
    running.shutdown().await?;
    provider.shutdown()?;

    if handler_span.parent_span_id != request_context.span_id() {
        return Err("the job's span is not a child of the request's span".into());
    }
    println!("the job ran in the request's trace, as a child of its span");
    Ok(())
}
