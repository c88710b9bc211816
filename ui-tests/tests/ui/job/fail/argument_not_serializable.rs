use runledger::prelude::*;

#[derive(Debug, Clone)]
struct Connection;

#[job(name = "reports.render")]
async fn render(connection: Connection) -> Result<(), JobError> {
    let _ = connection;
    Ok(())
}

fn main() {}
