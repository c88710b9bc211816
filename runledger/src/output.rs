//! Reading stored outputs back into their Rust types.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::Error;

/// Decodes a stored output; a missing one decodes as JSON `null` (so into `()` or `None`).
pub(crate) fn decode<T: DeserializeOwned>(what: &str, stored: Option<Value>) -> Result<T, Error> {
    serde_json::from_value(stored.unwrap_or(Value::Null)).map_err(|e| Error::OutputInvalid {
        what: what.to_owned(),
        message: e.to_string(),
    })
}
