//! Read-only operator terminal UI for Runledger (not built yet: this binary only says so).

fn main() -> std::process::ExitCode {
    eprintln!("runledger-tui: the operator UI is not available in this version");
    std::process::ExitCode::from(2)
}
