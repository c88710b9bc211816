use runledger::prelude::*;

#[job(name = "emails.send")]
async fn send_email(to: String, ctx: JobContext) -> Result<(), JobError> {
    let _ = (to, ctx);
    Ok(())
}

fn main() {}
