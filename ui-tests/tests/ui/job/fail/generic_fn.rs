use runledger::prelude::*;

#[job(name = "items.store")]
async fn store<T: serde::Serialize>(item: T) -> Result<(), JobError> {
    let _ = item;
    Ok(())
}

fn main() {}
