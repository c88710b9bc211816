use runledger::prelude::*;

mod billing {
    use runledger::prelude::*;

    #[job(name = "invoices.send")]
    pub async fn send_invoice(number: u64) -> Result<(), JobError> {
        let _ = number;
        Ok(())
    }
}

#[job(name = "invoices.send")]
async fn send_invoice_copy(number: u64) -> Result<(), JobError> {
    let _ = number;
    Ok(())
}

#[tokio::main]
async fn main() {
    let _ = billing::SendInvoice { number: 1 };
    let _ = SendInvoiceCopy { number: 1 };
    // No database is touched: the registrations are checked before anything connects.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let err = Worker::builder(&pool).build().unwrap_err();
    assert_eq!(err.code(), "worker.duplicate_job");
    let message = err.to_string();
    assert!(message.contains("invoices.send"), "{message}");
    assert!(message.contains("duplicate_job_names_fail_startup.rs:6:5"), "{message}");
    assert!(message.contains("duplicate_job_names_fail_startup.rs:13:1"), "{message}");
}
