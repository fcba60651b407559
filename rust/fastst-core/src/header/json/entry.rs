//! One tensor entry: `dtype`, `shape` and `data_offsets` typed by their own
//! visitors, each field once, unknown fields noted and skipped; the rules
//! and their errors come from [`crate::validate::entry`].

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::{reject_containers, reject_other_types, Ctx, Found, SkipValue};
use crate::dtype::Dtype;
use crate::validate::{entry, found};

pub(super) struct EntrySeed<'c, 'n> {
    pub(super) ctx: &'c Ctx,
    pub(super) name: &'n str,
}

impl EntrySeed<'_, '_> {
    fn not_object<E: de::Error>(self, found: Found) -> E {
        self.ctx.fail(entry::not_object(self.name, found.0))
    }
}

pub(super) type Entry = (Dtype, Vec<u64>, u64, u64);

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
