//! Procedural macros of Runledger. Use them through the `runledger` crate, whose re-exports
//! carry the user-facing documentation: `#[runledger::job]`, `#[runledger::workflow]`,
//! `#[runledger::schedule]`.

#![forbid(unsafe_code)]

mod args;
mod attached;
mod case;
mod errors;
mod graph;
mod job;
mod schedule;
mod stacked;
mod syntax;
mod workflow;

use proc_macro::TokenStream;

/// Turns an `async fn` into a job; see `runledger::job`.
#[proc_macro_attribute]
pub fn job(args: TokenStream, item: TokenStream) -> TokenStream {
    stacked::expand(stacked::Attribute::Job(args.into()), item.into()).into()
}

/// Turns a struct of steps into a workflow; see `runledger::workflow`.
#[proc_macro_attribute]
pub fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    workflow::expand(args.into(), item.into()).into()
}

/// Declares a recurring job; see `runledger::schedule`.
#[proc_macro_attribute]
pub fn schedule(args: TokenStream, item: TokenStream) -> TokenStream {
    stacked::expand(stacked::Attribute::Schedule(args.into()), item.into()).into()
}

/// Emits the items of its `#[runledger_attached(...)]` attributes next to the struct
/// (generated code only; see `attached`).
#[doc(hidden)]
#[proc_macro_derive(RunledgerAttached, attributes(runledger_attached))]
pub fn attached(item: TokenStream) -> TokenStream {
    attached::expand(item.into()).into()
}
