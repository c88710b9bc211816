//! The error types handlers return in practice all work as job errors: each becomes a
//! retryable failure carrying the error's text.
use runledger::prelude::*;

#[job(name = "errors.boxed")]
async fn boxed(fail: bool) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    if fail {
        return Err("upstream timed out".into());
    }
    Ok(1)
}

#[job(name = "errors.text")]
async fn text() -> Result<(), String> {
    Err(format!("quota of {} exceeded", 10))
}

#[job(name = "errors.static_text")]
async fn static_text() -> Result<(), &'static str> {
    Err("not yet")
}

#[job(name = "errors.anyhow")]
async fn with_anyhow() -> anyhow::Result<u32> {
    let parsed: u32 = "x".parse().map_err(anyhow::Error::from)?;
    Ok(parsed)
}

#[job(name = "errors.io")]
async fn io_alias() -> std::io::Result<()> {
    Err(std::io::Error::other("disk full"))
}

async fn failure<J: Job>(job: J) -> JobError {
    match job.run(JobContext::for_tests(J::NAME)).await {
        Ok(_) => panic!("{} succeeded", J::NAME),
        Err(error) => error,
    }
}

#[tokio::main]
async fn main() {
    let cases = [
        (failure(Boxed { fail: true }).await, "upstream timed out"),
        (failure(Text {}).await, "quota of 10 exceeded"),
        (failure(StaticText {}).await, "not yet"),
        (failure(WithAnyhow {}).await, "invalid digit found in string"),
        (failure(IoAlias {}).await, "disk full"),
    ];
    for (error, message) in cases {
        assert!(!error.is_terminal(), "{error}");
        assert_eq!(error.code(), JobError::HANDLER_ERROR_CODE);
        assert_eq!(error.message(), message);
    }
    assert_eq!(Boxed { fail: false }.run(JobContext::for_tests("errors.boxed")).await.unwrap(), 1);
}
