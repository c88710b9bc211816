use runledger::prelude::*;

#[job(name = "emails.send", queue = "mail queue", global_concurrency = 0)]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
