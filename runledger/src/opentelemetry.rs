//! OpenTelemetry trace propagation (feature `opentelemetry`): a request's trace continues into
//! the jobs it enqueues.
//!
//! With [`install`] called once at startup, in every process that enqueues or runs jobs, an
//! enqueue made inside a traced span stores that span's W3C trace context (`traceparent` and
//! `tracestate`) with each job (or workflow run, whose step jobs inherit it), and the worker's
//! span for the job's handler (`runledger.job`, with the job's id, type and attempt, and its
//! workflow run and step) gets it as its parent.
//! Spans are read and parented through `tracing-opentelemetry`: the process needs its layer
//! in the `tracing` subscriber, with the tracer of your choice.
//!
//! ```no_run
//! use runledger::prelude::*;
//!
//! #[job(name = "emails.welcome")]
//! async fn welcome(user_id: u64) -> Result<(), JobError> {
//!     tracing::info!(user_id, "sending"); // inside the request's trace
//!     Ok(())
//! }
//!
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), runledger::Error> {
//! // At startup, after the tracing subscriber with its OpenTelemetry layer:
//! runledger::opentelemetry::install();
//!
//! // In a request handler: the job joins the request's trace.
//! let span = tracing::info_span!("POST /signup");
//! async { Welcome { user_id: 42 }.enqueue(&pool).await }
//!     .instrument(span)
//!     .await?;
//! # Ok(()) }
//! # use tracing::Instrument;
//! ```
//!
//! Jobs enqueued outside a traced span, by a schedule or through a durable intent store no
//! context: their handler spans start traces of their own.

use std::str::FromStr;

use ::opentelemetry::Context;
use ::opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::engine::core::trace::{TraceContext, TracePropagator, set_trace_propagator};

/// The W3C trace context header naming the trace, the parent span and the sampling flag.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C trace context header carrying vendor-specific trace state.
pub const TRACESTATE: &str = "tracestate";

/// The propagator [`install`] installs: W3C trace context, read from and attached to
/// `tracing` spans through `tracing-opentelemetry`.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct W3cTracePropagator;

impl TracePropagator for W3cTracePropagator {
    fn current(&self) -> Option<TraceContext> {
        let context = tracing::Span::current().context();
        let span = context.span();
        let span_context = span.span_context();
        if !span_context.is_valid() {
            return None;
        }
        let mut fields = TraceContext::new();
        fields.insert(TRACEPARENT, traceparent(span_context));
        let state = span_context.trace_state().header();
        if !state.is_empty() {
            fields.insert(TRACESTATE, state);
        }
        Some(fields)
    }

    fn set_parent(&self, span: &tracing::Span, context: &TraceContext) {
        let Some(parent) = remote_span_context(context) else {
            return;
        };
        if span
            .set_parent(Context::new().with_remote_span_context(parent))
            .is_err()
        {
            tracing::debug!("the job's span could not take its stored trace parent");
        }
    }
}

/// Installs [`W3cTracePropagator`] as the process's trace propagator. Call it once at startup;
/// later calls (and calls after another propagator was installed) change nothing.
pub fn install() {
    // Already installed: the first propagator stays, as documented.
    let _ = set_trace_propagator(W3cTracePropagator);
}

/// `version-traceid-parentid-flags`, as the W3C trace context specification writes it.
fn traceparent(span: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags()
    )
}

/// The remote span context of a stored `traceparent` (and `tracestate`), if it is well formed.
fn remote_span_context(context: &TraceContext) -> Option<SpanContext> {
    let mut parts = context.get(TRACEPARENT)?.trim().split('-');
    let (version, trace_id, span_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let well_formed = version.len() == 2
        && version != "ff"
        && trace_id.len() == 32
        && span_id.len() == 16
        && flags.len() == 2
        && (version != "00" || parts.next().is_none());
    if !well_formed {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & TraceFlags::SAMPLED.to_u8());
    let state = context
        .get(TRACESTATE)
        .and_then(|state| TraceState::from_str(state).ok())
        .unwrap_or_default();
    let span = SpanContext::new(trace_id, span_id, flags, true, state);
    span.is_valid().then_some(span)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(traceparent: &str) -> TraceContext {
        let mut context = TraceContext::new();
        context.insert(TRACEPARENT, traceparent);
        context
    }

    #[test]
    fn a_traceparent_reads_back_as_the_span_it_names() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let span = remote_span_context(&stored(header)).unwrap();
        assert_eq!(traceparent(&span), header);
        assert!(span.is_remote() && span.is_sampled());
    }

    #[test]
    fn a_malformed_or_invalid_traceparent_is_ignored() {
        for header in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(remote_span_context(&stored(header)).is_none(), "{header}");
        }
    }
}
