//! Property tests over hostile input: payloads, names, keys, cron strings, durations and
//! builder inputs. Nothing panics, and every refusal is a stable validation code; what is
//! accepted is stored and reads back unchanged.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use runledger_engine::core::jobs::limits::check_json;
use runledger_engine::core::jobs::{JobType, StepKey, WorkflowDagBuilder};
use runledger_engine::core::schedules::CronSchedule;
use runledger_engine::postgres::jobs::{
    JobDefinitionUpsert, JobEnqueue, TenantScope, enqueue_job, enqueue_workflow_run, get_job_by_id,
    job_schedule, upsert_job_definition, upsert_job_schedule,
};
use runledger_engine::postgres::{Error, ErrorCategory};
use runledger_engine::runtime::config::JobsConfig;
use runledger_engine::runtime::worker::WorkerConfig;
use serde_json::{Map, Value, json};
use sqlx::PgPool;

use crate::support::{DefinitionOpts, define};

/// Text a hostile caller might send: anything, with NULs, controls and far planes likely.
fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z.\\x00\\t\\u{1F600}\\u{10FFFF} ]{0,12}",
        Just(String::new()),
        Just("\u{0}".to_owned()),
        Just("x".repeat(300)),
    ]
}

/// JSON values of any shape, including NUL characters and nesting past the decode limit.
fn hostile_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        // Dyadic fractions: exact in binary, so equality after a round trip is meaningful.
        (any::<i32>(), 0_u8..8)
            .prop_map(|(whole, eighths)| json!(f64::from(whole) + f64::from(eighths) / 8.0)),
        hostile_text().prop_map(Value::String),
    ];
    let tree = leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((hostile_text(), inner), 0..4)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    });
    (tree, prop_oneof![Just(0_usize), 100_usize..140])
        .prop_map(|(value, wrap)| (0..wrap).fold(value, |inner, _| json!([inner])))
}

/// Every code a refused enqueue may carry.
const ENQUEUE_CODES: [&str; 9] = [
    "job.invalid_job_type",
    "job.invalid_idempotency_key",
    "job.invalid_payload",
    "job.payload_too_deep",
    "job.invalid_run_at",
    "job.invalid_delay",
    "job.invalid_max_attempts",
    "job.invalid_timeout",
    "job.definition_not_found_or_disabled",
];

