//! A lenient second reading of a header the strict parser rejected: keys are
//! kept in order with their duplicates, entries and metadata are kept as raw
//! JSON so that every problem can be reported, not only the first.
//!
//! Still bounded: serde_json's recursion limit applies, and nothing is sized
//! from a number found in the header.

use fastst_core::internal::whitespace_len;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::source::Source;
use fastst_core::{Error, Result};

/// An object kept as its key/value pairs in order (duplicates included), or
/// any other JSON value.
pub(crate) enum Node {
    Pairs(Vec<(String, Value)>),
    Other(Value),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Node, A::Error> {
        let mut pairs = Vec::new();
        while let Some(pair) = map.next_entry::<String, Value>()? {
            pairs.push(pair);
        }
        Ok(Node::Pairs(pairs))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            items.push(v);
        }
        Ok(Node::Other(Value::Array(items)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Node, E> {
        Ok(Node::Other(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Node, E> {
        Ok(Node::Other(Value::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Node, E> {
        Ok(Node::Other(Value::from(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Node, E> {
        Ok(Node::Other(Value::from(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Node, E> {
        Ok(Node::Other(Value::String(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Node, E> {
        Ok(Node::Other(Value::String(v)))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Node, E> {
        Ok(Node::Other(Value::Null))
    }
}

/// Walks the top-level object, handing each tensor entry to `on_entry` as
/// soon as it is parsed (so that a huge table never exists as one tree) and
/// keeping every `__metadata__` value.
struct TopVisitor<'f, F> {
    on_entry: &'f mut F,
}

impl<'de, F: FnMut(String, Node)> Visitor<'de> for TopVisitor<'_, F> {
    type Value = Vec<Node>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Vec<Node>, A::Error> {
        let mut metadata = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let node = map.next_value::<Node>()?;
            if key == "__metadata__" {
                metadata.push(node);
            } else {
                (self.on_entry)(key, node);
            }
        }
        Ok(metadata)
    }
}

/// Skips JSON whitespace and a UTF-8 byte-order mark.
fn trim_start(json: &[u8]) -> &[u8] {
    let json = json.strip_prefix(b"\xef\xbb\xbf").unwrap_or(json);
    &json[whitespace_len(json)..]
}

/// Parses a header leniently: each tensor entry (name and raw value, in
/// header order, duplicates included) goes to `on_entry`; returns every
/// `__metadata__` value, or `None` when the header is not a JSON object at
/// all (entries already handed over should then be disregarded). Whatever
/// follows the top-level object (NUL padding, a second object) is ignored
/// here; the strict verdict reports it.
pub(crate) fn parse_with(json: &[u8], mut on_entry: impl FnMut(String, Node)) -> Option<Vec<Node>> {
    let mut de = serde_json::Deserializer::from_slice(trim_start(json));
    de.deserialize_map(TopVisitor {
        on_entry: &mut on_entry,
    })
    .ok()
}

struct MetadataOnly;

impl<'de> Visitor<'de> for MetadataOnly {
    type Value = Option<Node>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Option<Node>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" && found.is_none() {
                found = Some(map.next_value::<Node>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Reads the `__metadata__` of the file at `path` without validating its
/// tensor table (so it works on files the reader rejects): its pairs in
/// header order, values that are not strings given as their JSON text.
/// `None` when the header has no metadata (absent or null, or not an
/// object). Fails when the header itself cannot be located or parsed.
pub fn read_metadata(path: &Path, header_cap: u64) -> Result<Option<Vec<(String, String)>>> {
    metadata_of(Source::open(path)?, header_cap)
}

/// [`read_metadata`] of a file read through any core source (an object in
/// a store): only its size prefix and header are read.
pub fn read_metadata_source(
    source: Box<dyn fastst_core::Source>,
    header_cap: u64,
) -> Result<Option<Vec<(String, String)>>> {
    metadata_of(Source::new(source), header_cap)
}

fn metadata_of(src: Source, header_cap: u64) -> Result<Option<Vec<(String, String)>>> {
    let (_, json) = src.read_header(header_cap)?;
    let mut de = serde_json::Deserializer::from_slice(trim_start(&json));
    let node = de.deserialize_map(MetadataOnly).map_err(|e| Error::Json {
        message: e.to_string(),
    })?;
    Ok(match node {
        Some(Node::Pairs(pairs)) => Some(
            pairs
                .into_iter()
                .map(|(k, v)| match v {
                    Value::String(s) => (k, s),
                    other => (k, other.to_string()),
                })
                .collect(),
        ),
        _ => None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    struct Parsed {
        entries: Vec<(String, Node)>,
        metadata: Vec<Node>,
    }

    fn parse(json: &[u8]) -> Option<Parsed> {
        let mut entries = Vec::new();
        let metadata = parse_with(json, |k, v| entries.push((k, v)))?;
        Some(Parsed { entries, metadata })
    }

    #[test]
    fn keeps_duplicates_in_order() {
        let h =
            parse(br#"{"a":{"dtype":"F32","dtype":"I8"},"a":1,"__metadata__":{"k":"1","k":2}}"#)
                .unwrap();
        assert_eq!(h.entries.len(), 2);
        match &h.entries[0].1 {
            Node::Pairs(p) => assert_eq!(p.len(), 2),
            Node::Other(_) => panic!("expected an object"),
        }
        assert!(matches!(h.entries[1].1, Node::Other(Value::Number(_))));
        match &h.metadata[..] {
            [Node::Pairs(p)] => assert_eq!(p.len(), 2),
            _ => panic!("expected one metadata object"),
        }
    }

    #[test]
    fn tolerates_trailing_garbage_and_bom_but_not_non_objects() {
        assert!(parse(b"\xef\xbb\xbf {\"a\":1}\0\0").is_some());
        assert!(parse(b"[1,2]").is_none());
        assert!(parse(b"{\"a\":").is_none());
        let deep = "[".repeat(10_000);
        assert!(parse(format!("{{\"a\":{deep}").as_bytes()).is_none());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod file_tests {
    use super::*;
    use crate::testfs::{build, raw};
    use fastst_core::DEFAULT_HEADER_CAP;

    #[test]
    fn reads_metadata_of_files_the_reader_rejects() {
        // A hole in the layout, a non-string value and a repeated key.
        let f = build(
            r#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"__metadata__":{"a":"1","n":2,"a":"3"}}"#,
            &[0; 8],
        );
        let md = read_metadata(&f.0, DEFAULT_HEADER_CAP).unwrap().unwrap();
        assert_eq!(
            md,
            [
                ("a".to_owned(), "1".to_owned()),
                ("n".to_owned(), "2".to_owned()),
                ("a".to_owned(), "3".to_owned())
            ]
        );
        let none = build(r#"{"__metadata__":null}"#, b"");
        assert_eq!(read_metadata(&none.0, DEFAULT_HEADER_CAP).unwrap(), None);
        let bad = build("{\"__metadata__\":", b"");
        assert!(matches!(
            read_metadata(&bad.0, DEFAULT_HEADER_CAP),
            Err(Error::Json { .. })
        ));
        let short = raw(b"\x01");
        assert!(matches!(
            read_metadata(&short.0, DEFAULT_HEADER_CAP),
            Err(Error::FileTooShort { .. })
        ));
        // No metadata: the tensors' entries are not taken for it.
        let bare = build(
            r#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            &[0; 4],
        );
        assert_eq!(read_metadata(&bare.0, DEFAULT_HEADER_CAP).unwrap(), None);
        // Two metadata objects: the first counts.
        let twice = build(
            r#"{"__metadata__":{"a":"1"},"__metadata__":{"b":"2"}}"#,
            b"",
        );
        assert_eq!(
            read_metadata(&twice.0, DEFAULT_HEADER_CAP).unwrap(),
            Some(vec![("a".to_owned(), "1".to_owned())])
        );
        // A header that is not an object says what was expected.
        let list = build("[1, 2]", b"");
        match read_metadata(&list.0, DEFAULT_HEADER_CAP) {
            Err(Error::Json { message }) => {
                assert!(message.contains("expected a JSON object"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let past = raw(b"\xff\x00\x00\x00\x00\x00\x00\x00{}");
        assert!(matches!(
            read_metadata(&past.0, DEFAULT_HEADER_CAP),
            Err(Error::HeaderPastEnd { .. })
        ));
    }
}
