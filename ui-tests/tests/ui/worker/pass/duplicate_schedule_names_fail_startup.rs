use runledger::prelude::*;

#[job(name = "reports.refresh")]
async fn refresh_reports(full: bool) -> Result<(), JobError> {
    let _ = full;
    Ok(())
}

#[schedule(cron = "@hourly", name = "reports.refresh")]
fn hourly() -> RefreshReports {
    RefreshReports { full: false }
}

#[schedule(cron = "@daily", name = "reports.refresh")]
fn daily() -> RefreshReports {
    RefreshReports { full: true }
}

#[tokio::main]
async fn main() {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let err = Worker::builder(&pool).build().unwrap_err();
    assert_eq!(err.code(), "worker.duplicate_schedule");
    let message = err.to_string();
    assert!(message.contains("duplicate_schedule_names_fail_startup.rs:9:1"), "{message}");
    assert!(message.contains("duplicate_schedule_names_fail_startup.rs:14:1"), "{message}");
}
