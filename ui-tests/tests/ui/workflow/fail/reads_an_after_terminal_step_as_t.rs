use runledger::prelude::*;

#[job] async fn charge(cents: u64) -> Result<String, JobError> { Ok(format!("receipt {cents}")) }

#[job]
async fn notify(#[output(Checkout::CHARGE)] receipt: String) -> Result<(), JobError> {
    let _ = receipt;
    Ok(())
}

#[workflow(name = "shop.checkout")]
struct Checkout {
    charge: Charge,
    #[after_terminal(charge)]
    notify: Notify,
}

fn main() {}
