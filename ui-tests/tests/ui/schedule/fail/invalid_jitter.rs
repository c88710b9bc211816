use runledger::prelude::*;

#[schedule(cron = "@daily", name = "sessions.cleanup.daily", jitter = "soon")]
#[job(name = "sessions.cleanup")]
async fn cleanup() -> Result<(), JobError> {
    Ok(())
}

fn main() {}
