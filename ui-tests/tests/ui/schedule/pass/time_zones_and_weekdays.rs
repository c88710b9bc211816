use runledger::prelude::*;

#[job] async fn report(full: bool) -> Result<(), JobError> { let _ = full; Ok(()) }

// One weekday convention in every form: 1-5 is Monday to Friday, 0 and 7 are Sunday.
#[schedule(cron = "0 0 3 * * 1-5", tz = "Europe/Berlin", name = "reports.weekdays")]
#[schedule(cron = "0 9 * * SUN", tz = "America/New_York", name = "reports.sunday")]
#[schedule(cron = "0 0 29 2 *", name = "reports.leap_day")]
fn reports() -> Report { Report { full: true } }

#[tokio::main]
async fn main() {
    // No database is touched: building a worker only collects the registrations.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let worker = Worker::builder(&pool).build().unwrap();
    let schedules = worker.catalog().schedules();
    let weekdays = schedules.iter().find(|s| s.name() == "reports.weekdays").unwrap();
    assert_eq!(weekdays.time_zone(), "Europe/Berlin");
    let leap_day = schedules.iter().find(|s| s.name() == "reports.leap_day").unwrap();
    assert_eq!(leap_day.time_zone(), "UTC");
}
