//! `#[workflow]`: parse the struct's steps, their edges and options, check the DAG, then
//! generate the step constants, the `Workflow` impl, the step checks and the registration.

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Fields, Ident, ItemStruct, Token, Type};

use crate::args;
use crate::case;
use crate::errors::Errors;
use crate::graph;
use crate::syntax;

const USAGE: &str = "#[workflow(name = \"profiles.research\")]";
const STEP_USAGE: &str =
    "#[step(key = \"crawl\", priority = 10, max_attempts = 3, timeout = \"5m\")]";

#[derive(Clone, Copy)]
enum Key {
    Name,
}

const KEYS: &[(&str, Key)] = &[("name", Key::Name)];

#[derive(Clone, Copy)]
enum StepKey {
    Key,
    Priority,
    MaxAttempts,
    Timeout,
    Continuation,
}

const STEP_KEYS: &[(&str, StepKey)] = &[
    ("key", StepKey::Key),
    ("priority", StepKey::Priority),
    ("max_attempts", StepKey::MaxAttempts),
    ("timeout", StepKey::Timeout),
    ("continuation", StepKey::Continuation),
];

/// One step: a field with its edges and options.
struct Step {
    field: Ident,
    ty: Type,
    key: String,
    after: Vec<Ident>,
    after_terminal: Vec<Ident>,
    /// `StepSpec` builder calls, each with the option key as written (for the gate check).
    options: Vec<(Ident, TokenStream)>,
}

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut item: ItemStruct = match syntax::parse_item(
        item,
        "#[workflow] goes on a struct with named fields, one per step",
    ) {
        Ok(parsed) => parsed,
        Err(unchanged) => return unchanged,
    };
    let mut errors = Errors::default();
    let mut name = None;
    for arg in args::parse(args, USAGE, KEYS, &mut errors) {
        match arg.key {
            Key::Name => {
                name = args::lit_str(&arg.value, "name = \"profiles.research\"", &mut errors)
                    .and_then(|lit| args::name(&lit, "workflow name", &mut errors));
            }
        }
    }
    if !item.generics.params.is_empty() {
        errors.spanned(&item.generics, "a #[workflow] struct cannot be generic");
    }
    let (steps, result) = parse_steps(&mut item, &mut errors);
    if !matches!(item.fields, Fields::Named(_)) {
        errors.spanned(&item.ident, "#[workflow] needs named fields, one per step");
    } else if steps.is_empty() {
        errors.spanned(&item.ident, "a #[workflow] needs at least one step field");
    }
    let nodes: Vec<graph::Node<'_>> = steps
        .iter()
        .map(|step| graph::Node {
            field: &step.field,
            after: step.after.iter().chain(&step.after_terminal).collect(),
        })
        .collect();
    graph::check(&nodes, &mut errors);
    let mut out = quote!(#item);
    if errors.is_empty() {
        let name = name.unwrap_or_else(|| case::snake_case(&item.ident.to_string()));
        out.extend(workflow_impl(&item, &name, &steps, result.as_ref()));
    }
    out.extend(errors.into_compile_errors());
    out
}

