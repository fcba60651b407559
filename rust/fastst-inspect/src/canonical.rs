//! The canonical form of a header, so that two files whose headers mean the
//! same thing to a reader share one header hash.
//!
//! Definition (what `header_sha256` hashes):
//! - a JSON object with no whitespace anywhere, UTF-8;
//! - object keys sorted by their UTF-8 bytes at every level, `__metadata__`
//!   included in that order like any other key;
//! - each tensor entry reduced to the three fields of the format, in sorted
//!   order: `{"data_offsets":[B,E],"dtype":"D","shape":[...]}` (unknown
//!   fields, which readers ignore, are dropped);
//! - `__metadata__` present only when it holds at least one pair (absent,
//!   `null` and `{}` all mean "no metadata");
//! - integers in plain decimal; strings escaped minimally: `\"`, `\\`, `\b`,
//!   `\f`, `\n`, `\r`, `\t`, other characters below U+0020 as `\u00XX`
//!   (lower-case hex), everything else as raw UTF-8.
//!
//! So whitespace, padding, key order, tensor order, escape spelling and
//! unknown fields do not change it; tensor names, dtypes, shapes, offsets and
//! metadata do.

use std::cmp::Ordering;

use fastst_core::internal::{write_string, write_u64};
use fastst_core::{Header, TensorInfo};

fn push_entry(out: &mut Vec<u8>, t: &TensorInfo) {
    write_string(out, &t.name);
    out.extend_from_slice(b":{\"data_offsets\":[");
    write_u64(out, t.begin);
    out.push(b',');
    write_u64(out, t.end);
    out.extend_from_slice(b"],\"dtype\":\"");
    out.extend_from_slice(t.dtype.name().as_bytes());
    out.extend_from_slice(b"\",\"shape\":[");
    for (i, d) in t.shape.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_u64(out, *d);
    }
    out.extend_from_slice(b"]}");
}

fn push_metadata(out: &mut Vec<u8>, pairs: &[(String, String)]) {
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    write_string(out, "__metadata__");
    out.extend_from_slice(b":{");
    for (i, (k, v)) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, k);
        out.push(b':');
        write_string(out, v);
    }
    out.push(b'}');
}

/// The canonical bytes of a validated header (see the module docs).
pub fn canonical_header(header: &Header) -> Vec<u8> {
    let metadata = header.metadata().filter(|m| !m.is_empty());
    let mut out = Vec::with_capacity(usize::try_from(header.header_len()).unwrap_or(0));
    out.push(b'{');
    let mut first = true;
    let mut comma = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    let mut metadata_done = metadata.is_none();
    for t in header.tensors_by_name() {
        if !metadata_done && "__metadata__".as_bytes().cmp(t.name.as_bytes()) == Ordering::Less {
            if let Some(pairs) = metadata {
                comma(&mut out);
                push_metadata(&mut out, pairs);
            }
            metadata_done = true;
        }
        comma(&mut out);
        push_entry(&mut out, t);
    }
    if !metadata_done {
        if let Some(pairs) = metadata {
            comma(&mut out);
            push_metadata(&mut out, pairs);
        }
    }
    out.push(b'}');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn canon(json: &str, buffer_len: u64) -> String {
        let h = Header::parse(json.as_bytes(), buffer_len).unwrap();
        String::from_utf8(canonical_header(&h)).unwrap()
    }

    #[test]
    fn sorts_keys_and_drops_whitespace_and_unknown_fields() {
        let a = canon(
            r#"  {"b":{"shape":[1],"dtype":"F32","data_offsets":[4,8],"x":1},
                "A":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                "__metadata__":{"z":"1","a":"\u0041\n"}}   "#,
            8,
        );
        assert_eq!(
            a,
            r#"{"A":{"data_offsets":[0,4],"dtype":"F32","shape":[1]},"__metadata__":{"a":"A\n","z":"1"},"b":{"data_offsets":[4,8],"dtype":"F32","shape":[1]}}"#
        );
        // The same header written differently.
        let b = canon(
            r#"{"__metadata__":{"a":"A\u000a","z":"1"},"A":{"data_offsets":[0,4],"shape":[1],"dtype":"F32"},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            8,
        );
        assert_eq!(a, b);
    }

    #[test]
    fn metadata_absent_null_and_empty_agree() {
        let t = r#""t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}"#;
        let none = canon(&format!("{{{t}}}"), 0);
        assert_eq!(none, canon(&format!("{{\"__metadata__\":null,{t}}}"), 0));
        assert_eq!(none, canon(&format!("{{\"__metadata__\":{{}},{t}}}"), 0));
        assert_eq!(
            none,
            r#"{"t":{"data_offsets":[0,0],"dtype":"U8","shape":[0]}}"#
        );
        // Metadata after every name, and control characters escaped.
        let late = canon(
            r#"{"__metadata__":{"k":"\u0001"},"A":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}"#,
            1,
        );
        assert_eq!(
            late,
            r#"{"A":{"data_offsets":[0,1],"dtype":"U8","shape":[]},"__metadata__":{"k":"\u0001"}}"#
        );
    }
}
