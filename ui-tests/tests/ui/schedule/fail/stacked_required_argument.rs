use runledger::prelude::*;

#[schedule(cron = "@daily", name = "sessions.cleanup.daily")]
#[job(name = "sessions.cleanup")]
async fn cleanup(older_than_days: u32) -> Result<(), JobError> {
    let _ = older_than_days;
    Ok(())
}

fn main() {}
