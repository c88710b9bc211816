//! Admin-read timing: seeds a database with 100,000 jobs of 10 types (every status, with
//! attempts, dead letters and logs), 1,000 workflow runs and one run of a 100,000-child fan-out,
//! then times the reads behind each
//! `runledger` dashboard screen and prints `EXPLAIN (ANALYZE, BUFFERS)` of the dashboard query.
//!
//! ```sh
//! cargo run --release -p runledger-bench --bin admin-reads -- --jobs 100000 --runs 1000 \
//!     --wide-run 100000
//! ```
//!
//! It creates (and drops at the start of each run) the database `runledger_admin_reads` on the
//! server of `DATABASE_URL`. Reads run on connections configured like the TUI's
//! (`plan_cache_mode = force_custom_plan`, read-only) and, for comparison, on default ones.

#![allow(clippy::print_stdout)]

use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

use runledger_bench::{BoxError, database_url, fresh_database, quantiles};
use runledger_engine::core::jobs::{
    JobId, JobStatus, JobType, StepKey, WorkflowDagBuilder, WorkflowRunEnqueueBuilder,
    WorkflowRunId, WorkflowRunStatus, WorkflowStepEnqueueBuilder, WorkflowType,
};
use runledger_engine::postgres::jobs::{
    FanOutFill, JobDefinitionUpsert, JobListFilter, WorkflowRunCountFilter, WorkflowRunHandleScope,
    WorkflowRunListFilter, count_jobs, count_workflow_runs, enqueue_workflow_run, fill_fan_out,
    get_job_detail, get_job_metrics, get_workflow_run, list_job_definitions,
    list_job_runtime_configs, list_job_schedules, list_jobs, list_workflow_run_step_counts,
    list_workflow_runs, list_workflow_steps_page, upsert_job_definition,
};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

const DB: &str = "runledger_admin_reads";
const TYPES: usize = 10;
const ROUNDS: usize = 7;
const LIMIT: i64 = 200;

/// Times the admin reads behind the TUI over a large seeded history.
#[derive(clap::Parser)]
struct Options {
    /// Jobs to seed.
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    /// Workflow runs to seed.
    #[arg(long, default_value_t = 1_000)]
    runs: usize,
    /// Children of the fan-out of one more run, whose detail is timed apart (0 skips it).
    #[arg(long, default_value_t = 100_000)]
    wide_run: usize,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Options {
        jobs,
        runs,
        wide_run,
    } = clap::Parser::parse();
    let db_url = fresh_database(&database_url(), DB).await?;
    let writer = PgPoolOptions::new()
        .max_connections(8)
        .connect(&db_url)
        .await?;
    runledger_engine::postgres::migrate(&writer).await?;

    let started = Instant::now();
    seed(&writer, jobs, runs).await?;
    println!(
        "seeded {jobs} jobs of {TYPES} types and {runs} workflow runs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (total, runs_total, logs): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM runledger.job_queue), (SELECT count(*) FROM runledger.workflow_runs),
                (SELECT count(*) FROM runledger.job_logs)",
    )
    .fetch_one(&writer)
    .await?;
    println!("rows: job_queue {total}, workflow_runs {runs_total}, job_logs {logs}\n");
    let wide = if wide_run > 0 {
        let started = Instant::now();
        let run = seed_wide_run(&writer, wide_run).await?;
        println!(
            "seeded a run of {} steps in {:.1} s\n",
            wide_run + 3,
            started.elapsed().as_secs_f64()
        );
        Some(run)
    } else {
        None
    };

    let tui = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(PgConnectOptions::from_str(&db_url)?.options([
            ("default_transaction_read_only", "on"),
            ("plan_cache_mode", "force_custom_plan"),
        ]))
        .await?;
    println!("== reads per screen, TUI connection settings (median / max of {ROUNDS}) ==");
    time_screens(&tui, wide).await?;
    println!("\n== same reads, default connection settings (generic plans allowed) ==");
    time_screens(&writer, wide).await?;

    explain_dashboard(&tui, "as seeded: 46 % of the jobs are pending or leased").await?;

