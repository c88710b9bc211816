-- The trace context of the span that enqueued a job (propagation fields such as W3C
-- `traceparent`, as a JSON object of strings), so that the handler's span continues the
-- enqueuer's trace. Set only when a trace propagator is installed and the enqueue ran inside
-- a traced span; NULL otherwise, which costs an enqueue nothing. A nullable column without a
-- default: adding it rewrites nothing.
ALTER TABLE runledger.job_queue ADD COLUMN trace_context jsonb;
