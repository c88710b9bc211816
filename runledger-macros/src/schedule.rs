//! `#[schedule]`: a cron schedule for a job payload, validated at compile time and registered
//! through `inventory`. On a plain fn the fn returns the payload of each fire; stacked on a
//! `#[job]` fn (see `stacked`), each fire enqueues the job without arguments.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, LitStr, ReturnType};

use crate::args;
use crate::errors::Errors;
use crate::job;
use crate::syntax;

pub(crate) const USAGE: &str = "#[schedule(cron = \"0 */5 * * * *\", name = \"reports.refresh\")]";

#[derive(Clone, Copy)]
enum Key {
    Cron,
    Name,
    Jitter,
    Active,
}

const KEYS: &[(&str, Key)] = &[
    ("cron", Key::Cron),
    ("name", Key::Name),
    ("jitter", Key::Jitter),
    ("active", Key::Active),
];

struct ScheduleArgs {
    cron: Option<String>,
    name: Option<String>,
    jitter_seconds: i32,
    active: bool,
}

/// Expands the `#[schedule]`s of a plain fn that returns the payload to enqueue.
pub(crate) fn expand(schedules: Vec<TokenStream>, function: &ItemFn) -> TokenStream {
    let mut errors = Errors::default();
    let parsed: Vec<ScheduleArgs> = schedules
        .into_iter()
        .map(|tokens| parse_args(tokens, &mut errors))
        .collect();
    let sig = &function.sig;
    if let Some(asyncness) = sig.asyncness {
        errors.spanned(
            asyncness,
            "a #[schedule] fn returns the job payload synchronously; to schedule a job fn without arguments, put #[schedule] on the #[job] fn itself",
        );
    }
    if !sig.inputs.is_empty() {
        errors.spanned(&sig.inputs, "a #[schedule] fn takes no arguments");
    }
    let payload_type = match &sig.output {
        ReturnType::Type(_, ty) => Some(ty),
        ReturnType::Default => {
            errors.spanned(
                sig,
                "a #[schedule] fn returns the payload of the job to enqueue",
            );
            None
        }
    };
    let mut out = quote!(#function);
    if let (Some(ty), true) = (payload_type, errors.is_empty()) {
        let fn_name = &sig.ident;
        let body = quote_spanned!(ty.span()=> ::runledger::__private::schedule_payload(#fn_name()));
        for schedule in &parsed {
            out.extend(registration(schedule, fn_name, &body));
        }
    }
    out.extend(errors.into_compile_errors());
    out
}

/// The registration of a `#[schedule]` stacked on a `#[job]` fn: each fire enqueues `{}`, so
/// every argument must be optional.
pub(crate) fn expand_stacked(
    tokens: TokenStream,
    function: &ItemFn,
    payload: &Ident,
    errors: &mut Errors,
) -> TokenStream {
    let parsed = parse_args(tokens, errors);
    for input in &function.sig.inputs {
        let FnArg::Typed(typed) = input else { continue };
        if !job::is_context(&typed.ty) && !syntax::is_named(&typed.ty, "Option") {
            errors.spanned(
                &typed.ty,
                "a #[schedule] on a #[job] fn enqueues it without arguments, so each argument must be an `Option`; or return the payload from a separate #[schedule] fn",
            );
        }
    }
    let body = quote!(::runledger::__private::schedule_empty_payload::<#payload>());
    registration(&parsed, &function.sig.ident, &body)
}

fn parse_args(tokens: TokenStream, errors: &mut Errors) -> ScheduleArgs {
    let mut parsed = ScheduleArgs {
        cron: None,
        name: None,
        jitter_seconds: 0,
        active: true,
    };
    let usage_span = tokens.span();
    for arg in args::parse(tokens, USAGE, KEYS, errors) {
        match arg.key {
            Key::Cron => {
                parsed.cron = args::lit_str(&arg.value, "cron = \"0 */5 * * * *\"", errors)
                    .and_then(|lit| cron(&lit, errors));
            }
            Key::Name => {
                parsed.name = args::lit_str(&arg.value, "name = \"reports.refresh\"", errors)
                    .and_then(|lit| args::name(&lit, "schedule name", errors));
            }
            Key::Jitter => {
                if let Some(n) = args::lit_str(&arg.value, "jitter = \"30s\"", errors)
                    .and_then(|lit| args::duration_seconds(&lit, 0, errors))
                {
                    parsed.jitter_seconds = n;
                }
            }
            Key::Active => {
                if let Some(active) = args::lit_bool(&arg.value, &arg.ident, errors) {
                    parsed.active = active;
                }
            }
        }
    }
    if parsed.cron.is_none() && errors.is_empty() {
        errors.at(usage_span, format!("missing `cron`; expected {USAGE}"));
    }
    parsed
}

fn cron(lit: &LitStr, errors: &mut Errors) -> Option<String> {
    let expression = lit.value();
    match runledger_cron::CronSchedule::parse(&expression) {
        Ok(_) => Some(expression),
        Err(err) => {
            errors.spanned(
                lit,
                format!(
                    "invalid cron expression \"{expression}\": {}; expected `sec min hour day month weekday` (seconds first, optional year), a 5-field crontab line, or an alias such as @hourly",
                    err.internal_message()
                ),
            );
            None
        }
    }
}

fn registration(parsed: &ScheduleArgs, fn_name: &Ident, payload: &TokenStream) -> TokenStream {
    let name = parsed
        .name
        .clone()
        .unwrap_or_else(|| fn_name.to_string().trim_start_matches("r#").to_owned());
    let cron = parsed.cron.clone().unwrap_or_default();
    let jitter = parsed.jitter_seconds;
    let active = parsed.active;
    quote! {
        const _: () = {
            fn __runledger_schedule_payload() -> ::core::result::Result<
                (&'static str, ::runledger::__private::serde_json::Value),
                ::std::string::String,
            > {
                #payload
            }

            ::runledger::__private::inventory::submit! {
                ::runledger::__private::ScheduleRegistration::new(
                    #name,
                    #cron,
                    #jitter,
                    #active,
                    __runledger_schedule_payload,
                    ::core::file!(),
                    ::core::line!(),
                    ::core::column!(),
                )
            }
        };
    }
}
