//! `#[schedule]`: a cron schedule for a job payload, validated at compile time and registered
//! through `inventory`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, ItemFn, LitStr, ReturnType};

use crate::args::{self, Errors};
use crate::job;

const USAGE: &str = "#[schedule(cron = \"0 */5 * * * *\", name = \"reports.refresh\")]";
const KEYS: &[&str] = &["cron", "name", "jitter", "active"];

struct ScheduleArgs {
    cron: Option<String>,
    name: Option<String>,
    jitter_seconds: i32,
    active: bool,
}

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut function: ItemFn = match args::parse_item(
        item,
        &format!("#[schedule] goes on a fn that returns a job payload, as in {USAGE}"),
    ) {
        Ok(parsed) => parsed,
        Err(unchanged) => return unchanged,
    };
    let mut errors = Errors::default();
    // Stacked on a #[job] fn: let #[job] expand both (it takes the schedule back off the fn).
    if let Some(position) = function.attrs.iter().position(|a| args::is_attr(a, "job")) {
        let job_attr = function.attrs.remove(position);
        function.attrs.push(syn::parse_quote!(#[schedule(#args)]));
        return job::expand(args::attr_tokens(&job_attr), quote!(#function));
    }
    let parsed = parse_schedule_args(args, &mut errors);
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
        out.extend(registration(&parsed, fn_name, &body));
    }
    out.extend(errors.into_compile_errors());
    out
}

/// Removes the `#[schedule(...)]` attributes of a `#[job]` fn and returns their arguments.
pub(crate) fn take_stacked(attrs: &mut Vec<Attribute>) -> Vec<TokenStream> {
    let mut taken = Vec::new();
    attrs.retain(|attr| {
        if args::is_attr(attr, "schedule") {
            taken.push(args::attr_tokens(attr));
            false
        } else {
            true
        }
    });
    taken
}

/// The registration of a `#[schedule]` stacked on a `#[job]` fn: each fire enqueues `{}`, so
/// every argument must be optional.
pub(crate) fn expand_stacked(
    args: TokenStream,
    function: &ItemFn,
    payload: &Ident,
    errors: &mut Errors,
) -> TokenStream {
    let parsed = parse_schedule_args(args, errors);
    for input in &function.sig.inputs {
        let FnArg::Typed(typed) = input else { continue };
        let optional = args::last_segment(&typed.ty).is_some_and(|s| s.ident == "Option");
        if !job::is_context(&typed.ty) && !optional {
            errors.spanned(
                &typed.ty,
                "a #[schedule] on a #[job] fn enqueues it without arguments, so each argument must be an `Option`; or return the payload from a separate #[schedule] fn",
            );
        }
    }
    if !errors.is_empty() {
        return TokenStream::new();
    }
    let body = quote!(::runledger::__private::schedule_empty_payload::<#payload>());
    registration(&parsed, &function.sig.ident, &body)
}

fn parse_schedule_args(tokens: TokenStream, errors: &mut Errors) -> ScheduleArgs {
    let mut parsed = ScheduleArgs {
        cron: None,
        name: None,
        jitter_seconds: 0,
        active: true,
    };
    let usage_span = tokens.span();
    for arg in args::parse_args(tokens, USAGE, KEYS, errors) {
        let key = &arg.key;
        match key.to_string().as_str() {
            "cron" => {
                parsed.cron = args::lit_str(&arg.value, "cron = \"0 */5 * * * *\"", errors)
                    .and_then(|lit| cron(&lit, errors));
            }
            "name" => {
                parsed.name = args::lit_str(&arg.value, "name = \"reports.refresh\"", errors)
                    .and_then(|lit| args::name(&lit, "schedule", errors));
            }
            "jitter" => {
                if let Some(n) = args::lit_str(&arg.value, "jitter = \"30s\"", errors)
                    .and_then(|lit| args::duration_seconds(&lit, 0, errors))
                {
                    parsed.jitter_seconds = n;
                }
            }
            _ => {
                if let Some(active) = args::lit_bool(&arg.value, key, errors) {
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
