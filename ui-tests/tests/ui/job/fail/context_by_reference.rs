use runledger::prelude::*;

#[job(name = "emails.send")]
async fn send_email(ctx: &JobContext, to: String) -> Result<(), JobError> {
    let _ = (ctx.attempt(), to);
    Ok(())
}

fn main() {}
