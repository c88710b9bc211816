use runledger::prelude::*;

#[job(name = "emails.send", max_attempts = 0)]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
