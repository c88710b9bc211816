//! The names and labels of the metrics Runledger records through the [`metrics`] facade.
//!
//! Nothing is exported until the application installs a recorder (for example
//! `metrics-exporter-prometheus`, or an OpenTelemetry bridge). Install it before starting a
//! `Supervisor`: a worker takes the handles of a job type and queue the first time it meets
//! them and keeps them, so that recording on the hot path is an atomic add.
//!
//! Every per-job metric carries the labels [`LABEL_JOB_TYPE`] and [`LABEL_QUEUE`].

/// Label: the job type.
pub const LABEL_JOB_TYPE: &str = "job_type";
/// Label: the job's queue (`default` unless its definition names another).
pub const LABEL_QUEUE: &str = "queue";
/// Label of [`JOB_DURATION_SECONDS`]: `succeeded` or `failed`.
pub const LABEL_OUTCOME: &str = "outcome";
/// Label of [`QUEUE_DEPTH`]: `ready`, `scheduled` or `running`.
pub const LABEL_STATE: &str = "state";

/// Counter: jobs inserted by an enqueue call (a keyed retry that returns the existing job is
/// not counted). Counted when the statement succeeds, so a job enqueued in a transaction that
/// then rolls back is counted too.
pub const JOBS_ENQUEUED: &str = "runledger_jobs_enqueued_total";
/// Counter: handlers started (one per attempt).
pub const JOBS_STARTED: &str = "runledger_jobs_started_total";
/// Counter: successes committed.
pub const JOBS_SUCCEEDED: &str = "runledger_jobs_succeeded_total";
/// Counter: failed attempts committed, whatever happened to the job next, and expired leases
/// taken back by the reaper: always the sum of [`JOBS_RETRIED`] and [`JOBS_DEAD_LETTERED`].
pub const JOBS_FAILED: &str = "runledger_jobs_failed_total";
/// Counter: failed attempts, and expired leases taken back by the reaper, that scheduled a
/// retry.
pub const JOBS_RETRIED: &str = "runledger_jobs_retried_total";
/// Counter: jobs dead-lettered by a worker or by the reaper.
pub const JOBS_DEAD_LETTERED: &str = "runledger_jobs_dead_lettered_total";
/// Histogram, seconds: how long handlers ran, labelled by [`LABEL_OUTCOME`].
pub const JOB_DURATION_SECONDS: &str = "runledger_job_duration_seconds";
/// Histogram, seconds: from when a job became due (its enqueue, `run_at` or retry time) until
/// a worker leased it, on the database's clock. The handler starts right after the lease:
/// a worker only claims as many jobs as it has free slots.
pub const JOB_PICKUP_LATENCY_SECONDS: &str = "runledger_job_pickup_latency_seconds";
/// Histogram: jobs leased by one claim statement (claims that found nothing are not recorded).
pub const CLAIM_BATCH_SIZE: &str = "runledger_claim_batch_size";
/// Gauge: jobs by [`LABEL_STATE`]: `ready` (pending and due), `scheduled` (pending, due
/// later) and `running` (leased), sampled by each `Supervisor` every
/// `JobsConfig::queue_depth_interval`.
pub const QUEUE_DEPTH: &str = "runledger_queue_depth";

/// The labels of a job's metrics: its type and its queue. This is the one place that decides
/// them.
pub(crate) fn job_labels(job_type: &str, queue: &str) -> Vec<metrics::Label> {
    vec![
        metrics::Label::new(LABEL_JOB_TYPE, job_type.to_owned()),
        metrics::Label::new(LABEL_QUEUE, queue.to_owned()),
    ]
}

/// Counts `count` jobs of `job_type` in `queue` inserted by an enqueue.
pub(crate) fn count_enqueued(job_type: &str, queue: &str, count: u64) {
    metrics::counter!(JOBS_ENQUEUED, job_labels(job_type, queue)).increment(count);
}

/// Registers a description and unit of every metric with the installed recorder (exporters
/// show them as `# HELP` lines). Optional; call it once after installing the recorder.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(JOBS_ENQUEUED, Unit::Count, "Jobs inserted by enqueue calls");
    describe_counter!(JOBS_STARTED, Unit::Count, "Job handlers started");
    describe_counter!(JOBS_SUCCEEDED, Unit::Count, "Job successes committed");
    describe_counter!(JOBS_FAILED, Unit::Count, "Failed job attempts committed");
    describe_counter!(JOBS_RETRIED, Unit::Count, "Job retries scheduled");
    describe_counter!(JOBS_DEAD_LETTERED, Unit::Count, "Jobs dead-lettered");
    describe_histogram!(
        JOB_DURATION_SECONDS,
        Unit::Seconds,
        "How long job handlers ran"
    );
    describe_histogram!(
        JOB_PICKUP_LATENCY_SECONDS,
        Unit::Seconds,
        "From when a job became due until a worker leased it"
    );
    describe_histogram!(
        CLAIM_BATCH_SIZE,
        Unit::Count,
        "Jobs leased by one claim statement"
    );
    describe_gauge!(
        QUEUE_DEPTH,
        Unit::Count,
        "Jobs ready, scheduled and running"
    );
}