    // A history-heavy queue, the usual shape in production: most rows finished long ago.
    sqlx::query(
        "UPDATE runledger.job_queue
         SET status = 'SUCCEEDED', worker_id = NULL, lease_expires_at = NULL,
             leased_at = coalesce(leased_at, created_at), started_at = coalesce(started_at, created_at),
             finished_at = now() - interval '3 days', next_run_at = created_at
         WHERE status IN ('PENDING', 'LEASED') AND right(id::text, 2) <> '00'",
    )
    .execute(&writer)
    .await?;
    sqlx::query("VACUUM ANALYZE").execute(&writer).await?;
    println!("\n== history-heavy: all but ~0.4 % of the backlog moved to old successes ==");
    timed("dashboard, history-heavy", || get_job_metrics(&tui, None)).await?;
    explain_dashboard(&tui, "history-heavy").await?;
    writer.close().await;
    tui.close().await;
    Ok(())
}

async fn explain_dashboard(pool: &PgPool, label: &str) -> Result<(), BoxError> {
    println!(
        "\n== EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM runledger.job_metrics(NULL) [{label}] =="
    );
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM runledger.job_metrics(NULL) ORDER BY job_type",
    )
    .fetch_all(pool)
    .await?;
    for line in &plan {
        println!("{line}");
    }
    let scans: Vec<&str> = plan
        .iter()
        .filter(|l| l.contains(" Scan ") || l.contains("Scan using") || l.contains("Scan on"))
        .map(|l| l.trim().split("  (").next().unwrap_or_default())
        .collect();
    println!("\nsummary [{label}]: scans = {scans:?}");
    Ok(())
}

/// Jobs in every status, spread over 30 days of history with the last day busiest: 40 %
/// succeeded (half within 24 h), 10 % dead-lettered (with dead-letter rows), 5 % canceled,
/// 35 % pending (a fifth delayed), 10 % leased (a tenth with expired leases). A quarter
/// belongs to one of 20 organizations; 1 % of the jobs carry 5 log lines each.
async fn seed(pool: &PgPool, jobs: usize, runs: usize) -> Result<(), BoxError> {
    for t in 0..TYPES {
        upsert_job_definition(pool, &JobDefinitionUpsert::new(format!("bench.type_{t}"))).await?;
    }
    upsert_job_definition(pool, &JobDefinitionUpsert::new("bench.step")).await?;
    sqlx::query(
        r#"
        INSERT INTO runledger.job_queue (
            id, job_type, organization_id, status, payload, attempt, max_attempts, timeout_seconds,
            next_run_at, worker_id, lease_expires_at, leased_at, started_at, last_error_code,
            last_error_message, created_at, updated_at, finished_at)
        SELECT id, job_type, org, status, jsonb_build_object('n', n), attempt, 5, 300,
               CASE WHEN status = 'PENDING' AND n % 5 = 0 THEN now() + interval '1 hour' ELSE created_at END,
               CASE WHEN status = 'LEASED' THEN 'bench-worker' END,
               CASE WHEN status = 'LEASED' THEN now() + CASE WHEN n % 10 = 0 THEN interval '-1 minute' ELSE interval '5 minutes' END END,
               CASE WHEN status IN ('LEASED', 'SUCCEEDED', 'DEAD_LETTERED') THEN created_at + interval '1 second' END,
               CASE WHEN status IN ('SUCCEEDED', 'DEAD_LETTERED') THEN created_at + interval '1 second' END,
               CASE WHEN status = 'DEAD_LETTERED' THEN 'bench.failed_' || (n % 3) END,
               CASE WHEN status = 'DEAD_LETTERED' THEN 'gave up' END,
               created_at, created_at,
               CASE WHEN status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
                    THEN created_at + interval '1 second' + (n % 997) * interval '1 millisecond' END
        FROM (
            SELECT n,
                   'bench.type_' || (n % 10) AS job_type,
                   CASE WHEN n % 4 = 0 THEN ('00000000-0000-0000-0000-' || lpad((n % 20)::text, 12, '0'))::uuid END AS org,
                   CASE WHEN n % 100 < 40 THEN 'SUCCEEDED'
                        WHEN n % 100 < 50 THEN 'DEAD_LETTERED'
                        WHEN n % 100 < 55 THEN 'CANCELED'
                        WHEN n % 100 < 90 THEN 'PENDING'
                        ELSE 'LEASED' END AS status,
                   CASE WHEN n % 100 < 55 OR n % 100 >= 90 THEN 1 ELSE 0 END AS attempt,
                   now() - CASE WHEN n % 2 = 0 THEN (n % 86000) * interval '1 second'
                                ELSE (n % 30) * interval '1 day' + interval '1 day' END AS created_at,
                   runledger.uuidv7() AS id
            FROM generate_series(1, $1) AS n
        ) s
        ORDER BY s.created_at
        "#,
    )
    .bind(i64::try_from(jobs)?)
    .execute(pool)
    .await?;
    sqlx::query(
        r#"
        INSERT INTO runledger.job_attempts (job_id, attempt, worker_id, outcome, failure_kind,
                                            error_code, error_message, leased_at, started_at, finished_at)
        SELECT id, 1, 'bench-worker',
               CASE status WHEN 'SUCCEEDED' THEN 'SUCCEEDED' ELSE 'FAILED' END,
               CASE status WHEN 'DEAD_LETTERED' THEN 'TERMINAL' END,
               last_error_code, last_error_message, leased_at, started_at, finished_at
        FROM runledger.job_queue WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED')
        "#,
    )
    .execute(pool)
    .await?;
    sqlx::query(
        r#"
        INSERT INTO runledger.job_dead_letters (job_id, job_type, organization_id, payload, attempt,
                                                failure_kind, error_code, error_message, dead_lettered_at)
        SELECT id, job_type, organization_id, payload, 1, 'TERMINAL', last_error_code,
               last_error_message, finished_at
        FROM runledger.job_queue WHERE status = 'DEAD_LETTERED'
        "#,
    )
    .execute(pool)
    .await?;
    sqlx::query(
        r#"
        INSERT INTO runledger.job_logs (job_id, attempt, level, message, created_at)
        SELECT q.id, 1, 'INFO', 'step ' || g, q.created_at
        FROM (SELECT id, created_at FROM runledger.job_queue ORDER BY id LIMIT $1) q,
             generate_series(1, 5) g
        "#,
    )
    .bind(i64::try_from(jobs / 100)?)
    .execute(pool)
    .await?;

    let meta = json!({"source": "bench"});
    let payload = json!({});
    let mut pending = Vec::new();
    for r in 0..runs {
        let pool = pool.clone();
        let (meta, payload) = (meta.clone(), payload.clone());
        pending.push(tokio::spawn(async move {
            let workflow_type = format!("bench.flow_{}", r % 5);
            let run = WorkflowDagBuilder::new(&workflow_type, &meta)
                .job("fetch", "bench.step", &payload)?
                .job("parse", "bench.step", &payload)?
                .after_success("parse", ["fetch"])?
                .job("score", "bench.step", &payload)?
                .after_success("score", ["fetch"])?
                .job("store", "bench.step", &payload)?
                .after_success("store", ["parse", "score"])?
                .build()?;
            enqueue_workflow_run(&pool, &run).await?;
            Ok::<_, BoxError>(())
        }));
        if pending.len() == 16 {
            for task in pending.drain(..) {
                task.await??;
            }
        }
    }
    for task in pending {
        task.await??;
    }
    sqlx::query("VACUUM ANALYZE").execute(pool).await?;
    Ok(())
}

