use runledger::prelude::*;

#[job(name = "emails.send", retries = 3)]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
