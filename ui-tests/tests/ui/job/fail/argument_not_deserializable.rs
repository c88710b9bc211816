use runledger::prelude::*;

#[derive(Debug, Clone, serde::Serialize)]
struct Recipient {
    address: String,
}

#[job(name = "emails.send")]
async fn send_email(to: Recipient) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
