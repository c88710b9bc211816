use runledger::prelude::*;

#[schedule(cron = "@hourly", name = "reports.refresh.hourly")]
fn refresh() -> String {
    "refresh".to_owned()
}

fn main() {}