async fn timed<F, Fut, T>(name: &str, mut read: F) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, runledger_engine::postgres::Error>>,
{
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        read().await?;
        samples.push(started.elapsed());
    }
    let [median, max] = quantiles(samples, [0.5, 1.0]);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("{name:<44} {:>8.1} ms {:>8.1} ms", ms(median), ms(max));
    Ok(())
}

/// A run `plan -> kids (a fan-out of `children`) -> join`, its fan-out filled, nothing run.
async fn seed_wide_run(pool: &PgPool, children: usize) -> Result<WorkflowRunId, BoxError> {
    let (meta, payload) = (json!({}), json!({}));
    let job = |key: &'static str| {
        WorkflowStepEnqueueBuilder::new(StepKey::new(key), JobType::new("bench.type_0"), &payload)
    };
    let run = WorkflowRunEnqueueBuilder::new(WorkflowType::new("bench.wide"), &meta)
        .step(job("plan").build())
        .step(
            WorkflowStepEnqueueBuilder::new_fan_out(StepKey::new("kids"))
                .depends_on_success(StepKey::new("plan"))
                .build(),
        )
        .step(job("join").depends_on_success(StepKey::new("kids")).build())
        .build()?;
    let run = enqueue_workflow_run(pool, &run).await?.id;
    let fill = FanOutFill {
        workflow_run_id: run,
        organization_id: None,
        filled_by: StepKey::new("plan"),
        fan_out: StepKey::new("kids"),
        job_type: JobType::new("bench.type_0"),
    };
    let mut kids = (0..children).map(|n| Ok(json!({ "n": n })));
    fill_fan_out(pool, &fill, &mut kids).await?;
    sqlx::query("VACUUM ANALYZE").execute(pool).await?;
    Ok(run)
}

