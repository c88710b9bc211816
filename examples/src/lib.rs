//! Runnable Runledger examples live in `examples/examples/`; run one with
//! `cargo run -p runledger-examples --example <name>`.

#![forbid(unsafe_code)]

use std::fmt::Display;
use std::process::ExitCode;

/// Ends an example the way a command-line tool ends: status 0, or the error's one-line message
/// (its `Display`, which names the cause and what to check) on stderr and status 1.
///
/// ```
/// use std::process::ExitCode;
///
/// assert_eq!(runledger_examples::exit_code(Ok::<(), String>(())), ExitCode::SUCCESS);
/// assert_eq!(runledger_examples::exit_code(Err("no database")), ExitCode::FAILURE);
/// ```
pub fn exit_code<E: Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, giving up with an error naming `what`
/// after `limit`: how the examples wait for a worker without a fixed sleep.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
///
/// let value = runledger_examples::wait_for("a value", Duration::from_secs(1), || async {
///     Ok::<_, std::io::Error>(Some(7))
/// })
/// .await
/// .unwrap();
/// assert_eq!(value, 7);
/// # }
/// ```
pub async fn wait_for<T, E, F, Fut>(
    what: &str,
    limit: std::time::Duration,
    mut probe: F,
) -> Result<T, Box<dyn std::error::Error>>
where
    E: std::error::Error + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, E>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("gave up waiting for {what} after {limit:?}").into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
