//! Trace propagation: the trace context of the span that enqueues a job travels with the job
//! (stored on its row) and becomes the parent of the span its handler runs in, so that a
//! request's trace continues into the background work it caused. A workflow run stores the
//! context of the span that enqueued it, and each of its step jobs carries it.
//!
//! The engine knows no tracing system. A [`TracePropagator`], installed once per process with
//! [`set_trace_propagator`], reads the current span's context at enqueue and attaches a stored
//! context to the handler's span. The `runledger` crate's `opentelemetry` feature provides one
//! for `tracing-opentelemetry` (W3C `traceparent` and `tracestate`). Without a propagator
//! nothing is stored and an enqueue costs nothing more.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// Most fields a stored context keeps.
pub const MAX_TRACE_CONTEXT_FIELDS: usize = 16;
/// Longest field name kept, in characters.
pub const MAX_TRACE_CONTEXT_KEY_CHARS: usize = 128;
/// Longest field value kept, in characters (W3C baggage allows 8,192 bytes).
pub const MAX_TRACE_CONTEXT_VALUE_CHARS: usize = 8_192;

/// Propagation fields of a trace context, such as W3C `traceparent` and `tracestate`: what
/// HTTP headers would carry between services, stored with a job as a JSON object of strings.
///
/// Fields PostgreSQL could not store or that exceed the limits above are left out, so a
/// context never fails an enqueue.
///
/// ```
/// use runledger_engine::core::trace::TraceContext;
///
/// let mut context = TraceContext::new();
/// context.insert("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert!(context.get("traceparent").is_some());
/// context.insert("bad\0key", "dropped");
/// assert_eq!(context.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TraceContext(BTreeMap<String, String>);

impl TraceContext {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a field; returns `false` (and keeps the context unchanged) when the field breaks a
    /// limit or contains a NUL character.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) -> bool {
        let (key, value) = (key.into(), value.into());
        let storable = |text: &str, max| !text.contains('\0') && text.chars().count() <= max;
        let fits = self.0.contains_key(&key) || self.0.len() < MAX_TRACE_CONTEXT_FIELDS;
        if key.is_empty()
            || !fits
            || !storable(&key, MAX_TRACE_CONTEXT_KEY_CHARS)
            || !storable(&value, MAX_TRACE_CONTEXT_VALUE_CHARS)
        {
            return false;
        }
        self.0.insert(key, value);
        true
    }

    /// The value of a field.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Every field, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is no field.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The string fields of a stored JSON object that pass the limits; anything else (a value
    /// written by other means) is ignored rather than failing the job that carries it.
    pub fn from_json(value: &serde_json::Value) -> Self {
        let mut context = Self::new();
        if let Some(fields) = value.as_object() {
            for (key, value) in fields {
                if let Some(value) = value.as_str() {
                    context.insert(key.as_str(), value);
                }
            }
        }
        context
    }
}

/// Carries trace contexts from the enqueuing span to the handler's span. Install one with
/// [`set_trace_propagator`].
///
/// ```
/// use runledger_engine::core::trace::{TraceContext, TracePropagator};
///
/// /// Tags every job with the request id of the thread that enqueued it.
/// struct RequestIds;
///
/// impl TracePropagator for RequestIds {
///     fn current(&self) -> Option<TraceContext> {
///         let mut context = TraceContext::new();
///         context.insert("x-request-id", "req-42");
///         Some(context)
///     }
///
///     fn set_parent(&self, span: &tracing::Span, context: &TraceContext) {
///         let request_id = context.get("x-request-id");
///         tracing::info!(parent: span, request_id, "job enqueued by this request");
///     }
/// }
/// ```
pub trait TracePropagator: Send + Sync + 'static {
    /// The context of the current span (`tracing::Span::current()`), or `None` when it is not
    /// part of a trace. Called once per enqueue call, batches included.
    fn current(&self) -> Option<TraceContext>;

    /// Makes `context`, read from a claimed job, the parent of `span`, the span the job's
    /// handler is about to run in. A context it cannot read is ignored.
    fn set_parent(&self, span: &tracing::Span, context: &TraceContext);
}

static PROPAGATOR: OnceLock<Box<dyn TracePropagator>> = OnceLock::new();

/// [`set_trace_propagator`] was called before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a trace propagator is already installed")]
#[non_exhaustive]
pub struct TracePropagatorAlreadySet;

/// Installs the process's trace propagator, once, before enqueueing or starting workers.
/// Enqueues then store the current span's context with their jobs, and workers parent each
/// handler's span on the context its job carries.
pub fn set_trace_propagator(
    propagator: impl TracePropagator,
) -> Result<(), TracePropagatorAlreadySet> {
    PROPAGATOR
        .set(Box::new(propagator))
        .map_err(|_| TracePropagatorAlreadySet)
}

/// The current span's context, when a propagator is installed and the span is traced.
pub(crate) fn current_trace_context() -> Option<TraceContext> {
    PROPAGATOR
        .get()?
        .current()
        .filter(|context| !context.is_empty())
}

/// Parents `span` on `context` through the installed propagator, if any.
pub(crate) fn set_span_parent(span: &tracing::Span, context: &TraceContext) {
    if let Some(propagator) = PROPAGATOR.get() {
        propagator.set_parent(span, context);
    }
}
