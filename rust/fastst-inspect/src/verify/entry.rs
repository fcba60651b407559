//! `verify`'s collect-all reading of one leniently parsed tensor entry and
//! of the `__metadata__` blocks: every broken rule becomes a finding, with
//! the rules and messages of [`fastst_core::internal::entry`].

use std::collections::HashSet;

use serde_json::Value;

use super::unknown_field;
use crate::lenient::Node;
use crate::metadata::metadata_findings;
use crate::{Finding, RuleId};
use fastst_core::internal::{entry, found};
use fastst_core::{Dtype, Error};

/// The keys of one object seen so far: a short list for the usual handful
/// of keys, a hash set once there are many (hostile headers).
#[derive(Default)]
struct Seen<'a> {
    few: Vec<&'a str>,
    many: HashSet<&'a str>,
}

impl<'a> Seen<'a> {
    /// Records `key`; false when it was seen before.
    fn insert(&mut self, key: &'a str) -> bool {
        if self.many.is_empty() {
            if self.few.contains(&key) {
                return false;
            }
            if self.few.len() < 16 {
                self.few.push(key);
                return true;
            }
            self.many.extend(self.few.drain(..));
        }
        self.many.insert(key)
    }
}

/// Checks one leniently read entry; returns its offsets when they are
/// usable and, separately, its dtype when the whole entry is valid (so that
/// its values can be scanned).
pub(super) fn check_entry(
    name: &str,
    node: &Node,
    out: &mut Vec<Finding>,
) -> (Option<(u64, u64)>, Option<Dtype>) {
    let pairs = match node {
        Node::Pairs(pairs) => pairs,
        Node::Other(v) => {
            out.push(Finding::from_error(&entry::not_object(
                name,
                found::value(v),
            )));
            return (None, None);
        }
    };
    let mut seen = Seen::default();
    let mut reported: HashSet<&str> = HashSet::new();
    let (mut dtype_v, mut shape_v, mut offsets_v) = (None, None, None);
    for (field, value) in pairs {
        if !seen.insert(field.as_str()) {
            if reported.insert(field.as_str()) {
                out.push(Finding::from_error(&entry::duplicate_field(
                    name,
                    field.clone(),
                )));
            }
            continue;
        }
        match field.as_str() {
            "dtype" => dtype_v = Some(value),
            "shape" => shape_v = Some(value),
            "data_offsets" => offsets_v = Some(value),
            _ => out.push(unknown_field(name, field)),
        }
    }
    let mut fail = |err: Error| out.push(Finding::from_error(&err));
    let dtype = match dtype_v {
        None => {
            fail(entry::missing(name, "dtype"));
            None
        }
        Some(Value::String(s)) => entry::dtype(name, s).map_err(&mut fail).ok(),
        Some(v) => {
            fail(entry::wrong_type(name, "dtype", found::value(v)));
            None
        }
    };
    let shape = match shape_v {
        None => {
            fail(entry::missing(name, "shape"));
            None
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| entry::shape_entry(name, item.as_u64(), || item.to_string()))
            .collect::<Result<Vec<u64>, Error>>()
            .map_err(&mut fail)
            .ok(),
        Some(v) => {
            fail(entry::wrong_type(name, "shape", found::value(v)));
            None
        }
    };
    let offsets = match offsets_v {
        None => {
            fail(entry::missing(name, "data_offsets"));
            None
        }
        Some(Value::Array(list)) => {
            let value = |i: usize| list.get(i).and_then(Value::as_u64).unwrap_or(0);
            let all_integers = list.iter().all(|v| v.as_u64().is_some());
            entry::offsets(name, list.len(), all_integers, [value(0), value(1)])
                .and_then(|(begin, end)| entry::ordered(name, begin, end).map(|()| (begin, end)))
                .map_err(&mut fail)
                .ok()
        }
        Some(v) => {
            fail(entry::bad_offsets(name, found::value(v)));
            None
        }
    };
    let (Some(dtype), Some(shape), Some((begin, end))) = (dtype, shape, offsets) else {
        return (offsets, None);
    };
    match entry::size(name, dtype, &shape, begin, end) {
        Ok(()) => (offsets, Some(dtype)),
        Err(e) => {
            fail(e);
            (offsets, None)
        }
    }
}

pub(super) fn metadata_blocks(blocks: &[Node], out: &mut Vec<Finding>) {
    if blocks.len() > 1 {
        out.push(Finding::from_error(&Error::DuplicateMetadata));
    }
    let Some(first) = blocks.first() else {
        return;
    };
    match first {
        Node::Other(Value::Null) => {
            out.push(Finding::new(
                RuleId::MetadataNull,
                "__metadata__ is null (readers treat it as absent)",
            ));
        }
        Node::Other(v) => out.push(Finding::from_error(&Error::MetadataNotMap {
            found: found::value(v),
        })),
        Node::Pairs(pairs) => {
            let mut seen: HashSet<&str> = HashSet::new();
            let mut reported: HashSet<&str> = HashSet::new();
            let mut strings = Vec::with_capacity(pairs.len());
            for (key, value) in pairs {
                if !seen.insert(key.as_str()) {
                    if reported.insert(key.as_str()) {
                        out.push(Finding::from_error(&Error::DuplicateMetadataKey {
                            key: key.clone(),
                        }));
                    }
                    continue;
                }
                match value {
                    Value::String(s) => strings.push((key.as_str(), s.as_str())),
                    other => out.push(Finding::from_error(&Error::MetadataValueNotString {
                        key: key.clone(),
                        found: found::value(other),
                    })),
                }
            }
            metadata_findings(strings.into_iter(), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Seen;

    #[test]
    fn seen_switches_to_a_set_without_forgetting() {
        let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        let mut seen = Seen::default();
        for k in &keys {
            assert!(seen.insert(k));
        }
        for k in &keys {
            assert!(!seen.insert(k), "{k}");
        }
    }
}
