//! Runnable Runledger examples live in `examples/examples/`; run one with
//! `cargo run -p runledger-examples --example <name>`.
