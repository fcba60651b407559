//! The format's entry and layout rules, written once and used two ways:
//! the strict reader ([`crate::Header::parse`]) stops at the first broken
//! rule, `fastst verify` (in the fastst-inspect crate, hence public) reports
//! every one as a finding. Public only through [`crate::internal`].
//!
//! - [`entry`]: one tensor entry's rules once its JSON is typed (dtype name,
//!   shape entries, `data_offsets`, the byte size), each returning the
//!   rule's [`Error`];
//! - [`layout`]: the walk over entries in offset order that finds holes,
//!   overlaps, data past the end and trailing bytes, reporting each issue
//!   to a sink that stops (reader) or goes on (verify); and duplicate names.
//!
//! JSON typing itself differs (the reader's serde visitors stream; verify
//! reads a lenient tree so that duplicates survive), but both describe a
//! JSON value they reject with the same words ([`found`]).

pub mod entry;
pub mod layout;

use std::ops::ControlFlow;

use crate::error::{Error, Result};
use crate::table::TensorInfo;

/// How a rejected JSON value is described in messages (the same words
/// for the strict reader and for `verify`).
pub mod found {
    use serde_json::Value;

    /// `the boolean true`.
    pub fn boolean(v: bool) -> String {
        format!("the boolean {v}")
    }

    /// `the number 3`.
    pub fn number(v: impl std::fmt::Display) -> String {
        format!("the number {v}")
    }

    /// `the string "x"`.
    pub fn string(v: &str) -> String {
        format!("the string {v:?}")
    }

    /// JSON `null`.
    pub const NULL: &str = "null";
    /// Any JSON array.
    pub const LIST: &str = "a list";
    /// Any JSON object.
    pub const OBJECT: &str = "an object";

    /// Any value, by its kind.
    pub fn value(v: &Value) -> String {
        match v {
            Value::Null => NULL.to_owned(),
            Value::Bool(b) => boolean(*b),
            Value::Number(n) => number(n),
            Value::String(s) => string(s),
            Value::Array(_) => LIST.to_owned(),
            Value::Object(_) => OBJECT.to_owned(),
        }
    }
}

/// The reader's tensor-table rules, fail-fast: each entry's offsets and
/// byte size in header order, then duplicate names, then the layout.
/// Sorts `tensors` into file order and returns the name index (positions
/// sorted by name).
pub(crate) fn strict_table(tensors: &mut [TensorInfo], buffer_len: u64) -> Result<Vec<u32>> {
    for t in tensors.iter() {
        entry::ordered(&t.name, t.begin, t.end)?;
        entry::size(&t.name, t.dtype, &t.shape, t.begin, t.end)?;
    }
    layout::sort(tensors);
    let by_name = layout::name_order(tensors.len(), |i| &tensors[i].name)?;
    if let Some((first, _)) = layout::duplicates(&by_name, |i| &tensors[i].name).next() {
        return Err(Error::DuplicateTensor {
            name: tensors[first].name.clone(),
        });
    }
    let mut first = None;
    let _ = layout::walk(tensors, buffer_len, |issue| {
        first = Some(issue.error());
        ControlFlow::Break(())
    });
    match first {
        Some(err) => Err(err),
        None => Ok(by_name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_described_the_same_everywhere() {
        assert_eq!(found::value(&json!(null)), "null");
        assert_eq!(found::value(&json!(true)), "the boolean true");
        assert_eq!(found::value(&json!(false)), "the boolean false");
        assert_eq!(found::value(&json!(-3)), "the number -3");
        assert_eq!(found::value(&json!(1.5)), "the number 1.5");
        assert_eq!(found::value(&json!("a\"b")), "the string \"a\\\"b\"");
        assert_eq!(found::value(&json!([1])), "a list");
        assert_eq!(found::value(&json!({"a": 1})), "an object");
    }
}
