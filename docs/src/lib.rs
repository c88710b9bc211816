//! The Rust samples of Runledger's README and of the pages in `docs/`, compiled as doctests.
//!
//! Each module's documentation is one Markdown file, so `cargo test -p runledger-docs --doc`
//! (and with it `cargo test --workspace`) fails when a sample stops compiling. The crate
//! depends only on what the README asks a user to add; samples that need a database are
//! `no_run`.
//!
//! Rustdoc merges the samples into one test binary, so the `#[job]`s of every sample register
//! in it together: a sample that builds a `Worker` needs a database anyway and must stay
//! `no_run`, or it would find the other samples' jobs (`worker.duplicate_job`).

#![forbid(unsafe_code)]
// The pages link to each other by relative file path, as the repository host reads them; a
// link such as `[LICENSE](LICENSE)` is no Rust path for rustdoc to resolve.
#![allow(rustdoc::broken_intra_doc_links)]
// Every sample compiles without warnings, except that fragments may leave items unused.
#![doc(test(attr(deny(warnings), allow(unused))))]

#[doc = include_str!("../../README.md")]
pub mod readme {}

#[doc = include_str!("../guide.md")]
pub mod guide {}

#[doc = include_str!("../configuration.md")]
pub mod configuration {}

#[doc = include_str!("../operations.md")]
pub mod operations {}

#[doc = include_str!("../engine.md")]
pub mod engine {}

#[doc = include_str!("../testing.md")]
pub mod testing {}

#[doc = include_str!("../agent-guide.md")]
pub mod agent_guide {}

#[doc = include_str!("../error-codes.md")]
pub mod error_codes {}

#[doc = include_str!("../state-machines.md")]
pub mod state_machines {}

#[doc = include_str!("../benchmarks.md")]
pub mod benchmarks {}

#[doc = include_str!("../contributing.md")]
pub mod contributing {}
