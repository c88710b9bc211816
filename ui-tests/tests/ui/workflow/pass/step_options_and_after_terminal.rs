use runledger::prelude::*;

#[job] async fn charge(cents: u64) -> Result<u64, JobError> { Ok(cents) }
#[job] async fn notify() -> Result<(), JobError> { Ok(()) }

/// No `#[result]`: the run's output is `()`.
#[workflow]
struct Checkout {
    #[step(key = "charge-card", priority = 10, max_attempts = 2, timeout = "45s")]
    charge: Charge,
    #[after_terminal(charge)]
    notify: Notify,
}

fn main() {
    assert_eq!(Checkout::NAME, "checkout");
    assert_eq!(Checkout::CHARGE.key(), "charge-card");
    assert_eq!(Checkout::RESULT_STEP, None);
    fn unit<W: Workflow<Output = ()>>() {}
    unit::<Checkout>();
}
