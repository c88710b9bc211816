use runledger::prelude::*;

#[job(name = "reports.refresh")]
async fn refresh_reports(full: bool) -> Result<(), JobError> {
    let _ = full;
    Ok(())
}

#[schedule(cron = "0 */5 * * * *", name = "reports.refresh.5m", jitter = "30s")]
fn refresh() -> RefreshReports {
    RefreshReports { full: false }
}

#[schedule(cron = "0 3 * * 1-5", name = "sessions.cleanup.weekdays", active = false)]
#[job(name = "sessions.cleanup")]
async fn cleanup(older_than_days: Option<u32>) -> Result<(), JobError> {
    let _ = older_than_days;
    Ok(())
}

#[job(name = "caches.warm")]
#[schedule(cron = "@hourly")]
async fn warm_caches(ctx: JobContext) -> Result<(), JobError> {
    let _ = ctx;
    Ok(())
}

fn main() {
    let schedules = runledger::registered_schedules().unwrap();
    let names: Vec<_> = schedules.iter().map(|s| (s.name, s.job_name, s.active)).collect();
    assert_eq!(
        names,
        vec![
            ("reports.refresh.5m", "reports.refresh", true),
            ("sessions.cleanup.weekdays", "sessions.cleanup", false),
            ("warm_caches", "caches.warm", true),
        ]
    );
    assert_eq!(schedules[0].jitter_seconds, 30);
    assert_eq!(schedules[0].payload, serde_json::json!({"full": false}));
}
