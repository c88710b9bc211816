use runledger::prelude::*;

#[job(name = "emails.send", timeout = "30 seconds")]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