/// What the TUI reads for a run's detail screen: the run, its step counts and a page of steps.
async fn workflow_detail(
    pool: &PgPool,
    run: WorkflowRunId,
    after: Option<runledger_engine::core::jobs::WorkflowStepId>,
) -> Result<usize, runledger_engine::postgres::Error> {
    get_workflow_run(pool, run, WorkflowRunHandleScope::Admin).await?;
    list_workflow_run_step_counts(pool, &[run]).await?;
    let steps =
        list_workflow_steps_page(pool, run, WorkflowRunHandleScope::Admin, after, LIMIT).await?;
    Ok(steps.len())
}

async fn time_screens(pool: &PgPool, wide: Option<WorkflowRunId>) -> Result<(), BoxError> {
    let org = Some(Uuid::from_u128(4));
    timed("dashboard (metrics + 3 run counts)", || async {
        get_job_metrics(pool, None).await?;
        for status in [
            WorkflowRunStatus::Running,
            WorkflowRunStatus::WaitingForExternal,
            WorkflowRunStatus::CompletedWithErrors,
        ] {
            let filter = WorkflowRunCountFilter {
                status: Some(status),
                ..WorkflowRunCountFilter::default()
            };
            count_workflow_runs(pool, &filter).await?;
        }
        Ok(())
    })
    .await?;
    timed("dashboard, one organization", || get_job_metrics(pool, org)).await?;
    let queue = |filter: JobListFilter| async move {
        let page = list_jobs(pool, &filter).await?;
        count_jobs(pool, &filter, Some(10_000)).await?;
        Ok(page)
    };
    timed("queue, no filter", || {
        queue(JobListFilter::new().limit(LIMIT))
    })
    .await?;
    timed("queue, status DEAD_LETTERED", || {
        queue(
            JobListFilter::new()
                .status(JobStatus::DeadLettered)
                .limit(LIMIT),
        )
    })
    .await?;
    timed("queue, status LEASED + type contains", || {
        queue(
            JobListFilter::new()
                .status(JobStatus::Leased)
                .job_type_contains("TYPE_3")
                .limit(LIMIT),
        )
    })
    .await?;
    timed("queue, one organization", || {
        let mut filter = JobListFilter::new().limit(LIMIT);
        filter.organization_id = org;
        queue(filter)
    })
    .await?;
    timed("queue, search by error code", || {
        queue(JobListFilter::new().search("bench.failed_1").limit(LIMIT))
    })
    .await?;
    let first = list_jobs(pool, &JobListFilter::new().limit(LIMIT)).await?;
    let cursor = first.next_cursor.ok_or("no second page")?;
    timed("queue, page 2 (keyset)", || {
        queue(JobListFilter::new().after(cursor).limit(LIMIT))
    })
    .await?;
    let logged: uuid::Uuid =
        sqlx::query_scalar("SELECT job_id FROM runledger.job_logs ORDER BY id DESC LIMIT 1")
            .fetch_one(pool)
            .await?;
    timed("job detail (attempts, events, dead letters, logs)", || {
        get_job_detail(pool, JobId(logged), WorkflowRunHandleScope::Admin)
    })
    .await?;
    timed("workflows (runs + count + step progress)", || async {
        let runs = list_workflow_runs(
            pool,
            &WorkflowRunListFilter {
                limit: LIMIT,
                ..WorkflowRunListFilter::default()
            },
        )
        .await?;
        count_workflow_runs(pool, &WorkflowRunCountFilter::default()).await?;
        let ids: Vec<_> = runs.iter().map(|r| r.id).collect();
        list_workflow_run_step_counts(pool, &ids).await
    })
    .await?;
    let run = list_workflow_runs(pool, &WorkflowRunListFilter::default())
        .await?
        .first()
        .map(|r| r.id)
        .ok_or("no runs")?;
    timed(
        "workflow detail (run + step counts + a page of steps)",
        || workflow_detail(pool, run, None),
    )
    .await?;
    if let Some(wide) = wide {
        timed("workflow detail of the wide run, first page", || {
            workflow_detail(pool, wide, None)
        })
        .await?;
        let page = list_workflow_steps_page(pool, wide, WorkflowRunHandleScope::Admin, None, LIMIT)
            .await?;
        let cursor = page.last().map(|step| step.id);
        timed("workflow detail of the wide run, page 2", || {
            workflow_detail(pool, wide, cursor)
        })
        .await?;
    }
    timed("definitions (+ runtime configs, schedules)", || async {
        list_job_definitions(pool).await?;
        list_job_runtime_configs(pool).await?;
        list_job_schedules(pool).await
    })
    .await?;
    Ok(())
}
