//! The screens. Each screen is one file holding the data it shows, its selection, filters and
//! pages, the query it wants fetched, its keys and its drawing: `dashboard`, `queue`,
//! `workflows`, `definitions`, `job` and `workflow` (the two detail screens). `screen.rs` says
//! what a screen is to the app; `list.rs`, `search.rs` and `job_types.rs` hold what several
//! screens share. The app stacks the screens, routes keys and snapshots to them, and draws
//! the frame around the one on top.
//!
//! A new tab is a new file here (and its `mod` line) with a type that implements [`Screen`]
//! (`screen.rs`), plus its line in [`tabs`]. A screen that reads something no other screen
//! reads also needs its `ViewQuery` and `Data` variants (`model.rs`) and the read behind them
//! (`poller.rs`).

mod dashboard;
mod definitions;
mod job;
mod job_types;
mod list;
mod queue;
mod screen;
mod search;
mod workflow;
mod workflows;

use dashboard::Dashboard;
use definitions::Definitions;
pub(crate) use job::JobDetail;
#[cfg(test)]
pub(crate) use job::{Pane, progress_ratio, progress_text};
pub(crate) use queue::Queue;
pub(crate) use screen::{Action, Screen};
pub(crate) use workflow::WorkflowDetail;
pub(crate) use workflows::Workflows;

/// The top-level screens, in key order (`1`, `2`, …). A new tab is one line here.
pub(crate) fn tabs() -> Vec<Box<dyn Screen>> {
    vec![
        Box::new(Dashboard::default()),
        Box::new(Queue::default()),
        Box::new(Workflows::default()),
        Box::new(Definitions::default()),
    ]
}
