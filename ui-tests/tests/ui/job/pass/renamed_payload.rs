use runledger::prelude::*;

struct Invoice;

#[job(name = "invoices.render", payload = RenderInvoice)]
async fn invoice(number: u64, lines: Vec<String>) -> Result<usize, JobError> {
    Ok(lines.len() + number as usize)
}

fn main() {
    let _ = Invoice;
    let payload = RenderInvoice { number: 7, lines: vec!["a".into()] };
    assert_eq!(RenderInvoice::NAME, "invoices.render");
    let _ = payload;
}
