//! `#[job]` and `#[schedule]` on one fn, in any order: the attribute the compiler expands
//! first takes the others off the fn and hands each to the module that owns it, so every
//! attribute is expanded exactly once and no module re-emits another's attribute. On a job fn,
//! this module joins the two: `job` asks it for the registrations of the stacked schedules,
//! which `schedule` builds from the job's payload type. Neither of the two imports the other.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemFn;

use crate::errors::Errors;
use crate::{job, schedule, syntax};

/// The attribute being expanded, with its arguments.
pub(crate) enum Attribute {
    Job(TokenStream),
    Schedule(TokenStream),
}

pub(crate) fn expand(first: Attribute, item: TokenStream) -> TokenStream {
    let message = match first {
        Attribute::Job(_) => format!("#[job] goes on an `async fn`, as in {}", job::USAGE),
        Attribute::Schedule(_) => format!(
            "#[schedule] goes on a fn that returns a job payload, as in {}",
            schedule::USAGE
        ),
    };
    let mut function: ItemFn = match syntax::parse_item(item, &message) {
        Ok(parsed) => parsed,
        Err(unchanged) => return unchanged,
    };
    let (mut jobs, mut schedules) = match first {
        Attribute::Job(args) => (vec![args], Vec::new()),
        Attribute::Schedule(args) => (Vec::new(), vec![args]),
    };
    let mut errors = Errors::default();
    function.attrs.retain(|attr| {
        if syntax::is_attr(attr, "job") {
            if jobs.is_empty() {
                jobs.push(syntax::attr_tokens(attr));
            } else {
                errors.spanned(attr, "a fn is one job: remove the second #[job]");
            }
            false
        } else if syntax::is_attr(attr, "schedule") {
            schedules.push(syntax::attr_tokens(attr));
            false
        } else {
            true
        }
    });
    let mut out = match jobs.pop() {
        Some(args) => job::expand(args, &function, |function, payload, errors| {
            schedules
                .into_iter()
                .map(|tokens| schedule::expand_stacked(tokens, function, payload, errors))
                .collect()
        }),
        None => schedule::expand(schedules, &function),
    };
    out.extend(errors.into_compile_errors());
    quote!(#out)
}
