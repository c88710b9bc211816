//! `#[job]`: parse the attribute and the fn, check them, then generate the payload struct, the
//! `Job` impl, the type checks and the registration.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ItemFn, Pat, ReturnType, Type, TypeReference};

use crate::args;
use crate::case;
use crate::errors::Errors;
use crate::syntax;

pub(crate) const USAGE: &str =
    "#[job(name = \"emails.send\", max_attempts = 5, timeout = \"30s\")]";

#[derive(Clone, Copy)]
enum Key {
    Name,
    Payload,
    MaxAttempts,
    Timeout,
    Priority,
    Version,
    Enabled,
    Retain,
    Queue,
    GlobalConcurrency,
}

const KEYS: &[(&str, Key)] = &[
    ("name", Key::Name),
    ("payload", Key::Payload),
    ("max_attempts", Key::MaxAttempts),
    ("timeout", Key::Timeout),
    ("priority", Key::Priority),
    ("version", Key::Version),
    ("enabled", Key::Enabled),
    ("retain", Key::Retain),
    ("queue", Key::Queue),
    ("global_concurrency", Key::GlobalConcurrency),
];

/// What the attribute says.
#[derive(Default)]
struct JobArgs {
    name: Option<String>,
    payload: Option<Ident>,
    /// `JobDefaults` builder calls.
    defaults: Vec<TokenStream>,
}

/// One payload field: an argument of the fn.
struct Field {
    ident: Ident,
    ty: Type,
}

/// One `#[output(Workflow::STEP)]` argument: a prerequisite's output, read before the call.
struct Read {
    step: Expr,
    ty: Type,
}

/// How the fn's arguments are passed, in order.
enum Argument {
    Context,
    Field(usize),
    Read(usize),
}

/// What the fn returns.
struct Return {
    /// The whole return type.
    ty: Type,
    /// `T` of a literal `Result<T, E>` (an alias is read through `JobReturn`).
    output: Option<Type>,
    /// `E` of a literal `Result<T, E>`.
    error: Option<Type>,
}

/// The parsed fn.
struct JobFn {
    takes_context: bool,
    fields: Vec<Field>,
    reads: Vec<Read>,
    arguments: Vec<Argument>,
    returns: Option<Return>,
}

