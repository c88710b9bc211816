//! `schedules list|pause|resume`.

use super::output::{self, SCHEDULE_HEADER, keyed, table};
use super::{Context, Failure};
use crate::args::SchedulesCommand;
use runledger_engine::postgres::jobs::{list_job_schedules, set_job_schedule_active};

pub(super) async fn run(context: &Context, command: &SchedulesCommand) -> Result<(), Failure> {
    let (name, active) = match command {
        SchedulesCommand::List => {
            let schedules = list_job_schedules(&context.pool).await?;
            return context.out.print(&keyed("schedules", &schedules), || {
                let rows: Vec<_> = schedules.iter().map(output::schedule_row).collect();
                table(SCHEDULE_HEADER, &rows)
            });
        }
        SchedulesCommand::Pause { name } => (name, false),
        SchedulesCommand::Resume { name } => (name, true),
    };
    let schedule = set_job_schedule_active(&context.pool, name, active).await?;
    context.out.print(&schedule, || {
        let state = if schedule.is_active {
            "active"
        } else {
            "paused"
        };
        format!("schedule {} is now {state}", schedule.name)
    })
}
