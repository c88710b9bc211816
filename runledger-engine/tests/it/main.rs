//! Engine integration tests against a real PostgreSQL (`DATABASE_URL`); each test gets a fresh
//! database from `#[sqlx::test]`.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod support;

mod activity;
mod admin;
mod admin_reads;
mod catalog;
mod claim;
mod complete;
mod definitions;
mod enqueue;
mod error_codes;
mod hostile_input;
mod intents;
mod metrics;
mod properties;
mod reads;
mod recovery;
mod replay;
mod retention;
mod runtime;
mod runtime_tasks;
mod schedules;
mod schema;
mod seed_examples;
mod seed_rules;
mod tenancy;
mod trace;
mod workflows;
