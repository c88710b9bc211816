use runledger::prelude::*;

#[job(name = "reports.refresh")]
async fn refresh_reports(full: bool) -> Result<(), JobError> {
    let _ = full;
    Ok(())
}

#[schedule(name = "reports.refresh.5m")]
fn refresh() -> RefreshReports {
    RefreshReports { full: false }
}

fn main() {}
