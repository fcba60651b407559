//! The strict JSON reading of a header: serde_json in strict mode through
//! hand-written visitors, so that every rule of the format fails with its
//! own [`Error`] naming the tensor involved, duplicate keys are caught at
//! every level (after unescaping), nesting is bounded by serde_json's
//! recursion limit, and nothing is allocated because a header claims a
//! size. The entry rules themselves live in [`crate::validate::entry`].
//!
//! One cohesive job in one file (over 700 lines): the visitors are many
//! small types, one per kind of JSON value of the format, that only make
//! sense together.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::ParseNotes;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::json::whitespace_len;
use crate::table::TensorInfo;
use crate::validate::{entry, found};

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

struct MetadataSeed<'c> {
    ctx: &'c Ctx,
}

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = Option<Vec<(String, String)>>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = Option<Vec<(String, String)>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object mapping strings to strings")
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::boolean(v),
        }))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::number(v),
        }))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::number(v),
        }))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::number(v),
        }))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::string(v),
        }))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> std::result::Result<Self::Value, A::Error> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: found::LIST.to_owned(),
        }))
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(self.ctx.fail(Error::DuplicateMetadataKey { key }));
            }
            let value = map.next_value_seed(MetadataValueSeed {
                ctx: self.ctx,
                key: &key,
            })?;
            out.push((key, value));
        }
        Ok(Some(out))
    }
}

struct MetadataValueSeed<'c, 'k> {
    ctx: &'c Ctx,
    key: &'k str,
}

impl MetadataValueSeed<'_, '_> {
    fn not_string<E: de::Error>(self, found: Found) -> E {
        self.ctx.fail(Error::MetadataValueNotString {
            key: self.key.to_owned(),
            found: found.0,
        })
    }
}

impl<'de> DeserializeSeed<'de> for MetadataValueSeed<'_, '_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataValueSeed<'_, '_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Self::Value, E> {
        Ok(v)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::boolean(v))))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::number(v))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::number(v))))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::number(v))))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(found::NULL.to_owned())))
    }
    reject_containers!(|s: Self, f: Found| s.not_string(f));
}

struct EntrySeed<'c, 'n> {
    ctx: &'c Ctx,
    name: &'n str,
}

impl EntrySeed<'_, '_> {
    fn not_object<E: de::Error>(self, found: Found) -> E {
        self.ctx.fail(entry::not_object(self.name, found.0))
    }
}

type Entry = (Dtype, Vec<u64>, u64, u64);

impl<'de> DeserializeSeed<'de> for EntrySeed<'_, '_> {
    type Value = Entry;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_, '_> {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tensor entry object")
    }

    reject_other_types!(|s: Self, f: Found| s.not_object(f));

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> std::result::Result<Self::Value, A::Error> {
        Err(self.not_object(Found(found::LIST.to_owned())))
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let ctx = self.ctx;
        let tensor = self.name;
        let mut dtype: Option<Dtype> = None;
        let mut shape: Option<Vec<u64>> = None;
        let mut offsets: Option<(u64, u64)> = None;
        let mut unknown: Vec<String> = Vec::new();
        while let Some(field) = map.next_key::<String>()? {
            let dup = |field: String| ctx.fail::<A::Error>(entry::duplicate_field(tensor, field));
            match field.as_str() {
                "dtype" => {
                    if dtype.is_some() {
                        return Err(dup(field));
                    }
                    dtype = Some(map.next_value_seed(DtypeSeed { ctx, tensor })?);
                }
                "shape" => {
                    if shape.is_some() {
                        return Err(dup(field));
                    }
                    shape = Some(map.next_value_seed(ShapeSeed { ctx, tensor })?);
                }
                "data_offsets" => {
                    if offsets.is_some() {
                        return Err(dup(field));
                    }
                    offsets = Some(map.next_value_seed(OffsetsSeed { ctx, tensor })?);
                }
                _ => {
                    if unknown.contains(&field) {
                        return Err(dup(field));
                    }
                    map.next_value_seed(SkipValue)?;
                    unknown.push(field);
                }
            }
        }
        let missing = |field: &'static str| ctx.fail::<A::Error>(entry::missing(tensor, field));
        let dtype = dtype.ok_or_else(|| missing("dtype"))?;
        let shape = shape.ok_or_else(|| missing("shape"))?;
        let (begin, end) = offsets.ok_or_else(|| missing("data_offsets"))?;
        if !unknown.is_empty() {
            let mut notes = ctx.notes.borrow_mut();
            for field in unknown {
                notes.unknown_fields.push((tensor.to_owned(), field));
            }
        }
        Ok((dtype, shape, begin, end))
    }
}

struct DtypeSeed<'c, 'n> {
    ctx: &'c Ctx,
    tensor: &'n str,
}

