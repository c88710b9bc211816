use runledger::prelude::*;

#[job(name = "emails.send")]
async fn send_email(to: String) -> bool {
    !to.is_empty()
}

fn main() {}
