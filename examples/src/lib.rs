//! Runnable Runledger examples live in `examples/examples/`; run one with
//! `cargo run -p runledger-examples --example <name>`.

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
