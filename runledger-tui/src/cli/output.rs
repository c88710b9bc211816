//! What the admin commands print: every record as JSON (for `--json`), and the same values as
//! aligned text for people.

use std::io::Write;

use chrono::{DateTime, Utc};
use runledger_engine::postgres::jobs::{
    JobDetail, JobMetrics, JobRecord, JobSchedule, PruneCounts, QueueSettings, WorkflowRunRecord,
    WorkflowRunStepCounts, WorkflowStepRecord,
};
use serde_json::{Value, json};

/// Where results go: JSON documents or text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub(crate) json: bool,
}

impl Output {
    /// Prints `value` as JSON, or `text()` for people.
    pub(crate) fn print(self, value: &Value, text: impl FnOnce() -> String) {
        let rendered = if self.json {
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        } else {
            text()
        };
        let _ = writeln!(std::io::stdout(), "{rendered}");
    }

    /// Reports a failure on stderr: `{"error": {"code", "message"}}` or one line.
    pub(crate) fn fail(self, code: &str, message: &str) {
        let rendered = if self.json {
            json!({ "error": { "code": code, "message": message } }).to_string()
        } else {
            format!("runledger-tui: {code}: {message}")
        };
        let _ = writeln!(std::io::stderr(), "{rendered}");
    }
}

fn time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(
        || "-".to_owned(),
        |at| at.format("%Y-%m-%d %H:%M:%S").to_string(),
    )
}

fn or_dash(value: Option<&str>) -> &str {
    value.unwrap_or("-")
}

/// Rows as columns padded to their widest cell.
pub(crate) fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; N]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut lines = vec![line(header)];
    lines.extend(
        rows.iter()
            .map(|row| line(row.each_ref().map(String::as_str))),
    );
    lines.join("\n")
}

pub(crate) fn job(job: &JobRecord) -> Value {
    json!({
        "id": job.id.to_string(),
        "job_type": job.job_type,
        "status": job.status.as_str(),
        "stage": job.stage.as_str(),
        "run_number": job.run_number,
        "organization_id": job.organization_id,
        "priority": job.priority,
        "attempts_used": job.attempts_used,
        "max_attempts": job.max_attempts,
        "timeout_seconds": job.timeout_seconds,
        "worker_id": job.worker_id,
        "next_run_at": job.next_run_at,
        "lease_expires_at": job.lease_expires_at,
        "idempotency_key": job.idempotency_key,
        "workflow_run_id": job.workflow_run_id.map(|id| id.to_string()),
        "last_error_code": job.last_error_code,
        "last_error_message": job.last_error_message,
        "payload": job.payload,
        "progress": job.progress,
        "output": job.output,
        "checkpoint": job.checkpoint,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    })
}

pub(crate) fn job_row(job: &JobRecord) -> [String; 6] {
    [
        job.id.to_string(),
        job.job_type.clone(),
        job.status.to_string(),
        format!("{}/{}", job.attempts_used, job.max_attempts),
        time(Some(job.created_at)),
        or_dash(job.last_error_code.as_deref()).to_owned(),
    ]
}

pub(crate) const JOB_HEADER: [&str; 6] = ["ID", "TYPE", "STATUS", "ATTEMPTS", "CREATED", "ERROR"];

pub(crate) fn job_detail(detail: &JobDetail) -> Value {
    let mut value = job(&detail.job);
    value["attempts"] = detail
        .attempts
        .iter()
        .map(|a| {
            json!({
                "attempt": a.attempt,
                "worker_id": a.worker_id,
                "outcome": a.outcome.to_string(),
                "failure_kind": a.failure_kind.map(|k| k.to_string()),
                "error_code": a.error_code,
                "error_message": a.error_message,
                "leased_at": a.leased_at,
                "finished_at": a.finished_at,
            })
        })
        .collect();
    value["events"] = detail
        .events
        .iter()
        .map(|e| {
            json!({
                "event_type": e.event_type.to_string(),
                "attempt": e.attempt,
                "details": e.details,
                "created_at": e.created_at,
            })
        })
        .collect();
    value["dead_letters"] = detail
        .dead_letters
        .iter()
        .map(|d| {
            json!({
                "attempt": d.attempt,
                "failure_kind": d.failure_kind.to_string(),
                "error_code": d.error_code,
                "error_message": d.error_message,
                "dead_lettered_at": d.dead_lettered_at,
            })
        })
        .collect();
    value["logs"] = detail
        .logs
        .iter()
        .map(|l| {
            json!({
                "attempt": l.attempt,
                "level": l.level.to_string(),
                "message": l.message,
                "fields": l.fields,
                "created_at": l.created_at,
            })
        })
        .collect();
    value
}

