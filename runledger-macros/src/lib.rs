//! Procedural macros behind `runledger`'s typed API; use them through the `runledger` crate.