fn assert_refusal(err: &Error, allowed: &[&str]) {
    assert!(
        allowed.contains(&err.code()),
        "unexpected code {} ({err:?})",
        err.code()
    );
    assert!(
        matches!(
            err.category(),
            ErrorCategory::Validation | ErrorCategory::Conflict
        ),
        "{} is not a caller error",
        err.code()
    );
}

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    #[test]
    fn what_check_json_accepts_is_stored_text_serde_reads_back(value in hostile_json()) {
        if check_json(&value).is_ok() {
            let text = value.to_string();
            prop_assert!(!text.contains("\\u0000"));
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(back, value);
        }
    }

    #[test]
    fn identifiers_are_accepted_or_refused_with_their_code(text in hostile_text()) {
        match JobType::try_new(text.as_str()) {
            Ok(job_type) => {
                prop_assert!(!text.trim().is_empty() && !text.contains('\0'));
                prop_assert_eq!(job_type.as_str(), text.as_str());
            }
            Err(err) => prop_assert_eq!(err.code(), "job.invalid_job_type"),
        }
        if let Err(err) = StepKey::try_new(text.as_str()) {
            prop_assert_eq!(err.code(), "workflow.invalid_step_key");
        }
    }

    #[test]
    fn cron_strings_parse_or_are_refused_without_panicking(expression in prop_oneof![
        hostile_text(),
        "[0-9*/,\\- ]{0,40}",
        "@[a-z]{0,10}",
    ]) {
        if let Err(err) = CronSchedule::parse(&expression) {
            prop_assert_eq!(err.code(), "job_schedule.invalid_cron");
        }
    }

    #[test]
    fn every_jobs_variable_value_is_read_or_refused_by_name(
        name in prop::sample::select(vec![
            "JOBS_WORKER_ID", "JOBS_POLL_INTERVAL_MS", "JOBS_CLAIM_BATCH_SIZE",
            "JOBS_LEASE_TTL_SECONDS", "JOBS_MAX_GLOBAL_CONCURRENCY",
            "JOBS_REAPER_INTERVAL_SECONDS", "JOBS_SCHEDULE_POLL_INTERVAL_SECONDS",
            "JOBS_REAPER_RETRY_DELAY_MS",
        ]),
        value in prop_oneof![any::<u64>().prop_map(|n| n.to_string()), hostile_text()],
    ) {
        match JobsConfig::from_lookup(|variable| (variable == name).then(|| value.clone())) {
            Ok(config) => {
                prop_assert!(config.validate().is_ok(), "{:?}", config);
                prop_assert!(WorkerConfig::from_jobs_config(&config).validate().is_ok());
            }
            Err(err) => {
                prop_assert_eq!(err.code(), "config.invalid_env_var");
                prop_assert!(err.to_string().contains(name));
            }
        }
    }

    #[test]
    fn hand_built_configs_validate_or_name_the_field(
        millis in prop::array::uniform5(prop_oneof![any::<u64>(), 0_u64..100_000]),
        counts in prop::array::uniform2(any::<u32>()),
    ) {
        let config = JobsConfig {
            poll_interval: Duration::from_millis(millis[0]),
            lease_ttl: Duration::from_millis(millis[1]),
            reaper_interval: Duration::from_millis(millis[2]),
            schedule_poll_interval: Duration::from_millis(millis[3]),
            reaper_retry_delay: Duration::from_millis(millis[4]),
            claim_batch_size: counts[0],
            max_global_concurrency: counts[1],
            ..JobsConfig::default()
        };
        match config.validate() {
            Ok(()) => prop_assert!(WorkerConfig::from_jobs_config(&config).validate().is_ok()),
            Err(err) => prop_assert_eq!(err.code(), "config.invalid_field"),
        }
        prop_assert!(config.clone().clamped().validate().is_ok());
    }

    #[test]
    fn workflow_builders_refuse_bad_shapes_with_workflow_codes(
        keys in prop::collection::vec(hostile_text(), 1..6),
        edges in prop::collection::vec((0_usize..6, 0_usize..6), 0..8),
        payload in hostile_json(),
    ) {
        let meta = json!({});
        let mut builder = Ok(WorkflowDagBuilder::new("prop.flow", &meta));
        for key in &keys {
            builder = builder.and_then(|b| b.job(key, "prop.step", &payload));
        }
        for (from, to) in &edges {
            let (Some(step), Some(prerequisite)) = (keys.get(*from), keys.get(*to)) else {
                continue;
            };
            builder = builder.and_then(|b| b.after_success(step, [prerequisite.as_str()]));
        }
        if let Err(err) = builder.and_then(WorkflowDagBuilder::build) {
            let code = err.code();
            prop_assert!(
                code.starts_with("workflow.") || code.starts_with("job."),
                "{code}"
            );
        }
    }
}

