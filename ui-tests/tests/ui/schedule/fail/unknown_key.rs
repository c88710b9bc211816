use runledger::prelude::*;

#[schedule(cron = "@daily", name = "sessions.cleanup.daily", timezone = "Europe/Paris")]
#[job(name = "sessions.cleanup")]
async fn cleanup() -> Result<(), JobError> {
    Ok(())
}

fn main() {}
