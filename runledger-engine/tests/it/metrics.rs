//! Metrics through the `metrics` facade: a recorder installed for the whole test binary keeps
//! every value it is given. Each test uses job types of its own, so that tests running at the
//! same time never touch each other's series.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use runledger_engine::core::jobs::{JobCompletion, JobFailure};
use runledger_engine::core::metrics::{
    CLAIM_BATCH_SIZE, JOB_DURATION_SECONDS, JOB_PICKUP_LATENCY_SECONDS, JOBS_DEAD_LETTERED,
    JOBS_ENQUEUED, JOBS_FAILED, JOBS_RETRIED, JOBS_STARTED, JOBS_SUCCEEDED, QUEUE_DEPTH,
};
use runledger_engine::runtime::observer::JobLifecycleObservers;
use runledger_engine::runtime::queue_depth::{QueueDepthConfig, QueueDepthSampler};
use runledger_engine::runtime::reaper::{Reaper, ReaperConfig};
use runledger_engine::runtime::registry::JobRegistry;
use runledger_engine::runtime::worker::{WorkerConfig, WorkerLoop};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{
    DefinitionOpts, claim, define, expire_lease, fast_config, handler, insert_job, make_due,
};

/// Every series the recorder was given, by `name{label=value,...}` (labels sorted).
#[derive(Clone, Default)]
struct TestRecorder {
    counters: Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>,
    gauges: Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>,
    histograms: Arc<Mutex<HashMap<String, Arc<Samples>>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn series(key: &Key) -> String {
    let labels: BTreeMap<&str, &str> = key.labels().map(|l| (l.key(), l.value())).collect();
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

fn handle<T: Default>(map: &Mutex<HashMap<String, Arc<T>>>, key: &Key) -> Arc<T> {
    Arc::clone(map.lock().unwrap().entry(series(key)).or_default())
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(handle(&self.counters, key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(handle(&self.gauges, key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(handle(&self.histograms, key))
    }
}

impl TestRecorder {
    fn counter(&self, series: &str) -> u64 {
        self.counters
            .lock()
            .unwrap()
            .get(series)
            .map_or(0, |value| value.load(Ordering::Relaxed))
    }

    fn gauge(&self, series: &str) -> Option<f64> {
        let gauges = self.gauges.lock().unwrap();
        gauges
            .get(series)
            .map(|value| f64::from_bits(value.load(Ordering::Relaxed)))
    }

    fn samples(&self, series: &str) -> Vec<f64> {
        self.histograms
            .lock()
            .unwrap()
            .get(series)
            .map_or_else(Vec::new, |samples| samples.0.lock().unwrap().clone())
    }
}

/// The recorder of this test binary, installed on first use (before any worker of the
/// calling test takes its handles).
fn recorder() -> &'static TestRecorder {
    static RECORDER: OnceLock<TestRecorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = TestRecorder::default();
        metrics::set_global_recorder(recorder.clone()).expect("no other recorder is installed");
        runledger_engine::core::metrics::describe_metrics();
        recorder
    })
}

/// The key of a metric of a job type in its queue (`metrics.doomed` is in `critical`).
fn of(name: &str, job_type: &str) -> String {
    format!("{name}{{job_type={job_type},queue={}}}", queue_of(job_type))
}

fn queue_of(job_type: &str) -> &'static str {
    if job_type == "metrics.doomed" {
        "critical"
    } else {
        "default"
    }
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_worker_counts_successes_retries_and_dead_letters_by_job_type_and_queue(pool: PgPool) {
    let recorder = recorder();
    let quick_retry = || DefinitionOpts {
        retry_base_delay_ms: 1,
        retry_max_delay_ms: 1,
        ..DefinitionOpts::default()
    };
    define(&pool, "metrics.ok", DefinitionOpts::default()).await;
    define(&pool, "metrics.flaky", quick_retry()).await;
    define(&pool, "metrics.doomed", DefinitionOpts::default()).await;
    sqlx::query(
        "UPDATE runledger.job_definitions SET queue = 'critical' WHERE job_type = 'metrics.doomed'",
    )
    .execute(&pool)
    .await
    .unwrap();
    insert_job(&pool, "metrics.ok", json!({})).await;
    insert_job(&pool, "metrics.ok", json!({})).await;
    let flaky = insert_job(&pool, "metrics.flaky", json!({})).await;
    insert_job(&pool, "metrics.doomed", json!({})).await;

    let mut registry = JobRegistry::new();
    registry
        .register(handler("metrics.ok", |_, _| async {
            Ok(JobCompletion::success())
        }))
        .unwrap();
    registry
        .register(handler("metrics.flaky", |ctx, _| async move {
            if ctx.attempt == 1 {
                Err(JobFailure::retryable("test.flaky", "first attempt fails"))
            } else {
                Ok(JobCompletion::success())
            }
        }))
        .unwrap();
    registry
        .register(handler("metrics.doomed", |_, _| async {
            Err(JobFailure::terminal("test.doomed", "never works"))
        }))
        .unwrap();
    let worker = WorkerLoop::new(
        pool.clone(),
        Arc::new(registry),
        WorkerConfig::from_jobs_config(&fast_config("w-metrics")),
        JobLifecycleObservers::new(),
    )
    .unwrap();

    let first = worker.run_once().await.unwrap();
    assert_eq!((first.claimed, first.succeeded, first.failed), (4, 2, 2));
    make_due(&pool, flaky).await;
    let second = worker.run_once().await.unwrap();
    assert_eq!((second.claimed, second.succeeded), (1, 1));

    let count = |name, job_type| recorder.counter(&of(name, job_type));
    assert_eq!(count(JOBS_ENQUEUED, "metrics.ok"), 2);
    assert_eq!(count(JOBS_ENQUEUED, "metrics.flaky"), 1);
    assert_eq!(count(JOBS_STARTED, "metrics.ok"), 2);
    assert_eq!(count(JOBS_STARTED, "metrics.flaky"), 2);
    assert_eq!(count(JOBS_STARTED, "metrics.doomed"), 1);
    assert_eq!(count(JOBS_SUCCEEDED, "metrics.ok"), 2);
    assert_eq!(count(JOBS_SUCCEEDED, "metrics.flaky"), 1);
    assert_eq!(count(JOBS_SUCCEEDED, "metrics.doomed"), 0);
    assert_eq!(count(JOBS_FAILED, "metrics.flaky"), 1);
    assert_eq!(count(JOBS_FAILED, "metrics.doomed"), 1);
    assert_eq!(count(JOBS_RETRIED, "metrics.flaky"), 1);
    assert_eq!(count(JOBS_RETRIED, "metrics.doomed"), 0);
    assert_eq!(count(JOBS_DEAD_LETTERED, "metrics.doomed"), 1);
    assert_eq!(count(JOBS_DEAD_LETTERED, "metrics.flaky"), 0);

    let durations = |job_type, outcome| {
        recorder.samples(&format!(
            "{JOB_DURATION_SECONDS}{{job_type={job_type},outcome={outcome},queue={}}}",
            queue_of(job_type)
        ))
    };
    assert_eq!(durations("metrics.ok", "succeeded").len(), 2);
    assert_eq!(durations("metrics.flaky", "failed").len(), 1);
    assert_eq!(durations("metrics.flaky", "succeeded").len(), 1);
    assert_eq!(durations("metrics.doomed", "failed").len(), 1);
    let pickups = recorder.samples(&of(JOB_PICKUP_LATENCY_SECONDS, "metrics.ok"));
    assert_eq!(pickups.len(), 2);
    assert!(pickups.iter().all(|seconds| (0.0..60.0).contains(seconds)));
    // Other tests claim too: this one only knows that its claims of 4 and 1 were recorded.
    let batches = recorder.samples(&format!("{CLAIM_BATCH_SIZE}{{}}"));
    assert!(batches.contains(&4.0) && batches.contains(&1.0));
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_reaper_counts_the_leases_it_retries_and_dead_letters(pool: PgPool) {
    let recorder = recorder();
    define(&pool, "metrics.lost", DefinitionOpts::default()).await;
    define(
        &pool,
        "metrics.lost_once",
        DefinitionOpts {
            max_attempts: 1,
            ..DefinitionOpts::default()
        },
    )
    .await;
    insert_job(&pool, "metrics.lost", json!({})).await;
    insert_job(&pool, "metrics.lost_once", json!({})).await;
    for job in claim(&pool, "w-gone", 10).await {
        expire_lease(&pool, job.id).await;
    }
    let reaper = Reaper::new(
        pool.clone(),
        ReaperConfig::from_jobs_config(&fast_config("w-reaper")),
        JobLifecycleObservers::new(),
    )
    .unwrap();

    reaper.run_once().await.unwrap();

    assert_eq!(recorder.counter(&of(JOBS_FAILED, "metrics.lost")), 1);
    assert_eq!(recorder.counter(&of(JOBS_FAILED, "metrics.lost_once")), 1);
    assert_eq!(recorder.counter(&of(JOBS_RETRIED, "metrics.lost")), 1);
    assert_eq!(
        recorder.counter(&of(JOBS_DEAD_LETTERED, "metrics.lost_once")),
        1
    );
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn the_queue_depth_gauge_counts_ready_scheduled_and_running_jobs_and_returns_to_zero(
    pool: PgPool,
) {
    let recorder = recorder();
    define(&pool, "metrics.depth", DefinitionOpts::default()).await;
    for _ in 0..3 {
        insert_job(&pool, "metrics.depth", json!({})).await;
    }
    let later = serde_json::json!({});
    runledger_engine::postgres::jobs::enqueue_job(
        &pool,
        &runledger_engine::postgres::jobs::JobEnqueue::new("metrics.depth", &later)
            .delay(std::time::Duration::from_secs(3_600)),
    )
    .await
    .unwrap();
    let leased = claim(&pool, "w-depth", 1).await;
    let config = QueueDepthConfig::from_jobs_config(&fast_config("w-depth"));
    let sampler = QueueDepthSampler::new(pool.clone(), config).unwrap();
    let depth = |state| {
        recorder.gauge(&format!(
            "{QUEUE_DEPTH}{{job_type=metrics.depth,queue=default,state={state}}}"
        ))
    };

    let sample = sampler.run_once().await.unwrap();
    assert_eq!(sample.len(), 1);
    assert_eq!(
        (depth("ready"), depth("scheduled"), depth("running")),
        (Some(2.0), Some(1.0), Some(1.0))
    );

    assert_eq!(leased.len(), 1);
    sqlx::query("DELETE FROM runledger.job_queue")
        .execute(&pool)
        .await
        .unwrap();
    age_queue_depth_sample(&pool).await;
    assert!(sampler.run_once().await.unwrap().is_empty());
    assert_eq!(
        (depth("ready"), depth("scheduled"), depth("running")),
        (Some(0.0), Some(0.0), Some(0.0))
    );
}

/// Makes the stored queue depth count an hour old, as if the sampling interval had passed.
async fn age_queue_depth_sample(pool: &PgPool) {
    sqlx::query(
        "UPDATE runledger.queue_depth_sample SET sampled_at = sampled_at - interval '1 hour'",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn worker_processes_share_one_queue_depth_count_per_interval(pool: PgPool) {
    use runledger_engine::postgres::jobs::{get_queue_depths, sample_queue_depths};

    define(&pool, "metrics.shared_depth", DefinitionOpts::default()).await;
    insert_job(&pool, "metrics.shared_depth", json!({})).await;
    let config = QueueDepthConfig::from_jobs_config(&fast_config("w-shared-depth"));
    // Two samplers on their own pools: two worker processes of one database.
    let first = QueueDepthSampler::new(pool.clone(), config.clone()).unwrap();
    let other_pool = PgPool::connect_with(pool.connect_options().as_ref().clone())
        .await
        .unwrap();
    let second = QueueDepthSampler::new(other_pool, config).unwrap();
    let ready = |sample: &[runledger_engine::postgres::jobs::QueueDepth]| {
        sample.iter().map(|depth| depth.ready).sum::<i64>()
    };

    assert_eq!(ready(&first.run_once().await.unwrap()), 1);
    insert_job(&pool, "metrics.shared_depth", json!({})).await;
    // Within the interval the second process reads the first one's count instead of counting.
    assert_eq!(ready(&second.run_once().await.unwrap()), 1);
    assert_eq!(ready(&get_queue_depths(&pool).await.unwrap()), 2);

    // Once the count is older than the interval, whichever process samples next counts again.
    age_queue_depth_sample(&pool).await;
    assert_eq!(ready(&second.run_once().await.unwrap()), 2);
    assert_eq!(ready(&first.run_once().await.unwrap()), 2);

    // Any maximum age is valid; one beyond the database's time range reads the stored count.
    insert_job(&pool, "metrics.shared_depth", json!({})).await;
    let forever = sample_queue_depths(&pool, std::time::Duration::MAX)
        .await
        .unwrap();
    assert_eq!(ready(&forever), 2);
}

#[sqlx::test(migrator = "runledger_engine::postgres::MIGRATOR")]
async fn a_process_sampling_while_another_counts_reads_the_stored_count_without_waiting(
    pool: PgPool,
) {
    define(&pool, "metrics.counting_depth", DefinitionOpts::default()).await;
    insert_job(&pool, "metrics.counting_depth", json!({})).await;
    let config = QueueDepthConfig::from_jobs_config(&fast_config("w-counting-depth"));
    let sampler = QueueDepthSampler::new(pool.clone(), config).unwrap();
    assert_eq!(sampler.run_once().await.unwrap()[0].ready, 1);
    insert_job(&pool, "metrics.counting_depth", json!({})).await;
    age_queue_depth_sample(&pool).await;

    // Another process is counting: it holds the sample's lock in its open transaction.
    let mut counting = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('runledger.queue_depth', 0))")
        .execute(&mut *counting)
        .await
        .unwrap();
    let sample = tokio::time::timeout(std::time::Duration::from_secs(5), sampler.run_once())
        .await
        .expect("the sample does not wait for the process that counts")
        .unwrap();
    assert_eq!(sample[0].ready, 1, "the stored count, not a second count");
    counting.rollback().await.unwrap();

    assert_eq!(sampler.run_once().await.unwrap()[0].ready, 2);
}
