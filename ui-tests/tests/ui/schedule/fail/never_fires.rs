use runledger::prelude::*;

#[job] async fn report(full: bool) -> Result<(), JobError> { let _ = full; Ok(()) }

// February never has a 30th.
#[schedule(cron = "0 0 30 2 *")]
fn leap_day_report() -> Report { Report { full: true } }

fn main() {}
