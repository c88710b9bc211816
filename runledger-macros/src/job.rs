//! `#[job]`: parse the fn and its arguments, validate, then generate the payload struct, the
//! `Job` impl and the registration.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type};

use crate::args::{self, Errors};
use crate::schedule;

const USAGE: &str = "#[job(name = \"emails.send\", max_attempts = 5, timeout = \"30s\")]";
const KEYS: &[&str] = &[
    "name",
    "payload",
    "max_attempts",
    "timeout",
    "priority",
    "version",
    "enabled",
];

/// What the attribute says.
#[derive(Default)]
pub(crate) struct JobArgs {
    pub(crate) name: Option<String>,
    pub(crate) payload: Option<Ident>,
    defaults: Vec<TokenStream>,
}

/// One payload field: an argument of the fn.
struct Field {
    ident: Ident,
    ty: Type,
}

/// The parsed fn.
struct JobFn {
    has_receiver: bool,
    takes_context: bool,
    fields: Vec<Field>,
    output: Option<Type>,
    error: Option<Type>,
}

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut function: ItemFn = match args::parse_item(
        item,
        &format!("#[job] goes on an `async fn`, as in {USAGE}"),
    ) {
        Ok(parsed) => parsed,
        Err(unchanged) => return unchanged,
    };
    let mut errors = Errors::default();
    let job_args = parse_job_args(args, &mut errors);
    // A #[schedule] stacked below #[job] is expanded here, so the order does not matter.
    let schedules = schedule::take_stacked(&mut function.attrs);
    let model = parse_fn(&function, &mut errors);
    let payload = payload_ident(&job_args, &function.sig.ident);
    let mut out = quote!(#function);
    if model.has_receiver {
        // A method: generating a payload struct inside an `impl` block cannot work.
        out.extend(errors.into_compile_errors());
        return out;
    }
    out.extend(payload_struct(&function, &payload, &model));
    if errors.is_empty() {
        out.extend(job_impl(&function, &job_args, &payload, &model));
    }
    for schedule_args in schedules {
        out.extend(schedule::expand_stacked(
            schedule_args,
            &function,
            &payload,
            &mut errors,
        ));
    }
    out.extend(errors.into_compile_errors());
    out
}

