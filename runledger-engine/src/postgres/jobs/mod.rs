//! The queue API: definitions, enqueue, the worker lease protocol, operator transitions and
//! reads. Every function takes a `sqlx` executor, so it runs on a pool, a connection or inside
//! the caller's transaction.

mod activity;
mod admin;
mod claim_connection;
mod continuation;
mod definitions;
mod detail;
mod enqueue;
mod explain;
mod fan_out;
mod handler_access;
mod handles;
mod intents;
pub(crate) mod lease;
mod logs;
mod metrics;
mod notifications;
mod payload_edit;
mod queues;
mod reads;
mod replay;
mod retention;
mod runtime_configs;
mod schedules;
mod scope;
mod workflows;

pub use activity::{JobActivityMinute, get_job_activity};
pub use admin::{
    JobRequeueExpectation, JobRequeueOutcome, ReapedLease, cancel_job, reap_expired_leases,
    requeue_job, requeue_job_if, run_waiting_jobs_now,
};
pub(crate) use claim_connection::ClaimConnection;
pub use continuation::{
    JobContinuationOutcome, JobContinued, MAX_CONTINUATION_DELAY, continue_jobs,
};
pub use definitions::{
    DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, DEFAULT_RETRY_BASE_DELAY_MS, DEFAULT_RETRY_MAX_DELAY_MS,
    DEFAULT_TIMEOUT_SECONDS, JobDefinition, JobDefinitionUpsert, MAX_RETRY_DELAY_MS,
    get_job_definition, list_job_definitions, set_job_definition_enabled, sync_job_definitions,
    upsert_job_definition,
};
pub use enqueue::{
    EnqueueOutcome, EnqueuedJob, JobEnqueue, UniqueRule, UniqueWhile, enqueue_job, enqueue_jobs,
};
pub use fan_out::{FanOutFill, fill_fan_out, get_fan_out_outputs};
pub(crate) use handler_access::{PgJobServices, store_job_logs};
pub use intents::{
    IntentPromotion, IntentPromotionPass, JOB_INTENT_CHANNEL, JobIntentListFilter,
    JobIntentMetrics, JobIntentRecord, RecordedJobIntent, get_job_enqueue_intent,
    get_job_intent_metrics, list_job_enqueue_intents, promote_job_enqueue_intents,
    record_job_enqueue_intent,
};
pub use lease::{
    ClaimRequest, ClaimedJob, JobFailureDisposition, JobLease, JobSuccess, MAX_ERROR_MESSAGE_CHARS,
    claim_jobs, claim_limited_jobs, complete_job_failure, complete_job_success,
    complete_jobs_success, heartbeat_job, heartbeat_jobs, mark_job_running, mark_jobs_running,
    update_job_progress,
};
pub(crate) use notifications::Notifications;
pub use reads::{
    DeadLetterListFilter, JobAttempt, JobDeadLetter, JobEvent, JobListFilter, JobPage, JobRecord,
    MAX_PAGE_SIZE, count_jobs, get_job_by_id, list_dead_letters, list_job_attempts,
    list_job_events, list_jobs,
};

pub use detail::{JOB_DETAIL_LOG_LINES, JobDetail, get_job_detail};
pub use logs::{JobLogListFilter, JobLogRecord, append_job_logs, list_job_logs};
pub use metrics::{JobMetrics, QueueDepth, get_job_metrics, get_queue_depths, sample_queue_depths};
pub use payload_edit::{
    JobPayloadUpdateRejection, JobPayloadUuidArrayFieldUpdate, update_job_payload_uuid_array_field,
};
pub use queues::{
    QueueSettings, list_queue_settings, pause_queue, resume_queue, set_queue_global_concurrency,
};
pub use replay::{JobReplay, JobReplayRecord, ReplayedJob, list_job_replays, replay_job};
pub use retention::{PruneBatch, PruneCounts, count_prunable, prune_batch};
pub use runtime_configs::{
    JobRuntimeConfig, get_job_runtime_config, list_job_runtime_configs, upsert_job_runtime_config,
};

pub use explain::{
    JobExplanation, JobHold, PRESENCE_TTL, WaitingStep, WorkerPresence, explain_job, forget_worker,
    record_worker,
};
pub use handles::{
    DEFAULT_RESULT_POLL_INTERVAL, DEFAULT_RESULT_WAIT, WorkflowRunHandle, WorkflowRunHandleError,
    WorkflowRunWaitOptions, enqueue_workflow_run_handle,
};
pub use schedules::{
    JobSchedule, JobScheduleUpsert, SCHEDULE_ERROR_RETRY_SECONDS, SchedulePass, get_job_schedule,
    job_schedule, list_job_schedules, materialize_due_schedules, set_job_schedule_active,
    sync_job_schedules, upsert_job_schedule,
};
pub use scope::TenantScope;
pub use workflows::{
    CompleteExternalWorkflowStepInput, EnqueuedWorkflowRun, ExternalStepCompletion,
    PREREQUISITES_NAMED, WORKFLOW_RUN_CHANNEL, WorkflowAppend, WorkflowAppendOutcome,
    WorkflowRunCountFilter, WorkflowRunHandleScope, WorkflowRunListFilter, WorkflowRunRecord,
    WorkflowRunStepCounts, WorkflowStepRecord, append_workflow_steps, cancel_workflow_run,
    complete_external_workflow_step, count_workflow_runs, enqueue_workflow_run,
    get_prerequisite_outputs, get_workflow_run, list_workflow_run_step_counts, list_workflow_runs,
    list_workflow_steps, list_workflow_steps_page,
};

/// The PostgreSQL channel that enqueue notifies (payload: the job type) when claimable jobs
/// arrive. Workers `LISTEN` on it and keep polling as the correctness fallback. Jobs under a
/// global limit or holding a resource key notify [`GATED_JOB_CHANNEL`] instead.
pub const JOB_QUEUE_CHANNEL: &str = "runledger_job_queue";

/// The channel notified (payload: the job type) when claimable jobs under a global concurrency
/// limit or holding a resource key arrive; only a worker's loop for such jobs listens to it, so
/// other jobs never wake that loop.
pub const GATED_JOB_CHANNEL: &str = "runledger_gated_jobs";
