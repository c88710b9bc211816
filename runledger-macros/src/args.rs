//! Attribute arguments shared by the three macros: `key = value` lists, literals, durations,
//! and an error collector.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitBool, LitStr, Meta, Token, UnOp};

/// Collects every problem before failing, then reports them together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn into_compile_errors(self) -> TokenStream {
        self.0.map(|e| e.to_compile_error()).unwrap_or_default()
    }
}

/// One `key = value` argument.
pub(crate) struct Arg {
    pub(crate) key: Ident,
    pub(crate) value: Expr,
}

/// Parses `key = value, ...`, reporting unknown keys (with the valid ones), duplicate keys
/// (on the second) and anything that is not `key = value`.
pub(crate) fn parse_args(
    tokens: TokenStream,
    usage: &str,
    valid: &[&str],
    errors: &mut Errors,
) -> Vec<Arg> {
    let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(tokens) {
        Ok(metas) => metas,
        Err(err) => {
            errors.at(err.span(), format!("{err}; expected {usage}"));
            return Vec::new();
        }
    };
    let mut args: Vec<Arg> = Vec::new();
    for meta in metas {
        let Meta::NameValue(pair) = meta else {
            errors.spanned(&meta, format!("expected `key = value`, as in {usage}"));
            continue;
        };
        let Some(key) = pair.path.get_ident().cloned() else {
            errors.spanned(&pair.path, format!("expected a key, as in {usage}"));
            continue;
        };
        if !valid.contains(&key.to_string().as_str()) {
            errors.spanned(
                &key,
                format!("unknown key `{key}`; expected one of: {}", valid.join(", ")),
            );
            continue;
        }
        if args.iter().any(|arg| arg.key == key) {
            errors.spanned(&key, format!("duplicate key `{key}`"));
            continue;
        }
        args.push(Arg {
            key,
            value: pair.value,
        });
    }
    args
}

pub(crate) fn lit_str(value: &Expr, example: &str, errors: &mut Errors) -> Option<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit.clone()),
        _ => {
            errors.spanned(value, format!("expected a string literal, as in {example}"));
            None
        }
    }
}

pub(crate) fn lit_bool(value: &Expr, key: &Ident, errors: &mut Errors) -> Option<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(LitBool { value, .. }),
            ..
        }) => Some(*value),
        _ => {
            errors.spanned(
                value,
                format!("expected `true` or `false`, as in {key} = true"),
            );
            None
        }
    }
}

/// An integer literal (optionally negated) within `min..`.
pub(crate) fn lit_int(value: &Expr, key: &Ident, min: i32, errors: &mut Errors) -> Option<i32> {
    let (negative, lit) = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => (false, Some(lit)),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => match &**expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) => (true, Some(lit)),
            _ => (false, None),
        },
        _ => (false, None),
    };
    let parsed = lit
        .and_then(|lit| lit.base10_parse::<i64>().ok())
        .map(|n| if negative { -n } else { n })
        .and_then(|n| i32::try_from(n).ok());
    match parsed {
        Some(n) if n >= min => Some(n),
        Some(_) => {
            errors.spanned(value, format!("`{key}` must be at least {min}"));
            None
        }
        None => {
            errors.spanned(value, format!("expected an integer, as in {key} = 5"));
            None
        }
    }
}

/// A duration string such as `"30s"`, `"5m"`, `"2h"` or `"1d"`, in whole seconds.
pub(crate) fn duration_seconds(lit: &LitStr, min: i32, errors: &mut Errors) -> Option<i32> {
    let text = lit.value();
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let multiplier: i64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    let seconds = digits
        .parse::<i64>()
        .ok()
        .filter(|_| multiplier > 0)
        .and_then(|n| n.checked_mul(multiplier))
        .and_then(|n| i32::try_from(n).ok());
    match seconds {
        Some(n) if n >= min => Some(n),
        Some(_) => {
            errors.spanned(lit, format!("the duration must be at least {min}s"));
            None
        }
        None => {
            errors.spanned(
                lit,
                format!(
                    "invalid duration \"{text}\"; expected a whole number followed by s, m, h or d, as in \"30s\" or \"5m\""
                ),
            );
            None
        }
    }
}

/// A non-blank name of at most 255 characters.
pub(crate) fn name(lit: &LitStr, what: &str, errors: &mut Errors) -> Option<String> {
    let value = lit.value();
    if value.trim().is_empty() {
        errors.spanned(lit, format!("the {what} name must not be blank"));
        None
    } else if value.chars().count() > 255 {
        errors.spanned(
            lit,
            format!("the {what} name must be at most 255 characters"),
        );
        None
    } else {
        Some(value)
    }
}

/// `send_email` → `SendEmail`.
pub(crate) fn pascal_case(ident: &Ident) -> Ident {
    let raw = ident.to_string();
    let raw = raw.trim_start_matches("r#");
    let mut out = String::new();
    for part in raw.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    if out.is_empty() {
        out.push_str("Payload");
    }
    Ident::new(&out, ident.span())
}

/// `ResearchProfile` → `research_profile`.
pub(crate) fn snake_case(ident: &Ident) -> String {
    let mut out = String::new();
    for (i, c) in ident
        .to_string()
        .trim_start_matches("r#")
        .chars()
        .enumerate()
    {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The last path segment's name of a type, if it is a path.
pub(crate) fn last_segment(ty: &syn::Type) -> Option<&syn::PathSegment> {
    match ty {
        syn::Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    }
}

/// Whether an attribute is `#[name]` or `#[runledger::name]`.
pub(crate) fn is_attr(attr: &syn::Attribute, name: &str) -> bool {
    let path = attr.path();
    path.is_ident(name)
        || (path.segments.len() == 2
            && path.segments[0].ident == "runledger"
            && path.segments[1].ident == name)
}

/// The tokens inside `#[name(...)]` (empty for `#[name]`).
pub(crate) fn attr_tokens(attr: &syn::Attribute) -> TokenStream {
    match &attr.meta {
        Meta::List(list) => list.tokens.clone(),
        _ => TokenStream::new(),
    }
}

/// Parses the annotated item; when it is not the expected kind, returns it unchanged with the
/// error, so that one mistake does not cascade.
pub(crate) fn parse_item<T: syn::parse::Parse>(
    item: TokenStream,
    message: &str,
) -> Result<T, TokenStream> {
    syn::parse2(item.clone()).map_err(|_| {
        let error = syn::Error::new_spanned(&item, message).to_compile_error();
        let mut out = item;
        out.extend(error);
        out
    })
}