/// Expands `#[job(args)]` on `function`. `stacked` builds the registrations of the
/// `#[schedule]`s stacked on the fn (see `stacked`) from the fn without its `#[output]`
/// attributes and the payload type's name, reporting its problems with the job's.
pub(crate) fn expand(
    args: TokenStream,
    function: &ItemFn,
    stacked: impl FnOnce(&ItemFn, &Ident, &mut Errors) -> Vec<TokenStream>,
) -> TokenStream {
    let mut errors = Errors::default();
    let job_args = parse_args(args, &mut errors);
    let (function, reads) = take_reads(function, &mut errors);
    let function = &function;
    let mut out = quote!(#function);
    if let Some(receiver) = function.sig.receiver() {
        // A method: no payload struct can be generated inside an `impl` block.
        errors.spanned(
            receiver,
            "a #[job] fn cannot take `self`: jobs are free functions of their arguments; move it out of the `impl` block",
        );
        out.extend(errors.into_compile_errors());
        return out;
    }
    let model = parse_fn(function, reads, &mut errors);
    let payload = job_args
        .payload
        .clone()
        .unwrap_or_else(|| case::pascal_case(&function.sig.ident));
    let registrations = stacked(function, &payload, &mut errors);
    let mut attached = field_helpers(&payload, &model);
    if errors.is_empty() {
        attached.extend(job_impl(function, &job_args, &payload, &model));
        attached.extend(registrations);
    }
    out.extend(payload_struct(function, &payload, &model, &attached));
    out.extend(errors.into_compile_errors());
    out
}

fn parse_args(tokens: TokenStream, errors: &mut Errors) -> JobArgs {
    let mut parsed = JobArgs::default();
    for arg in args::parse(tokens, USAGE, KEYS, errors) {
        let ident = &arg.ident;
        match arg.key {
            Key::Name => {
                parsed.name = args::lit_str(&arg.value, "name = \"emails.send\"", errors)
                    .and_then(|lit| args::name(&lit, "job name", errors));
            }
            Key::Payload => match &arg.value {
                syn::Expr::Path(path) if path.path.get_ident().is_some() => {
                    parsed.payload = path.path.get_ident().cloned();
                }
                other => errors.spanned(other, "expected a type name, as in payload = SendMail"),
            },
            Key::MaxAttempts | Key::Version => {
                if let Some(n) = args::lit_int(&arg.value, ident, 1, errors) {
                    parsed.defaults.push(quote!(.#ident(#n)));
                }
            }
            Key::Priority => {
                if let Some(n) = args::lit_int(&arg.value, ident, i32::MIN, errors) {
                    parsed.defaults.push(quote!(.priority(#n)));
                }
            }
            Key::Timeout => {
                if let Some(n) = args::lit_str(&arg.value, "timeout = \"30s\"", errors)
                    .and_then(|lit| args::duration_seconds(&lit, 1, errors))
                {
                    parsed.defaults.push(quote!(.timeout_seconds(#n)));
                }
            }
            Key::Enabled => {
                if let Some(enabled) = args::lit_bool(&arg.value, ident, errors) {
                    parsed.defaults.push(quote!(.enabled(#enabled)));
                }
            }
            Key::Retain => {
                if let Some(n) = args::lit_str(&arg.value, "retain = \"3d\"", errors)
                    .and_then(|lit| args::duration_seconds(&lit, 1, errors))
                {
                    parsed.defaults.push(quote!(.retention_seconds(#n)));
                }
            }
            Key::Queue => {
                if let Some(queue) = args::lit_str(&arg.value, "queue = \"emails\"", errors)
                    .and_then(|lit| args::name(&lit, "queue name", errors))
                {
                    parsed.defaults.push(quote!(.queue(#queue)));
                }
            }
            Key::GlobalConcurrency => {
                if let Some(n) = args::lit_int(&arg.value, ident, 1, errors) {
                    parsed.defaults.push(quote!(.global_concurrency(#n)));
                }
            }
        }
    }
    parsed
}

const OUTPUT_USAGE: &str = "#[output(Research::CRAWL)] page: String";

/// Takes the `#[output(..)]` attributes off the fn's arguments (the compiler would not know
/// them), returning, per argument, the step it reads.
fn take_reads(function: &ItemFn, errors: &mut Errors) -> (ItemFn, Vec<Option<Expr>>) {
    let mut function = function.clone();
    let mut reads = Vec::new();
    for input in &mut function.sig.inputs {
        let FnArg::Typed(typed) = input else {
            reads.push(None);
            continue;
        };
        let mut step = None;
        typed.attrs.retain(|attr| {
            if !attr.path().is_ident("output") {
                return true;
            }
            match attr.parse_args::<Expr>() {
                Ok(expr) if step.is_none() => step = Some(expr),
                Ok(_) => errors.spanned(
                    attr,
                    "an argument reads one step: remove the second #[output(..)]",
                ),
                Err(_) => errors.spanned(
                    attr,
                    format!(
                        "expected the step whose output this argument reads, as in {OUTPUT_USAGE}"
                    ),
                ),
            }
            false
        });
        reads.push(step);
    }
    (function, reads)
}

fn parse_fn(function: &ItemFn, reads: Vec<Option<Expr>>, errors: &mut Errors) -> JobFn {
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
        takes_context: false,
        fields: Vec::new(),
        reads: Vec::new(),
        arguments: Vec::new(),
        returns: None,
    };
    for ((index, input), read) in sig.inputs.iter().enumerate().zip(reads) {
        let FnArg::Typed(typed) = input else { continue };
        if let Some(step) = read {
            if check_owned(&typed.ty, errors) {
                model.arguments.push(Argument::Read(model.reads.len()));
                model.reads.push(Read {
                    step,
                    ty: (*typed.ty).clone(),
                });
            }
            continue;
        }
        if syntax::is_context(&typed.ty) {
            if let Type::Reference(reference) = &*typed.ty {
                errors.spanned(
                    reference,
                    "take the context by value, as in `ctx: JobContext`: each attempt owns its context",
                );
            } else if index > 0 {
                errors.spanned(&typed.ty, "`JobContext` must be the first argument");
            }
            model.takes_context = index == 0;
            model.arguments.push(Argument::Context);
            continue;
        }
        let Pat::Ident(pat) = &*typed.pat else {
            errors.spanned(
                &typed.pat,
                "expected `name: Type`: each argument becomes a named payload field",
            );
            continue;
        };
        if pat.by_ref.is_some() || pat.subpat.is_some() {
            errors.spanned(
                &typed.pat,
                "expected `name: Type`: each argument becomes a named payload field",
            );
            continue;
        }
        if check_owned(&typed.ty, errors) {
            model.arguments.push(Argument::Field(model.fields.len()));
            model.fields.push(Field {
                ident: pat.ident.clone(),
                ty: (*typed.ty).clone(),
            });
        }
    }
    model.returns = parse_return(sig, errors);
    model
}

/// Refuses borrowed argument types (a payload is stored and outlives the call); says which
/// owned type to use.
fn check_owned(ty: &Type, errors: &mut Errors) -> bool {
    if let Type::Reference(reference) = ty {
        errors.spanned(
            reference,
            format!(
                "a job argument cannot borrow: it is stored as JSON and read back by a worker later; use an owned type such as `{}`",
                owned_suggestion(reference)
            ),
        );
        return false;
    }
    if let Type::ImplTrait(_) = ty {
        errors.spanned(
            ty,
            "a #[job] fn cannot be generic: its arguments become a concrete payload struct",
        );
        return false;
    }
    if let Some(lifetime) = syntax::borrowed_lifetime(ty) {
        errors.spanned(
            lifetime,
            "a job argument cannot borrow: it is stored as JSON and read back by a worker later; use an owned type (`String`, `Vec<T>`, ...) or `'static` data",
        );
        return false;
    }
    true
}

/// The owned counterpart of a borrowed type: `&str` → `String`, `&[T]` → `Vec<T>`,
/// `&Path` → `PathBuf`, `&T` → `T`.
fn owned_suggestion(reference: &TypeReference) -> String {
    match &*reference.elem {
        Type::Slice(slice) => {
            let elem = &slice.elem;
            format!("Vec<{}>", quote!(#elem)).replace(' ', "")
        }
        elem if syntax::is_named(elem, "str") => "String".to_owned(),
        elem if syntax::is_named(elem, "Path") => "PathBuf".to_owned(),
        elem if syntax::is_named(elem, "OsStr") => "OsString".to_owned(),
        elem => quote!(#elem).to_string().replace(' ', ""),
    }
}

const RETURN_USAGE: &str = "a #[job] fn returns `Result<T, E>`, or an alias whose name ends in `Result` (`anyhow::Result<T>`), where `T` is the output and `E` the error";

fn parse_return(sig: &syn::Signature, errors: &mut Errors) -> Option<Return> {
    let ty = match &sig.output {
        ReturnType::Type(_, ty) => &**ty,
        ReturnType::Default => {
            // On the `)` after the arguments, where the return type belongs.
            errors.at(sig.paren_token.span.close(), RETURN_USAGE);
            return None;
        }
    };
    // `Result<T, E>` or an alias (`io::Result<T>`, `anyhow::Result<T>`, `JobResult`): the
    // last segment names a result. Anything else is refused here, once, rather than through
    // every generated use of the type.
    let names_result = syntax::last_segment(ty)
        .is_some_and(|segment| segment.ident.to_string().ends_with("Result"));
    if !names_result {
        errors.spanned(ty, RETURN_USAGE);
        return None;
    }
    let arguments = syntax::type_arguments(ty);
    let literal = syntax::is_named(ty, "Result") && arguments.len() == 2;
    Some(Return {
        ty: ty.clone(),
        output: literal.then(|| arguments[0].clone()),
        error: literal.then(|| arguments[1].clone()),
    })
}

/// The payload struct, carrying the `attached` items (see `attached`).
fn payload_struct(
    function: &ItemFn,
    payload: &Ident,
    model: &JobFn,
    attached: &TokenStream,
) -> TokenStream {
    let vis = &function.vis;
    let fn_name = &function.sig.ident;
    let doc = format!("Payload of the job [`{fn_name}`]: its arguments, stored as JSON.");
    let fields = model
        .fields
        .iter()
        .enumerate()
        .map(|(index, Field { ident, ty })| {
            let serialize_path = format!("{payload}::__runledger_serialize_{index}");
            let deserialize_path = format!("{payload}::__runledger_deserialize_{index}");
            // Without `deserialize_with`, serde lets an `Option` field be missing; keep that.
            let default = syntax::is_named(ty, "Option").then(|| quote!(#[serde(default)]));
            quote! {
                #[serde(serialize_with = #serialize_path, deserialize_with = #deserialize_path)]
                #default
                pub #ident: #ty
            }
        });
    quote! {
        #[doc = #doc]
        #[derive(
            ::core::fmt::Debug,
            ::core::clone::Clone,
            ::runledger::__private::serde::Serialize,
            ::runledger::__private::serde::Deserialize,
            ::runledger::__private::RunledgerAttached,
        )]
        #[serde(crate = "::runledger::__private::serde")]
        #[runledger_attached(#attached)]
        #vis struct #payload {
            #(#fields,)*
        }
    }
}

/// Serializes each field through a probe rather than serde's own bounds, so that an argument
/// that is not a serde type gets one error (the argument check), not one per use.
fn field_helpers(payload: &Ident, model: &JobFn) -> TokenStream {
    let mut helpers = Vec::new();
    for (index, Field { ty, .. }) in model.fields.iter().enumerate() {
        let serialize = format_ident!("__runledger_serialize_{index}");
        let deserialize = format_ident!("__runledger_deserialize_{index}");
        helpers.push(quote! {
            fn #serialize<S: ::runledger::__private::serde::Serializer>(
                value: &#ty,
                serializer: S,
            ) -> ::core::result::Result<S::Ok, S::Error> {
                use ::runledger::__private::checks::{FieldNotSerialize as _, FieldSerialize as _};
                (&&::runledger::__private::checks::Probe::<#ty>::new()).serialize_field(value, serializer)
            }

            fn #deserialize<'de, D: ::runledger::__private::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::core::result::Result<#ty, D::Error> {
                use ::runledger::__private::checks::{FieldDeserialize as _, FieldNotDeserialize as _};
                (&&::runledger::__private::checks::Probe::<#ty>::new()).deserialize_field(deserializer)
            }
        });
    }
    quote! {
        #[automatically_derived]
        impl #payload {
            #(#helpers)*
        }
    }
}

fn job_impl(function: &ItemFn, job_args: &JobArgs, payload: &Ident, model: &JobFn) -> TokenStream {
    let Some(returns) = &model.returns else {
        return TokenStream::new();
    };
    let fn_name = &function.sig.ident;
    let name = job_args
        .name
        .clone()
        .unwrap_or_else(|| fn_name.to_string().trim_start_matches("r#").to_owned());
    let defaults = &job_args.defaults;
    let return_ty = &returns.ty;
    let output = match &returns.output {
        Some(output) => quote!(#output),
        None => {
            quote_spanned!(return_ty.span()=> <#return_ty as ::runledger::__private::JobReturn>::Ok)
        }
    };
    let output_span = returns
        .output
        .as_ref()
        .map_or(return_ty.span(), Spanned::span);
    let error_span = returns
        .error
        .as_ref()
        .map_or(return_ty.span(), Spanned::span);
    let arguments = model.arguments.iter().map(|argument| match argument {
        Argument::Context => quote!(ctx),
        Argument::Field(index) => {
            let ident = &model.fields[*index].ident;
            quote!(self.#ident)
        }
        Argument::Read(index) => {
            let read = format_ident!("__runledger_read_{index}");
            quote!(#read)
        }
    });
    let reads = model.reads.iter().enumerate().map(|(index, Read { step, ty })| {
        let read = format_ident!("__runledger_read_{index}");
        let probe = quote_spanned!(ty.span()=> ::runledger::__private::ReadProbe::new(#step, ::core::marker::PhantomData::<#ty>));
        quote! {
            let #read = match (&&#probe).read_output(&mut __runledger_outputs) {
                ::core::result::Result::Ok(value) => value,
                ::core::result::Result::Err(error) => return ::core::result::Result::Err(error),
            };
        }
    });
    let read_decls = model.reads.iter().map(|Read { step, ty }| {
        quote_spanned!(ty.span()=> ::runledger::__private::declare_read(#step, ::core::marker::PhantomData::<#ty>))
    });
    // Every `#[output(..)]` argument's output, read with one statement before the fn runs.
    let fetch = (!model.reads.is_empty()).then(|| {
        quote! {
            let mut __runledger_outputs = match ::runledger::__private::ReadOutputs::fetch(
                &ctx,
                <Self as ::runledger::Job>::READS,
            )
            .await
            {
                ::core::result::Result::Ok(outputs) => outputs,
                ::core::result::Result::Err(error) => return ::core::result::Result::Err(error),
            };
        }
    });
    let unused = (!model.takes_context).then(|| quote!(let _ = ctx;));
    let argument_checks = model.fields.iter().map(
        |Field { ty, .. }| quote_spanned!(ty.span()=> (&&&&Probe::<#ty>::new()).check_argument();),
    );
    let output_check = quote_spanned!(output_span=> (&&&&Probe::<#output>::new()).check_output(););
    let into_result =
        quote_spanned!(return_ty.span()=> ::runledger::__private::JobReturn::into_result(returned));
    let convert = quote_spanned!(error_span=> (&&&&::runledger::__private::checks::Probe::of(&error)).job_error(error));
    quote! {
        const _: () = {
            #[automatically_derived]
            impl ::runledger::Job for #payload {
                const NAME: &'static str = #name;
                const DEFAULTS: ::runledger::__private::JobDefaults = ::runledger::__private::JobDefaults::new() #(#defaults)*;
                const READS: &'static [::runledger::__private::ReadDecl] = &[#(#read_decls),*];
                type Output = #output;

                fn run(
                    self,
                    ctx: ::runledger::JobContext,
                ) -> impl ::core::future::Future<
                    Output = ::core::result::Result<Self::Output, ::runledger::JobError>,
                > + ::core::marker::Send {
                    async move {
                        use ::runledger::__private::checks::{ErrorInto as _, ErrorText as _, ErrorUnsupported as _};
                        use ::runledger::__private::{ReadOk as _, ReadUnreadable as _};
                        #fetch
                        #(#reads)*
                        #unused
                        let returned = #fn_name(#(#arguments),*).await;
                        match #into_result {
                            ::core::result::Result::Ok(output) => ::core::result::Result::Ok(output),
                            ::core::result::Result::Err(error) => ::core::result::Result::Err(#convert),
                        }
                    }
                }
            }

            /// The types `#[job]` checks: each on the user's token, one error per mistake.
            #[allow(dead_code)]
            fn __runledger_checks() {
                use ::runledger::__private::checks::*;
                #(#argument_checks)*
                #output_check
            }

            fn __runledger_handler(
                data: ::std::sync::Arc<::runledger::__private::Data>,
            ) -> ::std::sync::Arc<dyn ::runledger::__private::JobHandler> {
                use ::runledger::__private::checks::{HandlerOk as _, HandlerUnrunnable as _};
                (&&::runledger::__private::checks::Probe::<#payload>::new()).job_handler(data)
            }

            ::runledger::__private::inventory::submit! {
                ::runledger::__private::JobRegistration::new::<#payload>(
                    __runledger_handler,
                    ::core::file!(),
                    ::core::line!(),
                    ::core::column!(),
                )
            }
        };
    }
}
