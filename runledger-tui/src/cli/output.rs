//! What the admin commands print: a document for `--json` (the engine's read models through
//! `serde`), and the same values as aligned text for people.

use std::collections::BTreeMap;
use std::io::Write;

use chrono::{DateTime, Utc};
use runledger_engine::postgres::jobs::{
    JobDetail, JobExplanation, JobMetrics, JobRecord, JobSchedule, PruneCounts, QueueSettings,
    WorkflowRunRecord, WorkflowRunStepCounts, WorkflowStepRecord,
};
use serde::Serialize;
use serde_json::json;

use super::Failure;

/// Where results go: JSON documents or text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub(crate) json: bool,
}

impl Output {
    /// Prints `value` as a JSON document, or `text()` for people.
    pub(crate) fn print<T: Serialize + ?Sized>(
        self,
        value: &T,
        text: impl FnOnce() -> String,
    ) -> Result<(), Failure> {
        let rendered = if self.json {
            serde_json::to_string_pretty(value).map_err(|err| Failure::Refused {
                code: "cli.output",
                message: format!("the result cannot be written as JSON: {err}"),
            })?
        } else {
            text()
        };
        let _ = writeln!(std::io::stdout(), "{rendered}");
        Ok(())
    }

    /// Reports a failure on stderr: `{"error": {"code", "message"}}` or one line.
    pub(crate) fn fail(self, code: &str, message: &str) {
        let rendered = if self.json {
            json!({ "error": { "code": code, "message": message } }).to_string()
        } else {
            format!("runledger: {code}: {message}")
        };
        let _ = writeln!(std::io::stderr(), "{rendered}");
    }
}

/// `{"<key>": value}`: the document of a command that prints one list or one word.
pub(crate) fn keyed<T: Serialize>(key: &'static str, value: T) -> BTreeMap<&'static str, T> {
    BTreeMap::from([(key, value)])
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
            // Padded by hand: a format width above 65,535 panics, and a cell can be wider.
            .map(|(cell, width)| {
                let pad = width.saturating_sub(cell.chars().count());
                format!("{cell}{}", " ".repeat(pad))
            })
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

pub(crate) fn job_row(job: &JobRecord) -> [String; 8] {
    [
        job.id.to_string(),
        job.job_type.clone(),
        job.queue.clone(),
        or_dash(job.resource_key.as_deref()).to_owned(),
        job.status.to_string(),
        format!("{}/{}", job.attempts_used, job.max_attempts),
        time(Some(job.created_at)),
        or_dash(job.last_error_code.as_deref()).to_owned(),
    ]
}

pub(crate) const JOB_HEADER: [&str; 8] = [
    "ID", "TYPE", "QUEUE", "RESOURCE", "STATUS", "ATTEMPTS", "CREATED", "ERROR",
];

/// `jobs explain`: where the job stands, then one line per rule holding it.
pub(crate) fn explanation_text(explanation: &JobExplanation) -> String {
    let status = explanation.status.map_or_else(
        || "a workflow step without a job yet".to_owned(),
        |s| s.to_string(),
    );
    let mut text = format!("job {}: {status}", explanation.job_id);
    if explanation.is_claimable() {
        text.push_str("\nnothing holds it: the next claim of a worker serving it may take it");
    }
    for hold in &explanation.holds {
        text.push_str(&format!("\n  held: {hold}"));
    }
    text
}

pub(crate) fn job_detail_text(detail: &JobDetail) -> String {
    let job = &detail.job;
    let mut lines = vec![
        format!("{}  {}  {}", job.id, job.job_type, job.status),
        format!("queue         {}", job.queue),
        format!("resource key  {}", or_dash(job.resource_key.as_deref())),
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

pub(crate) fn step_row(step: &WorkflowStepRecord) -> [String; 5] {
    [
        step.step_key.clone(),
        crate::model::step_runs(step),
        step.status.to_string(),
        crate::model::prerequisites_cell(
            &step.dependencies,
            step.dependency_count,
            ",",
            |key, _| key.to_owned(),
        ),
        or_dash(
            step.last_error_code
                .as_deref()
                .or(step.status_reason.as_deref()),
        )
        .to_owned(),
    ]
}

pub(crate) const STEP_HEADER: [&str; 5] = ["STEP", "TYPE", "STATUS", "AFTER", "ERROR"];

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

#[cfg(test)]
mod tests {
    use super::table;
    use crate::model::prerequisites_cell;

    #[test]
    fn a_cell_wider_than_a_format_width_is_padded() {
        let wide = "x".repeat(70_000);
        let text = table(
            ["A", "B"],
            &[
                [wide.clone(), "b".to_owned()],
                ["a".to_owned(), "-".to_owned()],
            ],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], format!("{wide}  b"));
        assert_eq!(lines[2].chars().count(), 70_000 + 3);
    }

    #[test]
    fn a_step_with_many_prerequisites_names_the_first_five() {
        let deps: Vec<(String, String)> = (0..100)
            .map(|n| (format!("kids/{n}"), "TERMINAL".to_owned()))
            .collect();
        assert_eq!(
            prerequisites_cell(&deps, 100_000, ",", |key, _| key.to_owned()),
            "kids/0,kids/1,kids/2,kids/3,kids/4,+99995 more",
            "counted from the step's total, not from the names read"
        );
        assert_eq!(
            prerequisites_cell(&deps[..2], 2, ",", |key, _| key.to_owned()),
            "kids/0,kids/1"
        );
        assert_eq!(
            prerequisites_cell(&[], 0, ",", |key, _| key.to_owned()),
            "-"
        );
    }
}
