use runledger::prelude::*;

#[job(name = " emails.send ")]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