/// Draws `cases` values of `strategy` (the database tests run them one after the other on
/// one database; a failure prints the value).
fn samples<S: Strategy>(strategy: S, cases: usize) -> Vec<S::Value> {
    let mut runner = TestRunner::deterministic();
    (0..cases)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

/// One enqueue request's inputs.
#[derive(Debug, Clone)]
struct EnqueueInput {
    job_type: String,
    payload: Value,
    key: Option<String>,
    run_at: Option<i64>,
    delay_ms: Option<u64>,
    max_attempts: Option<i32>,
    timeout: Option<i32>,
    priority: Option<i32>,
}

fn enqueue_inputs() -> impl Strategy<Value = EnqueueInput> {
    (
        prop_oneof![3 => Just("prop.job".to_owned()), 1 => hostile_text()],
        hostile_json(),
        prop::option::of(hostile_text()),
        prop::option::of(prop_oneof![
            any::<i64>(),
            -10_000_000_000_i64..400_000_000_000
        ]),
        prop::option::of(prop_oneof![any::<u64>(), 0_u64..10_000]),
        prop::option::of(any::<i32>()),
        prop::option::of(any::<i32>()),
        prop::option::of(any::<i32>()),
    )
        .prop_map(
            |(job_type, payload, key, run_at, delay_ms, max_attempts, timeout, priority)| {
                EnqueueInput {
                    job_type,
                    payload,
                    key,
                    run_at,
                    delay_ms,
                    max_attempts,
                    timeout,
                    priority,
                }
            },
        )
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn any_enqueue_is_stored_as_sent_or_refused_with_a_validation_code(pool: PgPool) {
    define(&pool, "prop.job", DefinitionOpts::default()).await;
    let mut accepted = 0;
    for input in samples(enqueue_inputs(), 300) {
        let mut request = JobEnqueue::new(input.job_type.as_str(), &input.payload);
        if let Some(key) = &input.key {
            request = request.idempotency_key(key);
        }
        if let Some(seconds) = input.run_at {
            if let Some(at) = DateTime::<Utc>::from_timestamp(seconds, 0) {
                request = request.run_at(at);
            }
        } else if let Some(ms) = input.delay_ms {
            request = request.delay(Duration::from_millis(ms));
        }
        request.max_attempts = input.max_attempts;
        request.timeout_seconds = input.timeout;
        request.priority = input.priority;
        match enqueue_job(&pool, &request).await {
            Ok(job) => {
                accepted += 1;
                let stored = get_job_by_id(&pool, job.id, TenantScope::Admin)
                    .await
                    .unwrap()
                    .unwrap();
                if job.created {
                    assert_eq!(stored.payload, input.payload, "{input:?}");
                }
            }
            Err(err) => {
                let mut allowed = ENQUEUE_CODES.to_vec();
                allowed.push("job.idempotency_conflict");
                assert_refusal(&err, &allowed);
            }
        }
    }
    assert!(accepted > 0, "no sample was accepted");
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn any_definition_or_schedule_is_stored_or_refused_with_a_validation_code(pool: PgPool) {
    let definitions = samples(
        (
            hostile_text(),
            any::<i32>(),
            any::<i32>(),
            prop_oneof![any::<i64>(), 1_i64..100_000],
            prop_oneof![any::<i64>(), 1_i64..100_000_000],
        ),
        150,
    );
    for (job_type, attempts, timeout, base, cap) in definitions {
        let upsert = JobDefinitionUpsert::new(job_type.as_str())
            .max_attempts(attempts)
            .timeout_seconds(timeout)
            .retry_delays_ms(base, cap);
        if let Err(err) = upsert_job_definition(&pool, &upsert).await {
            assert_refusal(
                &err,
                &[
                    "job.invalid_job_type",
                    "job_definition.invalid_max_attempts",
                    "job_definition.invalid_timeout",
                    "job_definition.invalid_retry_delay",
                ],
            );
        }
    }
    define(&pool, "prop.scheduled", DefinitionOpts::default()).await;
    let schedules = samples(
        (
            hostile_text(),
            prop_oneof![hostile_text(), Just("0 */5 * * * *".to_owned())],
            hostile_json(),
            any::<i32>(),
            prop::option::of(any::<i64>()),
        ),
        150,
    );
    for (name, cron, payload, jitter, first) in schedules {
        let mut upsert = job_schedule(&name, "prop.scheduled", &cron)
            .payload_template(&payload)
            .max_jitter_seconds(jitter);
        if let Some(at) = first.and_then(|seconds| DateTime::<Utc>::from_timestamp(seconds, 0)) {
            upsert = upsert.next_fire_at(at);
        }
        if let Err(err) = upsert_job_schedule(&pool, &upsert).await {
            assert_refusal(
                &err,
                &[
                    "job_schedule.invalid_name",
                    "job_schedule.invalid_cron",
                    "job_schedule.invalid_jitter",
                    "job_schedule.invalid_payload",
                    "job_schedule.invalid_next_fire_at",
                ],
            );
        }
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn any_workflow_run_is_stored_or_refused_with_a_validation_code(pool: PgPool) {
    define(&pool, "prop.step", DefinitionOpts::default()).await;
    let runs = samples(
        (
            // Mostly names the naming rule accepts, so that runs get as far as the database.
            prop::collection::vec(
                prop_oneof![3 => "[a-z][a-z0-9._-]{0,15}", 1 => hostile_text()],
                1..4,
            ),
            hostile_json(),
            hostile_json(),
            prop::option::of(hostile_text()),
        ),
        150,
    );
    let mut accepted = BTreeSet::new();
    for (keys, payload, metadata, idempotency_key) in runs {
        let mut builder = Ok(WorkflowDagBuilder::new("prop.flow", &metadata));
        for key in &keys {
            builder = builder.and_then(|b| b.job(key, "prop.step", &payload));
        }
        if let Some(key) = &idempotency_key {
            builder = builder.map(|b| b.idempotency_key(key));
        }
        let Ok(run) = builder.and_then(WorkflowDagBuilder::build) else {
            continue;
        };
        match enqueue_workflow_run(&pool, &run).await {
            Ok(enqueued) => {
                accepted.insert(enqueued.id);
            }
            Err(err) => assert_refusal(
                &err,
                &[
                    "job.invalid_payload",
                    "job.payload_too_deep",
                    "workflow.invalid_metadata",
                    "workflow.invalid_idempotency_key",
                    "workflow.idempotency_conflict",
                ],
            ),
        }
    }
    assert!(!accepted.is_empty(), "no sample was accepted");
}