pub(crate) fn parse_job_args(tokens: TokenStream, errors: &mut Errors) -> JobArgs {
    let mut parsed = JobArgs::default();
    for arg in args::parse_args(tokens, USAGE, KEYS, errors) {
        let key = &arg.key;
        match key.to_string().as_str() {
            "name" => {
                parsed.name = args::lit_str(&arg.value, "name = \"emails.send\"", errors)
                    .and_then(|lit| args::name(&lit, "job", errors));
            }
            "payload" => match &arg.value {
                syn::Expr::Path(path) if path.path.get_ident().is_some() => {
                    parsed.payload = path.path.get_ident().cloned();
                }
                other => errors.spanned(other, "expected a type name, as in payload = SendMail"),
            },
            "max_attempts" | "version" => {
                if let Some(n) = args::lit_int(&arg.value, key, 1, errors) {
                    parsed.defaults.push(quote!(.#key(#n)));
                }
            }
            "priority" => {
                if let Some(n) = args::lit_int(&arg.value, key, i32::MIN, errors) {
                    parsed.defaults.push(quote!(.priority(#n)));
                }
            }
            "timeout" => {
                if let Some(n) = args::lit_str(&arg.value, "timeout = \"30s\"", errors)
                    .and_then(|lit| args::duration_seconds(&lit, 1, errors))
                {
                    parsed.defaults.push(quote!(.timeout_seconds(#n)));
                }
            }
            _ => {
                if let Some(b) = args::lit_bool(&arg.value, key, errors) {
                    parsed.defaults.push(quote!(.enabled(#b)));
                }
            }
        }
    }
    parsed
}

pub(crate) fn payload_ident(job_args: &JobArgs, fn_name: &Ident) -> Ident {
    job_args
        .payload
        .clone()
        .unwrap_or_else(|| args::pascal_case(fn_name))
}

/// Whether an argument is the leading `JobContext`.
pub(crate) fn is_context(ty: &Type) -> bool {
    args::last_segment(ty).is_some_and(|segment| segment.ident == "JobContext")
}

fn parse_fn(function: &ItemFn, errors: &mut Errors) -> JobFn {
    let sig = &function.sig;
    if sig.asyncness.is_none() {
        errors.spanned(sig.fn_token, "#[job] needs an `async fn`");
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.spanned(
            &sig.generics,
            "a #[job] fn cannot be generic: its arguments become a concrete payload struct",
        );
    }
    let mut model = JobFn {
        has_receiver: false,
        takes_context: false,
        fields: Vec::new(),
        output: None,
        error: None,
    };
    for (index, input) in sig.inputs.iter().enumerate() {
        match input {
            FnArg::Receiver(receiver) => {
                model.has_receiver = true;
                errors.spanned(
                    receiver,
                    "a #[job] fn cannot take `self`: jobs are free functions of their arguments",
                );
            }
            FnArg::Typed(typed) if is_context(&typed.ty) => {
                if index == 0 {
                    model.takes_context = true;
                } else {
                    errors.spanned(&typed.ty, "`JobContext` must be the first argument");
                }
            }
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                    model.fields.push(Field {
                        ident: pat.ident.clone(),
                        ty: (*typed.ty).clone(),
                    });
                }
                other => errors.spanned(
                    other,
                    "expected `name: Type`: each argument becomes a named payload field",
                ),
            },
        }
    }
    match &sig.output {
        ReturnType::Type(_, ty) => match result_types(ty) {
            Some((output, error)) => {
                model.output = Some(output);
                model.error = error;
            }
            None => errors.spanned(
                ty,
                "a #[job] fn returns `Result<T, E>` where `T` is the output and `E: Into<JobError>`",
            ),
        },
        ReturnType::Default => errors.spanned(
            sig,
            "a #[job] fn returns `Result<T, E>` where `T` is the output and `E: Into<JobError>`",
        ),
    }
    model
}

/// `Result<T, E>` → (T, Some(E)); `Result<T>` (an alias) → (T, None).
fn result_types(ty: &Type) -> Option<(Type, Option<Type>)> {
    let segment = args::last_segment(ty).filter(|s| s.ident == "Result")?;
    let PathArguments::AngleBracketed(generic) = &segment.arguments else {
        return None;
    };
    let mut types = generic.args.iter().filter_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty.clone()),
        _ => None,
    });
    let output = types.next()?;
    Some((output, types.next()))
}

fn payload_struct(function: &ItemFn, payload: &Ident, model: &JobFn) -> TokenStream {
    let vis = &function.vis;
    let fn_name = &function.sig.ident;
    let doc = format!("Payload of the job [`{fn_name}`]: its arguments, stored as JSON.");
    let fields = model
        .fields
        .iter()
        .map(|Field { ident, ty }| quote!(pub #ident: #ty));
    quote! {
        #[doc = #doc]
        #[derive(::core::fmt::Debug, ::core::clone::Clone, ::runledger::__private::serde::Serialize, ::runledger::__private::serde::Deserialize)]
        #[serde(crate = "::runledger::__private::serde")]
        #vis struct #payload {
            #(#fields,)*
        }
    }
}

fn job_impl(function: &ItemFn, job_args: &JobArgs, payload: &Ident, model: &JobFn) -> TokenStream {
    let fn_name = &function.sig.ident;
    let name = job_args
        .name
        .clone()
        .unwrap_or_else(|| fn_name.to_string().trim_start_matches("r#").to_owned());
    let defaults = &job_args.defaults;
    let Some(output) = &model.output else {
        return TokenStream::new();
    };
    let field_names: Vec<&Ident> = model.fields.iter().map(|f| &f.ident).collect();
    let context = model.takes_context.then(|| quote!(ctx,));
    let unused = (!model.takes_context).then(|| quote!(let _ = ctx;));
    let mut checks: Vec<TokenStream> = model
        .fields
        .iter()
        .map(|Field { ty, .. }| {
            quote_spanned!(ty.span()=> ::runledger::__private::assert_job_argument::<#ty>();)
        })
        .collect();
    checks.push(
        quote_spanned!(output.span()=> ::runledger::__private::assert_job_output::<#output>();),
    );
    if let Some(error) = &model.error {
        checks.push(
            quote_spanned!(error.span()=> ::runledger::__private::assert_job_error::<#error>();),
        );
    }
    quote! {
        const _: () = {
            #(#checks)*
        };

        #[automatically_derived]
        impl ::runledger::Job for #payload {
            const NAME: &'static str = #name;
            const DEFAULTS: ::runledger::JobDefaults = ::runledger::JobDefaults::new() #(#defaults)*;
            type Output = #output;

            fn run(
                self,
                ctx: ::runledger::JobContext,
            ) -> impl ::core::future::Future<
                Output = ::core::result::Result<Self::Output, ::runledger::JobError>,
            > + ::core::marker::Send {
                #unused
                async move {
                    #fn_name(#context #(self.#field_names),*)
                        .await
                        .map_err(::runledger::__private::into_job_error)
                }
            }
        }

        ::runledger::__private::inventory::submit! {
            ::runledger::__private::JobRegistration::new::<#payload>(
                ::core::file!(),
                ::core::line!(),
                ::core::column!(),
            )
        }
    }
}
