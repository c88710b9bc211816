//! `queues list|pause|resume|limit`.

use runledger_engine::postgres::jobs::{
    list_queue_settings, pause_queue, resume_queue, set_queue_global_concurrency,
};
use serde_json::json;

use super::output::{self, QUEUE_HEADER, table};
use super::{Context, Failure};
use crate::args::QueuesCommand;

pub(super) async fn run(context: &Context, command: &QueuesCommand) -> Result<(), Failure> {
    let settings = match command {
        QueuesCommand::List => {
            let queues = list_queue_settings(&context.pool).await?;
            let value = json!({ "queues": queues.iter().map(output::queue).collect::<Vec<_>>() });
            context.out.print(&value, || {
                let rows: Vec<_> = queues.iter().map(output::queue_row).collect();
                table(QUEUE_HEADER, &rows)
            });
            return Ok(());
        }
        QueuesCommand::Pause { name } => pause_queue(&context.pool, name).await?,
        QueuesCommand::Resume { name } => resume_queue(&context.pool, name).await?,
        QueuesCommand::Limit { name, limit, .. } => {
            set_queue_global_concurrency(&context.pool, name, *limit).await?
        }
    };
    context.out.print(&output::queue(&settings), || {
        let state = if settings.is_paused { "paused" } else { "open" };
        let limit = settings.global_concurrency.map_or_else(
            || "no global limit".to_owned(),
            |n| format!("global limit {n}"),
        );
        format!("queue {} is {state}, {limit}", settings.name)
    });
    Ok(())
}