pub(crate) fn job_detail_text(detail: &JobDetail) -> String {
    let job = &detail.job;
    let mut lines = vec![
        format!("{}  {}  {}", job.id, job.job_type, job.status),
        format!(
            "attempts      {} of {}",
            job.attempts_used, job.max_attempts
        ),
        format!("created       {}", time(Some(job.created_at))),
        format!("finished      {}", time(job.finished_at)),
        format!("worker        {}", or_dash(job.worker_id.as_deref())),
        format!(
            "last error    {} {}",
            or_dash(job.last_error_code.as_deref()),
            job.last_error_message.as_deref().unwrap_or("")
        ),
        format!("payload       {}", job.payload),
    ];
    for a in &detail.attempts {
        lines.push(format!(
            "attempt {:<3}   {} {} {} ({})",
            a.attempt,
            a.outcome,
            a.failure_kind.map(|k| k.to_string()).unwrap_or_default(),
            or_dash(a.error_code.as_deref()),
            time(Some(a.finished_at))
        ));
    }
    for e in &detail.events {
        lines.push(format!(
            "event         {} {} ({})",
            e.event_type,
            e.details,
            time(Some(e.created_at))
        ));
    }
    lines.join("\n")
}

pub(crate) fn run(run: &WorkflowRunRecord, counts: Option<&WorkflowRunStepCounts>) -> Value {
    json!({
        "id": run.id.to_string(),
        "workflow_type": run.workflow_type,
        "status": run.status.as_str(),
        "organization_id": run.organization_id,
        "idempotency_key": run.idempotency_key,
        "status_reason": run.status_reason,
        "metadata": run.metadata,
        "result": run.result,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "steps": counts.map(|c| json!({
            "total": c.total, "succeeded": c.succeeded, "failed": c.failed,
            "active": c.active, "waiting": c.waiting,
        })),
    })
}

pub(crate) fn run_row(
    run: &WorkflowRunRecord,
    counts: Option<&WorkflowRunStepCounts>,
) -> [String; 5] {
    [
        run.id.to_string(),
        run.workflow_type.clone(),
        run.status.to_string(),
        counts.map_or_else(
            || "-".to_owned(),
            |c| format!("{}/{}/{}", c.succeeded, c.failed, c.total),
        ),
        time(Some(run.created_at)),
    ]
}

pub(crate) const RUN_HEADER: [&str; 5] = ["ID", "TYPE", "STATUS", "OK/FAILED/ALL", "CREATED"];

pub(crate) fn step(step: &WorkflowStepRecord) -> Value {
    json!({
        "step_key": step.step_key,
        "kind": step.kind.as_str(),
        "job_type": step.job_type,
        "status": step.status.as_str(),
        "job_id": step.job_id.map(|id| id.to_string()),
        "dependencies": step.dependencies.iter()
            .map(|(key, condition)| json!({"step_key": key, "condition": condition}))
            .collect::<Vec<_>>(),
        "output": step.output,
        "status_reason": step.status_reason,
        "last_error_code": step.last_error_code,
        "finished_at": step.finished_at,
    })
}

pub(crate) fn step_row(step: &WorkflowStepRecord) -> [String; 5] {
    let after: Vec<&str> = step
        .dependencies
        .iter()
        .map(|(key, _)| key.as_str())
        .collect();
    [
        step.step_key.clone(),
        step.job_type
            .clone()
            .unwrap_or_else(|| "external".to_owned()),
        step.status.to_string(),
        if after.is_empty() {
            "-".to_owned()
        } else {
            after.join(",")
        },
        or_dash(
            step.last_error_code
                .as_deref()
                .or(step.status_reason.as_deref()),
        )
        .to_owned(),
    ]
}

