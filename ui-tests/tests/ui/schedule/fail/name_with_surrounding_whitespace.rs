use runledger::prelude::*;

#[job(name = "reports.refresh")]
async fn refresh_reports(full: bool) -> Result<(), JobError> {
    let _ = full;
    Ok(())
}

#[schedule(cron = "@hourly", name = " reports.refresh.hourly")]
fn refresh() -> RefreshReports {
    RefreshReports { full: false }
}

fn main() {}
