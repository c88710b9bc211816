//! `key = value` attribute arguments and the literals they take: strings, booleans, integers,
//! durations and names.

use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitBool, LitStr, Meta, Token, UnOp};

use crate::errors::Errors;

/// One `key = value` argument whose key is one of the macro's keys, `K`.
pub(crate) struct Arg<K> {
    pub(crate) key: K,
    /// The key as written, for spans and messages.
    pub(crate) ident: Ident,
    pub(crate) value: Expr,
}

/// Parses `key = value, ...` against the macro's `keys` (each spelled once, with the enum
/// variant it stands for), reporting unknown keys (listing the valid ones), duplicate keys (on
/// the second) and anything that is not `key = value`.
pub(crate) fn parse<K: Copy>(
    tokens: TokenStream,
    usage: &str,
    keys: &[(&str, K)],
    errors: &mut Errors,
) -> Vec<Arg<K>> {
    let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(tokens) {
        Ok(metas) => metas,
        Err(err) => {
            errors.at(err.span(), format!("{err}; expected {usage}"));
            return Vec::new();
        }
    };
    let mut args: Vec<Arg<K>> = Vec::new();
    for meta in metas {
        let Meta::NameValue(pair) = meta else {
            errors.spanned(&meta, format!("expected `key = value`, as in {usage}"));
            continue;
        };
        let Some(ident) = pair.path.get_ident().cloned() else {
            errors.spanned(&pair.path, format!("expected a key, as in {usage}"));
            continue;
        };
        let Some(&(_, key)) = keys.iter().find(|(name, _)| ident == name) else {
            let valid: Vec<&str> = keys.iter().map(|(name, _)| *name).collect();
            errors.spanned(
                &ident,
                format!(
                    "unknown key `{ident}`; expected one of: {}",
                    valid.join(", ")
                ),
            );
            continue;
        };
        if args.iter().any(|arg| arg.ident == ident) {
            errors.spanned(&ident, format!("duplicate key `{ident}`"));
            continue;
        }
        args.push(Arg {
            key,
            ident,
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

/// An integer literal (optionally negated) of at least `min`.
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

/// A name that follows the engine's naming rule (`runledger_names`), checked here so that a
/// name the macro accepts is never refused at run time.
pub(crate) fn name(lit: &LitStr, what: &str, errors: &mut Errors) -> Option<String> {
    let value = lit.value();
    match runledger_names::check(&value) {
        Ok(()) => Some(value),
        Err(problem) => {
            errors.spanned(lit, format!("the {what} {problem}"));
            None
        }
    }
}
