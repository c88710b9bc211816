//! Integration tests of the typed API: jobs, workflows and schedules declared with the macros,
//! run by a `Worker` against a fresh database per test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admin;
mod connection;
mod context;
mod continuation;
mod errors;
mod fan_out;
mod handles;
mod intents;
mod jobs;
mod results;
mod schedules;
mod support;
mod testing;
mod trace;
mod worker;
mod workflows;