/// Reads and strips the step attributes of every field; returns the steps and the result step.
fn parse_steps(item: &mut ItemStruct, errors: &mut Errors) -> (Vec<Step>, Option<Ident>) {
    let mut steps = Vec::new();
    let mut result: Option<Ident> = None;
    let Fields::Named(fields) = &mut item.fields else {
        return (steps, result);
    };
    for field in &mut fields.named {
        let Some(ident) = field.ident.clone() else {
            continue;
        };
        let mut step = Step {
            key: ident.to_string().trim_start_matches("r#").to_owned(),
            field: ident.clone(),
            ty: field.ty.clone(),
            after: Vec::new(),
            after_terminal: Vec::new(),
            options: Vec::new(),
        };
        let mut kept = Vec::new();
        for attr in field.attrs.drain(..) {
            let path = attr.path();
            if path.is_ident("after") {
                parse_edges(&attr, &mut step.after, errors);
            } else if path.is_ident("after_terminal") {
                parse_edges(&attr, &mut step.after_terminal, errors);
            } else if path.is_ident("result") {
                if !matches!(attr.meta, syn::Meta::Path(_)) {
                    errors.spanned(&attr, "#[result] takes no arguments");
                }
                match &result {
                    Some(first) => errors.spanned(
                        &attr,
                        format!("only one step can be the #[result]; `{first}` already is"),
                    ),
                    None => result = Some(ident.clone()),
                }
            } else if path.is_ident("step") {
                parse_step_options(&attr, &mut step, errors);
            } else {
                kept.push(attr);
            }
        }
        field.attrs = kept;
        if let Err(problem) = runledger_names::check(&step.key) {
            errors.spanned(
                &step.field,
                format!(
                    "the step key `{}` {problem}; set one with #[step(key = \"...\")]",
                    step.key
                ),
            );
        }
        steps.push(step);
    }
    let mut keys: BTreeMap<&str, &Ident> = BTreeMap::new();
    for step in &steps {
        if let Some(first) = keys.insert(&step.key, &step.field) {
            errors.spanned(
                &step.field,
                format!("step key \"{}\" is also the key of `{first}`", step.key),
            );
        }
    }
    (steps, result)
}

fn parse_edges(attr: &Attribute, into: &mut Vec<Ident>, errors: &mut Errors) {
    match attr.parse_args_with(Punctuated::<Ident, Token![,]>::parse_terminated) {
        Ok(names) if !names.is_empty() => into.extend(names),
        Ok(_) => errors.spanned(attr, "expected at least one step, as in #[after(crawl)]"),
        Err(_) => errors.spanned(attr, "expected step names, as in #[after(crawl, score)]"),
    }
}