pub(crate) const STEP_HEADER: [&str; 5] = ["STEP", "TYPE", "STATUS", "AFTER", "ERROR"];

pub(crate) fn schedule(schedule: &JobSchedule) -> Value {
    json!({
        "name": schedule.name,
        "job_type": schedule.job_type,
        "cron_expr": schedule.cron_expr,
        "is_active": schedule.is_active,
        "organization_id": schedule.organization_id,
        "next_fire_at": schedule.next_fire_at,
        "last_fired_at": schedule.last_fired_at,
        "last_error_code": schedule.last_error_code,
    })
}

pub(crate) fn schedule_row(schedule: &JobSchedule) -> [String; 5] {
    [
        schedule.name.clone(),
        schedule.job_type.clone(),
        schedule.cron_expr.clone(),
        if schedule.is_active {
            "active"
        } else {
            "paused"
        }
        .to_owned(),
        time(Some(schedule.next_fire_at)),
    ]
}

pub(crate) const SCHEDULE_HEADER: [&str; 5] = ["NAME", "TYPE", "CRON", "STATE", "NEXT FIRE"];

pub(crate) fn queue(settings: &QueueSettings) -> Value {
    json!({
        "name": settings.name,
        "is_paused": settings.is_paused,
        "global_concurrency": settings.global_concurrency,
        "updated_at": settings.updated_at,
    })
}

pub(crate) fn queue_row(settings: &QueueSettings) -> [String; 4] {
    [
        settings.name.clone(),
        if settings.is_paused { "paused" } else { "open" }.to_owned(),
        settings
            .global_concurrency
            .map_or_else(|| "-".to_owned(), |limit| limit.to_string()),
        time(Some(settings.updated_at)),
    ]
}

pub(crate) const QUEUE_HEADER: [&str; 4] = ["NAME", "STATE", "GLOBAL LIMIT", "CHANGED"];

pub(crate) fn metrics(m: &JobMetrics) -> Value {
    json!({
        "job_type": m.job_type,
        "is_enabled": m.is_enabled,
        "pending": m.pending,
        "pending_ready": m.pending_ready,
        "oldest_ready_at": m.oldest_ready_at,
        "leased": m.leased,
        "stale_leases": m.stale_leases,
        "succeeded_24h": m.succeeded_24h,
        "dead_lettered_24h": m.dead_lettered_24h,
        "p50_duration_ms": m.p50_duration_ms,
        "p95_duration_ms": m.p95_duration_ms,
    })
}

pub(crate) fn metrics_row(m: &JobMetrics) -> [String; 8] {
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    [
        m.job_type.clone(),
        m.pending.to_string(),
        m.pending_ready.to_string(),
        m.leased.to_string(),
        m.stale_leases.to_string(),
        m.succeeded_24h.to_string(),
        m.dead_lettered_24h.to_string(),
        ms(m.p95_duration_ms),
    ]
}

pub(crate) const METRICS_HEADER: [&str; 8] = [
    "TYPE", "PENDING", "READY", "LEASED", "STALE", "OK 24H", "DEAD 24H", "P95 MS",
];

pub(crate) fn prune_counts(counts: &PruneCounts) -> Value {
    json!({
        "jobs": {
            "succeeded": counts.succeeded_jobs,
            "dead_lettered": counts.dead_lettered_jobs,
            "canceled": counts.canceled_jobs,
            "total": counts.jobs(),
        },
        "workflow_runs": {
            "succeeded": counts.succeeded_runs,
            "completed_with_errors": counts.completed_with_errors_runs,
            "canceled": counts.canceled_runs,
            "total": counts.runs(),
        },
    })
}

pub(crate) fn prune_counts_text(counts: &PruneCounts) -> String {
    format!(
        "jobs: {} ({} succeeded, {} dead-lettered, {} canceled)\nworkflow runs: {} ({} succeeded, {} completed with errors, {} canceled)",
        counts.jobs(),
        counts.succeeded_jobs,
        counts.dead_lettered_jobs,
        counts.canceled_jobs,
        counts.runs(),
        counts.succeeded_runs,
        counts.completed_with_errors_runs,
        counts.canceled_runs,
    )
}
