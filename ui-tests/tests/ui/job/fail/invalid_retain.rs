use runledger::prelude::*;

#[job(name = "reports.build", retain = "a week")]
async fn build_report(id: u64) -> Result<(), JobError> {
    let _ = id;
    Ok(())
}

fn main() {}
