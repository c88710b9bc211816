use runledger::prelude::*;

#[job] async fn report(full: bool) -> Result<(), JobError> { let _ = full; Ok(()) }

#[schedule(cron = "0 3 * * 1-5", tz = "Europe/Berln")]
fn nightly() -> Report { Report { full: true } }

#[schedule(cron = "0 3 * * 1-5", tz = "america/new_york")]
fn nightly_in_new_york() -> Report { Report { full: false } }

fn main() {}
