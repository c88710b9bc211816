//! Compile-fail cases (each with its reviewed `.stderr`) and compile-pass cases (compiled and
//! run) for `#[job]`, `#[workflow]`, `#[schedule]` and `Worker` startup.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*/fail/*.rs");
    cases.pass("tests/ui/*/pass/*.rs");
}
