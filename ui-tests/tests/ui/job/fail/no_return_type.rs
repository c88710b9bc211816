use runledger::prelude::*;

#[job(name = "emails.send")]
async fn send_email(to: String) {
    let _ = to;
}

fn main() {}
