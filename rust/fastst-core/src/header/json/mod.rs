//! The strict JSON reading of a header: serde_json in strict mode through
//! hand-written visitors, so that every rule of the format fails with its
//! own [`Error`] naming the tensor involved, duplicate keys are caught at
//! every level (after unescaping), nesting is bounded by serde_json's
//! recursion limit, and nothing is allocated because a header claims a
//! size. The entry rules themselves live in [`crate::validate::entry`].
//!
//! The visitors are many small types, one per kind of JSON value of the
//! format: here the entry point, the shared context (the first error, the
//! notes), the top-level object and the skipping of unknown values;
//! [`metadata`] reads `__metadata__`, [`entry`] one tensor entry.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use self::entry::EntrySeed;
use self::metadata::MetadataSeed;
use super::ParseNotes;
use crate::error::{Error, Result};
use crate::json::whitespace_len;
use crate::table::TensorInfo;

mod entry;
mod metadata;

type Parsed = (Vec<TensorInfo>, Option<Vec<(String, String)>>, ParseNotes);

/// Reads the header JSON: tensors in header order, the metadata, notes.
pub(super) fn parse(json: &[u8]) -> Result<Parsed> {
    let text = std::str::from_utf8(json).map_err(|e| Error::HeaderNotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let leading = whitespace_len(text.as_bytes());
    match text.as_bytes().get(leading) {
        Some(b'{') => {}
        Some(&found) => {
            return Err(Error::HeaderStart {
                found,
                offset: leading,
            })
        }
        None => {
            return Err(Error::Json {
                message: "header holds only whitespace".to_owned(),
            })
        }
    }
    let ctx = Ctx::default();
    let mut de = serde_json::Deserializer::from_str(text);
    let result = TopSeed { ctx: &ctx }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    match result {
        Ok((tensors, metadata)) => {
            let mut notes = ctx.notes.into_inner();
            notes.leading_whitespace = leading;
            Ok((tensors, metadata, notes))
        }
        Err(e) => Err(match ctx.error.into_inner() {
            Some(err) => err,
            None => json_error(e),
        }),
    }
}

#[cold]
fn json_error(e: serde_json::Error) -> Error {
    let message = e.to_string();
    if message.contains("recursion limit") {
        Error::JsonTooDeep { message }
    } else {
        Error::Json { message }
    }
}

#[derive(Default)]
struct Ctx {
    error: RefCell<Option<Error>>,
    notes: RefCell<ParseNotes>,
}

impl Ctx {
    #[cold]
    fn fail<E: de::Error>(&self, err: Error) -> E {
        let msg = err.to_string();
        let mut slot = self.error.borrow_mut();
        if slot.is_none() {
            *slot = Some(err);
        }
        E::custom(msg)
    }
}

/// Describes a JSON value for error messages.
struct Found(String);

macro_rules! reject_other_types {
    ($on_fail:expr) => {
        fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(found::boolean(v))))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(found::number(v))))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(found::number(v))))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(found::number(v))))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(found::string(v))))
        }
        fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(found::NULL.to_owned())))
        }
    };
}

macro_rules! reject_containers {
    ($on_fail:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(
            self,
            _seq: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            Err($on_fail(self, Found(found::LIST.to_owned())))
        }
        fn visit_map<A: MapAccess<'de>>(
            self,
            _map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            Err($on_fail(self, Found(found::OBJECT.to_owned())))
        }
    };
}

// Imported by path in `entry` and `metadata`, whose visitors use them.
use reject_containers;
use reject_other_types;

struct TopSeed<'c> {
    ctx: &'c Ctx,
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = (Vec<TensorInfo>, Option<Vec<(String, String)>>);

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_> {
    type Value = (Vec<TensorInfo>, Option<Vec<(String, String)>>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object mapping tensor names to entries")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut tensors = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1 << 16));
        let mut metadata: Option<Vec<(String, String)>> = None;
        let mut seen_metadata = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if seen_metadata {
                    return Err(self.ctx.fail(Error::DuplicateMetadata));
                }
                seen_metadata = true;
                metadata = map.next_value_seed(MetadataSeed { ctx: self.ctx })?;
                if metadata.is_none() {
                    self.ctx.notes.borrow_mut().metadata_null = true;
                }
            } else {
                let entry = map.next_value_seed(EntrySeed {
                    ctx: self.ctx,
                    name: &key,
                })?;
                tensors.push(TensorInfo {
                    name: key,
                    dtype: entry.0,
                    shape: entry.1,
                    begin: entry.2,
                    end: entry.3,
                });
            }
        }
        Ok((tensors, metadata))
    }
}

/// Skips any JSON value. Unlike `IgnoredAny` (which serde_json skips
/// without a depth limit) it goes through `deserialize_any`, so serde_json's
/// recursion limit bounds the nesting of values in unknown fields.
struct SkipValue;

impl<'de> DeserializeSeed<'de> for SkipValue {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SkipValue {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _v: bool) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _v: i64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _v: u64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _v: f64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _v: &str) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while seq.next_element_seed(SkipValue)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while map.next_entry_seed(SkipValue, SkipValue)?.is_some() {}
        Ok(())
    }
}
