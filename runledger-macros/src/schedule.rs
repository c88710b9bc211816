//! `#[schedule]`: a cron schedule for a job payload, validated at compile time and registered
//! through `inventory`. On a plain fn the fn returns the payload of each fire; stacked on a
//! `#[job]` fn (see `stacked`), each fire enqueues the job without arguments.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, LitStr, ReturnType};

use crate::args;
use crate::errors::Errors;
use crate::syntax;

pub(crate) const USAGE: &str =
    "#[schedule(cron = \"0 3 * * 1-5\", tz = \"Europe/Berlin\", name = \"reports.refresh\")]";

#[derive(Clone, Copy)]
enum Key {
    Cron,
    Tz,
    Name,
    Jitter,
    Active,
}

const KEYS: &[(&str, Key)] = &[
    ("cron", Key::Cron),
    ("tz", Key::Tz),
    ("name", Key::Name),
    ("jitter", Key::Jitter),
    ("active", Key::Active),
];

struct ScheduleArgs {
    cron: Option<LitStr>,
    time_zone: Option<(LitStr, runledger_cron::TimeZone)>,
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
        if !syntax::is_context(&typed.ty) && !syntax::is_named(&typed.ty, "Option") {
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
        time_zone: None,
        name: None,
        jitter_seconds: 0,
        active: true,
    };
    let usage_span = tokens.span();
    for arg in args::parse(tokens, USAGE, KEYS, errors) {
        match arg.key {
            Key::Cron => {
                parsed.cron = args::lit_str(&arg.value, "cron = \"0 */5 * * * *\"", errors);
            }
            Key::Tz => {
                parsed.time_zone = args::lit_str(&arg.value, "tz = \"Europe/Berlin\"", errors)
                    .and_then(|lit| time_zone(&lit, errors).map(|tz| (lit, tz)));
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
    match &parsed.cron {
        Some(lit) => {
            let time_zone = parsed.time_zone.as_ref().map(|(_, tz)| *tz);
            if !cron(lit, time_zone.unwrap_or_default(), errors) {
                parsed.cron = None;
            }
        }
        None if errors.is_empty() => {
            errors.at(usage_span, format!("missing `cron`; expected {USAGE}"));
        }
        None => {}
    }
    parsed
}

/// Checks the expression with the scheduler's own parser: malformed, or matching no date.
fn cron(lit: &LitStr, time_zone: runledger_cron::TimeZone, errors: &mut Errors) -> bool {
    let expression = lit.value();
    let Err(err) = runledger_cron::CronSchedule::parse_in(&expression, time_zone) else {
        return true;
    };
    let message = if err.never_fires() {
        format!(
            "the cron expression \"{expression}\" never fires: no date matches all of its fields (day-of-month, month, day-of-week and year must all match)"
        )
    } else {
        format!(
            "invalid cron expression \"{expression}\": {}; expected `min hour day month weekday` (5 fields), `sec min hour day month weekday [year]`, or an alias such as @hourly; weekdays are 0-7 (0 and 7 are Sunday) or MON-SUN",
            err.internal_message()
        )
    };
    errors.spanned(lit, message);
    false
}

/// An IANA time zone name, checked against the database the scheduler uses.
fn time_zone(lit: &LitStr, errors: &mut Errors) -> Option<runledger_cron::TimeZone> {
    match runledger_cron::TimeZone::parse(&lit.value()) {
        Ok(time_zone) => Some(time_zone),
        Err(err) => {
            let hint = match err.suggestion() {
                Some(name) => format!("did you mean \"{name}\"?"),
                None => "expected an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\"".to_owned(),
            };
            errors.spanned(
                lit,
                format!("unknown time zone \"{}\"; {hint}", lit.value()),
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
    let cron = parsed.cron.as_ref().map(LitStr::value).unwrap_or_default();
    let time_zone = parsed.time_zone.as_ref().map_or("UTC", |(_, tz)| tz.name());
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
                    #time_zone,
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