fn parse_step_options(attr: &Attribute, step: &mut Step, errors: &mut Errors) {
    for arg in args::parse(syntax::attr_tokens(attr), STEP_USAGE, STEP_KEYS, errors) {
        let ident = arg.ident;
        match arg.key {
            StepKey::Key => {
                if let Some(value) = args::lit_str(&arg.value, "key = \"crawl\"", errors)
                    .and_then(|lit| args::name(&lit, "step key", errors))
                {
                    step.key = value;
                }
            }
            StepKey::Priority => {
                if let Some(n) = args::lit_int(&arg.value, &ident, i32::MIN, errors) {
                    step.options.push((ident, quote!(.priority(#n))));
                }
            }
            StepKey::MaxAttempts => {
                if let Some(n) = args::lit_int(&arg.value, &ident, 1, errors) {
                    step.options.push((ident, quote!(.max_attempts(#n))));
                }
            }
            StepKey::Timeout => {
                if let Some(n) = args::lit_str(&arg.value, "timeout = \"5m\"", errors)
                    .and_then(|lit| args::duration_seconds(&lit, 1, errors))
                {
                    step.options.push((ident, quote!(.timeout_seconds(#n))));
                }
            }
            StepKey::Continuation => {
                if let Some(true) = args::lit_bool(&arg.value, &ident, errors) {
                    step.options.push((ident, quote!(.allow_continuation())));
                }
            }
        }
    }
}

fn workflow_impl(
    item: &ItemStruct,
    name: &str,
    steps: &[Step],
    result: Option<&Ident>,
) -> TokenStream {
    let ident = &item.ident;
    let vis = &item.vis;
    let keys: BTreeMap<String, &str> = steps
        .iter()
        .map(|s| (s.field.to_string(), s.key.as_str()))
        .collect();
    let key_of = |i: &Ident| {
        keys.get(&i.to_string())
            .copied()
            .unwrap_or_default()
            .to_owned()
    };
    let constants = steps.iter().map(|s| {
        let constant = format_ident!(
            "{}",
            s.field.to_string().trim_start_matches("r#").to_uppercase(),
            span = s.field.span()
        );
        let (ty, key) = (&s.ty, &s.key);
        let doc = format!("Typed reference to step `{key}`.");
        quote! {
            #[doc = #doc]
            #vis const #constant: ::runledger::Step<#ident, #ty> = ::runledger::Step::__new(#key);
        }
    });
    let option_checks = steps.iter().flat_map(|s| {
        let ty = &s.ty;
        s.options.iter().map(move |(key, _)| {
            quote_spanned!(key.span()=> (&&Probe::<#ty>::new()).check_step_option();)
        })
    });
    let specs = steps.iter().map(|s| {
        let (field, ty, key) = (&s.field, &s.ty, &s.key);
        let options = s.options.iter().map(|(_, call)| call);
        let after: Vec<String> = s.after.iter().map(&key_of).collect();
        let after_terminal: Vec<String> = s.after_terminal.iter().map(&key_of).collect();
        let spec =
            quote_spanned!(ty.span()=> (&&&&&Probe::<#ty>::new()).step_spec(&self.#field, #key));
        quote! {
            #spec?
                .after(&[#(#after),*])
                .after_terminal(&[#(#after_terminal),*])
                #(#options)*
        }
    });
    let read_checks = steps
        .iter()
        .filter(|s| !is_readless(&s.ty))
        .map(|s| read_check(name, s, &key_of));
    let (result_step, output) = match result.and_then(|r| steps.iter().find(|s| &s.field == r)) {
        Some(step) => {
            let (key, ty) = (&step.key, &step.ty);
            (
                quote!(::core::option::Option::Some(#key)),
                quote_spanned!(ty.span()=> <#ty as ::runledger::WorkflowStep>::Output),
            )
        }
        None => (quote!(::core::option::Option::None), quote!(())),
    };
    quote! {
        #[automatically_derived]
        impl #ident {
            #(#constants)*
        }

        const _: () = {
            #[automatically_derived]
            impl ::runledger::Workflow for #ident {
                const NAME: &'static str = #name;
                const RESULT_STEP: ::core::option::Option<&'static str> = #result_step;
                type Output = #output;

                fn __steps(
                    &self,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<::runledger::__private::StepSpec>,
                    ::runledger::Error,
                > {
                    use ::runledger::__private::checks::*;
                    ::core::result::Result::Ok(::std::vec![#(#specs),*])
                }
            }

            /// The step options `#[workflow]` checks: each on the user's token.
            #[allow(dead_code)]
            fn __runledger_checks() {
                use ::runledger::__private::checks::*;
                #(#option_checks)*
            }

            #(#read_checks)*

            /// A workflow reads nothing as a step; `#[workflow]` refuses it as one, with its own
            /// message, and this keeps the read check from reporting it a second time.
            #[automatically_derived]
            impl ::runledger::__private::StepReads for #ident {
                const READS: &'static [::runledger::__private::ReadDecl] = &[];
            }

            ::runledger::__private::inventory::submit! {
                ::runledger::__private::WorkflowRegistration::new::<#ident>(
                    ::core::file!(),
                    ::core::line!(),
                    ::core::column!(),
                )
            }
        };
    }
}

/// `Vec` and `Option` fields are no steps; the step check says what to write instead, and
/// the read check stays out of its way.
fn is_readless(ty: &Type) -> bool {
    ["Vec", "Option"]
        .iter()
        .any(|name| syntax::is_named(ty, name))
}

/// The constant that checks a step's `#[output(..)]` reads against its edges, evaluated by the
/// compiler, failing on the step's field with a message that names both steps.
fn read_check(workflow: &str, step: &Step, key_of: &impl Fn(&Ident) -> String) -> TokenStream {
    let ty = &step.ty;
    let key = &step.key;
    let edges = step
        .after
        .iter()
        .map(|p| {
            let key = key_of(p);
            quote!(::runledger::__private::Edge::after(#key))
        })
        .chain(step.after_terminal.iter().map(|p| {
            let key = key_of(p);
            quote!(::runledger::__private::Edge::after_terminal(#key))
        }));
    quote_spanned! {step.field.span()=>
        const _: () = if let ::core::option::Option::Some(problem) =
            ::runledger::__private::check_reads::<#ty>(#workflow, #key, &[#(#edges),*])
        {
            ::core::panic!("{}", problem.message())
        };
    }
}
