use runledger::prelude::*;

struct NotAnError;

#[job(name = "emails.send")]
async fn send_email(to: String) -> Result<(), NotAnError> {
    let _ = to;
    Ok(())
}

fn main() {}
