use runledger::prelude::*;

struct Mailer;

impl Mailer {
    #[job(name = "emails.send")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

fn main() {
    let _ = Mailer;
}
