//! `queues list|pause|resume|limit`.

use super::output::{self, QUEUE_HEADER, keyed, table};
use super::{Context, Failure};
use crate::args::QueuesCommand;
use runledger_engine::postgres::jobs::{
    list_queue_settings, pause_queue, resume_queue, set_queue_global_concurrency,
};

pub(super) async fn run(context: &Context, command: &QueuesCommand) -> Result<(), Failure> {
    let settings = match command {
        QueuesCommand::List => {
            let queues = list_queue_settings(&context.pool).await?;
            return context.out.print(&keyed("queues", &queues), || {
                let rows: Vec<_> = queues.iter().map(output::queue_row).collect();
                table(QUEUE_HEADER, &rows)
            });
        }
        QueuesCommand::Pause { name } => pause_queue(&context.pool, name).await?,
        QueuesCommand::Resume { name } => resume_queue(&context.pool, name).await?,
        QueuesCommand::Limit { name, limit, .. } => {
            set_queue_global_concurrency(&context.pool, name, *limit).await?
        }
    };
    context.out.print(&settings, || {
        let state = if settings.is_paused { "paused" } else { "open" };
        let limit = settings.global_concurrency.map_or_else(
            || "no global limit".to_owned(),
            |n| format!("global limit {n}"),
        );
        format!("queue {} is {state}, {limit}", settings.name)
    })
}
