//! `schedules list|pause|resume`.

use runledger_engine::postgres::jobs::{list_job_schedules, set_job_schedule_active};
use serde_json::json;

use super::output::{self, SCHEDULE_HEADER, table};
use super::{Context, Failure};
use crate::args::SchedulesCommand;

pub(super) async fn run(context: &Context, command: &SchedulesCommand) -> Result<(), Failure> {
    let (name, active) = match command {
        SchedulesCommand::List => {
            let schedules = list_job_schedules(&context.pool).await?;
            let value = json!({
                "schedules": schedules.iter().map(output::schedule).collect::<Vec<_>>(),
            });
            context.out.print(&value, || {
                let rows: Vec<_> = schedules.iter().map(output::schedule_row).collect();
                table(SCHEDULE_HEADER, &rows)
            });
            return Ok(());
        }
        SchedulesCommand::Pause { name } => (name, false),
        SchedulesCommand::Resume { name } => (name, true),
    };
    let schedule = set_job_schedule_active(&context.pool, name, active).await?;
    context.out.print(&output::schedule(&schedule), || {
        let state = if schedule.is_active {
            "active"
        } else {
            "paused"
        };
        format!("schedule {} is now {state}", schedule.name)
    });
    Ok(())
}
