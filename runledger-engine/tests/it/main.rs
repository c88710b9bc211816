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
mod continuation;
mod definitions;
mod enqueue;
mod error_codes;
mod explain;
mod fan_outs;
mod hostile_input;
mod intents;
mod metrics;
mod progress_and_stage;
mod properties;
mod queues;
mod reads;
mod recovery;
mod release_races;
mod replay;
mod resource_keys;
mod retention;
mod runtime;
mod runtime_tasks;
mod schedules;
mod schema;
mod seed_examples;
mod seed_rules;
mod sql_sources;
mod tenancy;
mod trace;
mod unique_keys;
mod workflows;
