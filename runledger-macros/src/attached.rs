//! Items attached to a generated payload struct. `#[job]` emits the user's fn and one struct
//! that carries everything else (its helpers, the `Job` impl, the checks, the registration)
//! in `#[runledger_attached(...)]`, emitted by a derive. On an associated fn inside an `impl`
//! block, where no struct can be, the compiler then reports the struct once and nothing
//! attached to it.

use proc_macro2::TokenStream;
use syn::DeriveInput;

use crate::syntax;

pub(crate) fn expand(item: TokenStream) -> TokenStream {
    match syn::parse2::<DeriveInput>(item) {
        Ok(input) => input
            .attrs
            .iter()
            .filter(|attr| attr.path().is_ident("runledger_attached"))
            .map(syntax::attr_tokens)
            .collect(),
        Err(err) => err.to_compile_error(),
    }
}