impl DtypeSeed<'_, '_> {
    fn wrong<E: de::Error>(self, found: Found) -> E {
        self.ctx
            .fail(entry::wrong_type(self.tensor, "dtype", found.0))
    }
}

impl<'de> DeserializeSeed<'de> for DtypeSeed<'_, '_> {
    type Value = Dtype;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DtypeSeed<'_, '_> {
    type Value = Dtype;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a dtype name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        entry::dtype(self.tensor, v).map_err(|e| self.ctx.fail(e))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(found::boolean(v))))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(found::number(v))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(found::number(v))))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(found::number(v))))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(found::NULL.to_owned())))
    }
    reject_containers!(|s: Self, f: Found| s.wrong(f));
}

struct ShapeSeed<'c, 'n> {
    ctx: &'c Ctx,
    tensor: &'n str,
}

impl ShapeSeed<'_, '_> {
    fn wrong<E: de::Error>(self, found: Found) -> E {
        self.ctx
            .fail(entry::wrong_type(self.tensor, "shape", found.0))
    }
}

impl<'de> DeserializeSeed<'de> for ShapeSeed<'_, '_> {
    type Value = Vec<u64>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ShapeSeed<'_, '_> {
    type Value = Vec<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a shape list")
    }

    reject_other_types!(|s: Self, f: Found| s.wrong(f));

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> std::result::Result<Self::Value, A::Error> {
        Err(self.wrong(Found(found::OBJECT.to_owned())))
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut shape = Vec::with_capacity(seq.size_hint().unwrap_or(4).min(64));
        while let Some(dim) = seq.next_element_seed(ShapeEntrySeed {
            ctx: self.ctx,
            tensor: self.tensor,
        })? {
            shape.push(dim);
        }
        Ok(shape)
    }
}

struct ShapeEntrySeed<'c, 'n> {
    ctx: &'c Ctx,
    tensor: &'n str,
}

impl ShapeEntrySeed<'_, '_> {
    /// A shape entry that is not an integer at all (`found`: its JSON text).
    fn bad<E: de::Error>(self, found: Found) -> E {
        self.ctx.fail(entry::bad_shape_entry(self.tensor, found.0))
    }
}

impl<'de> DeserializeSeed<'de> for ShapeEntrySeed<'_, '_> {
    type Value = u64;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ShapeEntrySeed<'_, '_> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        entry::shape_entry(self.tensor, Some(v), || v.to_string()).map_err(|e| self.ctx.fail(e))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        entry::shape_entry(self.tensor, u64::try_from(v).ok(), || v.to_string())
            .map_err(|e| self.ctx.fail(e))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.bad(Found(v.to_string())))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Err(self.bad(Found(v.to_string())))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Err(self.bad(Found(format!("{v:?}"))))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Err(self.bad(Found(found::NULL.to_owned())))
    }
    reject_containers!(|s: Self, f: Found| s.bad(f));
}

struct OffsetsSeed<'c, 'n> {
    ctx: &'c Ctx,
    tensor: &'n str,
}

impl OffsetsSeed<'_, '_> {
    fn bad<E: de::Error>(&self, found: String) -> E {
        self.ctx.fail(entry::bad_offsets(self.tensor, found))
    }
}

impl<'de> DeserializeSeed<'de> for OffsetsSeed<'_, '_> {
    type Value = (u64, u64);

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OffsetsSeed<'_, '_> {
    type Value = (u64, u64);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("two offsets")
    }

    reject_other_types!(|s: Self, f: Found| s.bad(f.0));

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> std::result::Result<Self::Value, A::Error> {
        Err(self.bad(found::OBJECT.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut vals = [0u64; 2];
        let mut count = 0usize;
        let check = |count, all_integers, vals| {
            entry::offsets(self.tensor, count, all_integers, vals).map_err(|e| self.ctx.fail(e))
        };
        while let Some(v) = seq.next_element_seed(OffsetEntrySeed)? {
            count += 1;
            match v {
                Some(v) if count <= 2 => vals[count - 1] = v,
                Some(_) => {}
                // The first value that is not an offset decides (the rest of
                // the list is not read).
                None => return check(count, false, vals),
            }
        }
        check(count, true, vals)
    }
}

/// One offset: `Some(v)` for a non-negative integer, `None` for anything else.
struct OffsetEntrySeed;

impl<'de> DeserializeSeed<'de> for OffsetEntrySeed {
    type Value = Option<u64>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OffsetEntrySeed {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an offset")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Ok(u64::try_from(v).ok())
    }
    fn visit_f64<E: de::Error>(self, _v: f64) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E: de::Error>(self, _v: bool) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _v: &str) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        while seq.next_element_seed(SkipValue)?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        while map.next_entry_seed(SkipValue, SkipValue)?.is_some() {}
        Ok(None)
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
