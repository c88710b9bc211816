use runledger::prelude::*;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    pub message_id: String,
}

#[job(name = "emails.send", max_attempts = 5, timeout = "2m", priority = -3, version = 2, enabled = true, retain = "3d", queue = "emails", global_concurrency = 4)]
pub async fn send_email(ctx: JobContext, to: String, subject: String) -> Result<Receipt, JobError> {
    let _ = (ctx.attempt(), subject);
    Ok(Receipt { message_id: format!("<{to}>") })
}

#[job]
async fn ping() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    assert_eq!(SendEmail::NAME, "emails.send");
    assert_eq!(SendEmail::DEFAULTS.max_attempts, Some(5));
    assert_eq!(SendEmail::DEFAULTS.timeout_seconds, Some(120));
    assert_eq!(SendEmail::DEFAULTS.priority, Some(-3));
    assert_eq!(SendEmail::DEFAULTS.version, Some(2));
    assert_eq!(SendEmail::DEFAULTS.retention_seconds, Some(3 * 86_400));
    assert_eq!(SendEmail::DEFAULTS.queue, Some("emails"));
    assert_eq!(SendEmail::DEFAULTS.global_concurrency, Some(4));
    assert_eq!(Ping::NAME, "ping");
    let payload = SendEmail { to: "ada@example.com".into(), subject: "hi".into() };
    assert_eq!(serde_json::to_value(&payload).unwrap()["to"], "ada@example.com");
    // The fn is still an ordinary async fn.
    let _future = send_email(JobContext::for_tests("emails.send"), "a".into(), "b".into());
}
