//! `jobs list|show|explain|cancel|requeue`.

use runledger_engine::postgres::jobs::{
    JobListFilter, cancel_job, explain_job, get_job_by_id, get_job_detail, list_jobs, requeue_job,
};

use super::output::{self, JOB_HEADER, table};
use super::{Context, Failure};
use crate::args::{JobListArgs, JobsCommand, Status, job_id, run_id};

pub(super) async fn run(context: &Context, command: &JobsCommand) -> Result<(), Failure> {
    match command {
        JobsCommand::List(args) => list(context, args).await,
        JobsCommand::Show { id } => {
            let detail = found(
                get_job_detail(&context.pool, job_id(*id), context.scope()).await?,
                *id,
            )?;
            context
                .out
                .print(&detail, || output::job_detail_text(&detail))
        }
        JobsCommand::Explain { id } => {
            let explanation = found(
                explain_job(&context.pool, job_id(*id), context.scope()).await?,
                *id,
            )?;
            context
                .out
                .print(&explanation, || output::explanation_text(&explanation))
        }
        JobsCommand::Cancel { id } => {
            cancel_job(&context.pool, job_id(*id), context.scope()).await?;
            changed(context, *id).await
        }
        JobsCommand::Requeue { id } => {
            requeue_job(&context.pool, job_id(*id), context.scope()).await?;
            changed(context, *id).await
        }
    }
}

/// What a read found of the job `id`, or `job.not_found`.
fn found<T>(read: Option<T>, id: uuid::Uuid) -> Result<T, runledger_engine::postgres::Error> {
    read.ok_or(runledger_engine::postgres::Error::JobNotFound { job_id: job_id(id) })
}

/// Prints the job as it is after a change.
async fn changed(context: &Context, id: uuid::Uuid) -> Result<(), Failure> {
    let job = found(
        get_job_by_id(&context.pool, job_id(id), context.scope()).await?,
        id,
    )?;
    context
        .out
        .print(&job, || format!("job {} is now {}", job.id, job.status))
}

async fn list(context: &Context, args: &JobListArgs) -> Result<(), Failure> {
    let mut filter = JobListFilter::new().limit(args.limit);
    filter.status = args.status.map(Status::into_inner);
    filter.job_type_contains.clone_from(&args.job_type);
    filter.search.clone_from(&args.search);
    filter.workflow_run_id = args.workflow_run.map(run_id);
    filter.organization_id = context.organization;
    filter.after = args.after.map(job_id);
    let page = list_jobs(&context.pool, &filter).await?;
    context.out.print(&page, || {
        let rows: Vec<_> = page.jobs.iter().map(output::job_row).collect();
        let mut text = table(JOB_HEADER, &rows);
        if let Some(cursor) = page.next_cursor {
            text.push_str(&format!("\nmore: --after {cursor}"));
        }
        text
    })
}
