use runledger::prelude::*;

#[job(name = "invoices.total")]
async fn total(amounts: &[u64]) -> Result<u64, JobError> {
    Ok(amounts.iter().sum())
}

fn main() {}
