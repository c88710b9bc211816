use runledger::prelude::*;

#[job] async fn charge(cents: u64) -> Result<u64, JobError> { Ok(cents) }
/// An `#[after_terminal]` prerequisite is read as an `Option`: `None` when it failed.
#[job] async fn notify(#[output(Checkout::CHARGE)] charged: Option<u64>) -> Result<(), JobError> {
    let _ = charged;
    Ok(())
}

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
