//! Engine integration tests against a real PostgreSQL (`DATABASE_URL`); each test gets a fresh
//! database from `#[sqlx::test]`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod admin;
mod claim;
mod complete;
mod definitions;
mod enqueue;
mod reads;
mod schema;
