//! `#[workflow]`: parse the struct's steps and edges, check the DAG (unknown steps, self and
//! duplicate edges, cycles, several results), then generate the step constants and the
//! `Workflow` impl.

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Fields, Ident, ItemStruct, Token, Type};

use crate::args::{self, Errors};

const USAGE: &str = "#[workflow(name = \"profiles.research\")]";
const STEP_USAGE: &str =
    "#[step(key = \"crawl\", priority = 10, max_attempts = 3, timeout = \"5m\")]";
const STEP_KEYS: &[&str] = &["key", "priority", "max_attempts", "timeout"];

/// One step: a field with its edges and options.
struct Step {
    field: Ident,
    ty: Type,
    key: String,
    after: Vec<Ident>,
    after_terminal: Vec<Ident>,
    options: Vec<TokenStream>,
}

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut item: ItemStruct = match args::parse_item(
        item,
        "#[workflow] goes on a struct with named fields, one per step",
    ) {
        Ok(parsed) => parsed,
        Err(unchanged) => return unchanged,
    };
    let mut errors = Errors::default();
    let mut name = None;
    for arg in args::parse_args(args, USAGE, &["name"], &mut errors) {
        name = args::lit_str(&arg.value, "name = \"profiles.research\"", &mut errors)
            .and_then(|lit| args::name(&lit, "workflow", &mut errors));
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
    check_graph(&steps, &mut errors);
    let mut out = quote!(#item);
    if errors.is_empty() {
        let name = name.unwrap_or_else(|| args::snake_case(&item.ident));
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
            if path.is_ident("after") || path.is_ident("after_terminal") {
                let into = if path.is_ident("after") {
                    &mut step.after
                } else {
                    &mut step.after_terminal
                };
                match attr.parse_args_with(Punctuated::<Ident, Token![,]>::parse_terminated) {
                    Ok(names) if !names.is_empty() => into.extend(names),
                    Ok(_) => {
                        errors.spanned(&attr, "expected at least one step, as in #[after(crawl)]");
                    }
                    Err(_) => {
                        errors.spanned(&attr, "expected step names, as in #[after(crawl, score)]");
                    }
                }
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

fn parse_step_options(attr: &syn::Attribute, step: &mut Step, errors: &mut Errors) {
    for arg in args::parse_args(args::attr_tokens(attr), STEP_USAGE, STEP_KEYS, errors) {
        let key = &arg.key;
        match key.to_string().as_str() {
            "key" => {
                if let Some(value) = args::lit_str(&arg.value, "key = \"crawl\"", errors)
                    .and_then(|lit| args::name(&lit, "step", errors))
                {
                    step.key = value;
                }
            }
            "priority" => {
                if let Some(n) = args::lit_int(&arg.value, key, i32::MIN, errors) {
                    step.options.push(quote!(.priority(#n)));
                }
            }
            "max_attempts" => {
                if let Some(n) = args::lit_int(&arg.value, key, 1, errors) {
                    step.options.push(quote!(.max_attempts(#n)));
                }
            }
            _ => {
                if let Some(n) = args::lit_str(&arg.value, "timeout = \"5m\"", errors)
                    .and_then(|lit| args::duration_seconds(&lit, 1, errors))
                {
                    step.options.push(quote!(.timeout_seconds(#n)));
                }
            }
        }
    }
}

/// Unknown steps, self edges, duplicate edges, then cycles (named in order).
fn check_graph(steps: &[Step], errors: &mut Errors) {
    let index: BTreeMap<String, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.field.to_string(), i))
        .collect();
    let known: Vec<String> = steps.iter().map(|s| s.field.to_string()).collect();
    let mut edges: Vec<Vec<(usize, &Ident)>> = vec![Vec::new(); steps.len()];
    for (i, step) in steps.iter().enumerate() {
        let mut seen: Vec<&Ident> = Vec::new();
        for prerequisite in step.after.iter().chain(&step.after_terminal) {
            if prerequisite == &step.field {
                errors.spanned(
                    prerequisite,
                    format!("step `{prerequisite}` cannot run after itself"),
                );
            } else if let Some(first) = seen.iter().find(|seen| **seen == prerequisite) {
                let _ = first;
                errors.spanned(
                    prerequisite,
                    format!(
                        "duplicate edge: `{}` already runs after `{prerequisite}`",
                        step.field
                    ),
                );
            } else if let Some(&target) = index.get(&prerequisite.to_string()) {
                edges[i].push((target, prerequisite));
            } else {
                errors.spanned(
                    prerequisite,
                    format!(
                        "unknown step `{prerequisite}`; the steps are: {}",
                        known.join(", ")
                    ),
                );
            }
            seen.push(prerequisite);
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        // Named in the order the steps would run: each one waits for the one before it.
        let mut names: Vec<String> = cycle
            .iter()
            .map(|&(node, _)| steps[node].field.to_string())
            .chain(std::iter::once(steps[cycle[0].0].field.to_string()))
            .collect();
        names.reverse();
        if let Some(&(_, closing)) = cycle.last() {
            errors.spanned(
                closing,
                format!("the steps form a cycle: {}", names.join(" -> ")),
            );
        }
    }
}

/// A cycle as (step, the edge token leading to the next step), following "runs after" edges.
fn find_cycle<'a>(edges: &[Vec<(usize, &'a Ident)>]) -> Option<Vec<(usize, &'a Ident)>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit<'a>(
        node: usize,
        edges: &[Vec<(usize, &'a Ident)>],
        marks: &mut [Mark],
        path: &mut Vec<(usize, &'a Ident)>,
    ) -> Option<Vec<(usize, &'a Ident)>> {
        marks[node] = Mark::Active;
        for &(next, token) in &edges[node] {
            path.push((node, token));
            match marks[next] {
                Mark::Active => {
                    let start = path.iter().position(|&(n, _)| n == next).unwrap_or(0);
                    return Some(path[start..].to_vec());
                }
                Mark::New => {
                    if let Some(cycle) = visit(next, edges, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
            path.pop();
        }
        marks[node] = Mark::Done;
        None
    }
    let mut marks = vec![Mark::New; edges.len()];
    for node in 0..edges.len() {
        if marks[node] == Mark::New {
            let mut path = Vec::new();
            if let Some(cycle) = visit(node, edges, &mut marks, &mut path) {
                return Some(cycle);
            }
        }
    }
    None
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
    let checks = steps.iter().map(|s| {
        let ty = &s.ty;
        quote_spanned!(ty.span()=> ::runledger::__private::assert_workflow_step::<#ty>();)
    });
    let constants = steps.iter().map(|s| {
        let constant = format_ident!(
            "{}",
            s.field.to_string().trim_start_matches("r#").to_uppercase(),
            span = s.field.span()
        );
        let (ty, key) = (&s.ty, &s.key);
        let doc = format!("Typed reference to step `{key}`.");
        let output = quote_spanned!(ty.span()=> <#ty as ::runledger::WorkflowStep>::Output);
        let kind = quote_spanned!(ty.span()=> <#ty as ::runledger::WorkflowStep>::Kind);
        quote! {
            #[doc = #doc]
            #vis const #constant: ::runledger::Step<#ident, #output, #kind> = ::runledger::Step::__new(#key);
        }
    });
    let specs = steps.iter().map(|s| {
        let (field, key, options) = (&s.field, &s.key, &s.options);
        let after: Vec<String> = s.after.iter().map(&key_of).collect();
        let after_terminal: Vec<String> = s.after_terminal.iter().map(&key_of).collect();
        let new =
            quote_spanned!(s.ty.span()=> ::runledger::__private::StepSpec::new(&self.#field, #key));
        quote! {
            #new?
                .after(&[#(#after),*])
                .after_terminal(&[#(#after_terminal),*])
                #(#options)*
        }
    });
    let (result_step, output) = match result.and_then(|r| steps.iter().find(|s| &s.field == r)) {
        Some(step) => {
            let (key, ty) = (&step.key, &step.ty);
            (
                quote!(::core::option::Option::Some(#key)),
                quote!(<#ty as ::runledger::WorkflowStep>::Output),
            )
        }
        None => (quote!(::core::option::Option::None), quote!(())),
    };
    quote! {
        const _: () = {
            #(#checks)*
        };

        #[automatically_derived]
        impl #ident {
            #(#constants)*
        }

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
                ::core::result::Result::Ok(::std::vec![#(#specs),*])
            }
        }
    }
}
