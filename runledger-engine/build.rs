//! Rebuilds the crate when its migrations change. `MIGRATOR` embeds `migrations/` at compile
//! time, and Cargo reruns that macro only when a file it already knows about changes: a new
//! migration file would otherwise leave the binary and the tests migrating to the previous
//! schema.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
