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

#[tokio::main]
async fn main() {
    // No database is touched: building a worker only collects the registrations.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let worker = Worker::builder(&pool).build().unwrap();
    let schedules = worker.catalog().schedules();
    let names: Vec<_> = schedules.iter().map(|s| (s.name(), s.job_type(), s.is_active())).collect();
    assert_eq!(
        names,
        vec![
            ("reports.refresh.5m", "reports.refresh", true),
            ("sessions.cleanup.weekdays", "sessions.cleanup", false),
            ("warm_caches", "caches.warm", true),
        ]
    );
    assert_eq!(schedules[0].max_jitter_seconds(), 30);
    assert_eq!(schedules[0].payload_template(), &serde_json::json!({"full": false}));
}
