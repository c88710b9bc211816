//! Small readings of syn syntax shared by the macros: the annotated item, attributes by name,
//! and the shape of a type (the handler's context among them).

use proc_macro2::TokenStream;
use syn::{Attribute, GenericArgument, Meta, PathArguments, PathSegment, Type};

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

/// Whether an attribute is `#[name]` or `#[runledger::name]`.
pub(crate) fn is_attr(attr: &Attribute, name: &str) -> bool {
    let path = attr.path();
    path.is_ident(name)
        || (path.segments.len() == 2
            && path.segments[0].ident == "runledger"
            && path.segments[1].ident == name)
}

/// The tokens inside `#[name(...)]` (empty for `#[name]`).
pub(crate) fn attr_tokens(attr: &Attribute) -> TokenStream {
    match &attr.meta {
        Meta::List(list) => list.tokens.clone(),
        _ => TokenStream::new(),
    }
}

/// The last segment of a path type.
pub(crate) fn last_segment(ty: &Type) -> Option<&PathSegment> {
    match ty {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    }
}

/// Whether a type's last path segment is `name` (`Option`, `External`, ...).
pub(crate) fn is_named(ty: &Type, name: &str) -> bool {
    last_segment(ty).is_some_and(|segment| segment.ident == name)
}

/// Whether an argument's type is the handler's context, `JobContext` (by value or, mistakenly,
/// borrowed): a `#[job]` fn's first argument, which no payload carries.
pub(crate) fn is_context(ty: &Type) -> bool {
    match ty {
        Type::Reference(reference) => is_context(&reference.elem),
        ty => is_named(ty, "JobContext"),
    }
}

/// The type arguments of a path type's last segment (`Result<T, E>` → `[T, E]`).
pub(crate) fn type_arguments(ty: &Type) -> Vec<&Type> {
    match last_segment(ty).map(|segment| &segment.arguments) {
        Some(PathArguments::AngleBracketed(generic)) => generic
            .args
            .iter()
            .filter_map(|arg| match arg {
                GenericArgument::Type(ty) => Some(ty),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A lifetime other than `'static` anywhere in a type (`Cow<'a, str>`), which a stored value
/// cannot have.
pub(crate) fn borrowed_lifetime(ty: &Type) -> Option<&syn::Lifetime> {
    struct Finder<'a>(Option<&'a syn::Lifetime>);
    impl<'a> syn::visit::Visit<'a> for Finder<'a> {
        fn visit_lifetime(&mut self, lifetime: &'a syn::Lifetime) {
            if self.0.is_none() && lifetime.ident != "static" {
                self.0 = Some(lifetime);
            }
        }
    }
    let mut finder = Finder(None);
    syn::visit::Visit::visit_type(&mut finder, ty);
    finder.0
}
