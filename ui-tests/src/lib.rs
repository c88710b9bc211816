//! The trybuild suite for Runledger's macros lives under `tests/ui/`; see the README beside
//! this crate for how to run and regenerate it.

#![forbid(unsafe_code)]
