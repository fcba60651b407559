//! Parsing and validating a header: the JSON table of tensors and the
//! optional `__metadata__` map.
//!
//! Parsing is done with serde_json in strict mode through hand-written
//! visitors, so that every rule of the format fails with its own [`Error`]
//! variant naming the tensor involved, duplicate keys are caught at every
//! level, and nothing is allocated because a header claims a size.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::dtype::Dtype;
use crate::error::{Error, Result};

/// Default upper bound on the header length prefix (100 MB).
pub const DEFAULT_HEADER_CAP: u64 = 100_000_000;

/// Largest shape entry accepted (entries must be below 2^63).
const SHAPE_ENTRY_LIMIT: u64 = 1 << 63;

/// One tensor entry of the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (any UTF-8 string except `__metadata__`).
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape, outermost dimension first; empty for a 0-rank scalar.
    pub shape: Vec<u64>,
    /// First byte, relative to the start of the byte buffer.
    pub begin: u64,
    /// One past the last byte, relative to the start of the byte buffer.
    pub end: u64,
}

impl TensorInfo {
    /// Number of elements (1 for a scalar). Validated headers never overflow.
    pub fn nelements(&self) -> u64 {
        self.shape
            .iter()
            .copied()
            .try_fold(1u64, u64::checked_mul)
            .unwrap_or(u64::MAX)
    }

    /// Length in bytes of the tensor's data.
    pub fn byte_len(&self) -> u64 {
        self.end - self.begin
    }
}

/// Things a valid header may contain that `fastst verify` reports as
/// warnings; the reader accepts them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParseNotes {
    /// Bytes of JSON whitespace before the opening `{`.
    pub leading_whitespace: usize,
    /// `(tensor, field)` pairs for fields other than dtype/shape/data_offsets.
    pub unknown_fields: Vec<(String, String)>,
    /// `__metadata__` was present but `null`.
    pub metadata_null: bool,
}

/// A parsed and validated header.
#[derive(Clone, Debug)]
pub struct Header {
    tensors: Vec<TensorInfo>,
    by_name: Vec<u32>,
    metadata: Option<Vec<(String, String)>>,
    notes: ParseNotes,
    header_len: u64,
    buffer_len: u64,
}

impl Header {
    /// Parses and validates `json` (the `N` header bytes after the length
    /// prefix) for a byte buffer of `buffer_len` bytes.
    pub fn parse(json: &[u8], buffer_len: u64) -> Result<Header> {
        let (tensors, metadata, notes) = parse_json(json)?;
        let header_len = json.len() as u64;
        let (tensors, by_name) = validate(tensors, buffer_len)?;
        Ok(Header {
            tensors,
            by_name,
            metadata,
            notes,
            header_len,
            buffer_len,
        })
    }

    /// Tensors in file order (by data offsets).
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Tensors in name order (byte-wise on UTF-8, as Rust and Python sort strings).
    pub fn tensors_by_name(&self) -> impl ExactSizeIterator<Item = &TensorInfo> + '_ {
        self.by_name.iter().map(move |&i| &self.tensors[i as usize])
    }

    /// Looks a tensor up by name.
    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name
            .binary_search_by(|&i| self.tensors[i as usize].name.as_str().cmp(name))
            .ok()
            .map(|pos| &self.tensors[self.by_name[pos] as usize])
    }

    /// Looks a tensor up by name, failing with [`Error::TensorNotFound`].
    pub fn require(&self, name: &str) -> Result<&TensorInfo> {
        self.get(name).ok_or_else(|| Error::TensorNotFound {
            name: name.to_owned(),
        })
    }

    /// The `__metadata__` map in header order, or `None` when absent.
    pub fn metadata(&self) -> Option<&[(String, String)]> {
        self.metadata.as_deref()
    }

    /// Warnings collected while parsing.
    pub fn notes(&self) -> &ParseNotes {
        &self.notes
    }

    /// Length of the JSON header in bytes (the `N` of the prefix).
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Absolute file offset of the byte buffer (`8 + N`).
    pub fn data_start(&self) -> u64 {
        8 + self.header_len
    }

    /// Length of the byte buffer.
    pub fn buffer_len(&self) -> u64 {
        self.buffer_len
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

/// Reads the 8-byte prefix of a file of `file_len` bytes and checks it
/// against the file's length and the cap; returns `N`.
pub fn check_prefix(prefix: &[u8], file_len: u64, cap: u64) -> Result<u64> {
    let Some(bytes) = prefix.get(..8) else {
        return Err(Error::FileTooShort { len: file_len });
    };
    let mut raw = [0u8; 8];
    raw.copy_from_slice(bytes);
    let n = u64::from_le_bytes(raw);
    if n == 0 {
        return Err(Error::HeaderLengthZero);
    }
    if n > cap {
        return Err(Error::HeaderTooLarge { len: n, cap });
    }
    let available = file_len.saturating_sub(8);
    if n > available {
        return Err(Error::HeaderPastEnd { len: n, available });
    }
    Ok(n)
}

/// Parses a whole file held in memory (length prefix, header, byte buffer),
/// as `deserialize` needs; the header's offsets are relative to
/// [`Header::data_start`].
pub fn parse_file_bytes(bytes: &[u8], cap: u64) -> Result<Header> {
    let n = check_prefix(bytes, bytes.len() as u64, cap)?;
    // `check_prefix` guarantees 8 + n <= bytes.len().
    let start = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .filter(|&s| s <= bytes.len())
        .ok_or(Error::HeaderPastEnd {
            len: n,
            available: bytes.len().saturating_sub(8) as u64,
        })?;
    let json = bytes.get(8..start).unwrap_or_default();
    Header::parse(json, (bytes.len() - start) as u64)
}

type Parsed = (Vec<TensorInfo>, Option<Vec<(String, String)>>, ParseNotes);

fn parse_json(json: &[u8]) -> Result<Parsed> {
    let text = std::str::from_utf8(json).map_err(|e| Error::HeaderNotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let leading = text
        .bytes()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
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
            Err($on_fail(self, Found(format!("the boolean {v}"))))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(format!("the number {v}"))))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(format!("the number {v}"))))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(format!("the number {v}"))))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found(format!("the string {v:?}"))))
        }
        fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
            Err($on_fail(self, Found("null".to_owned())))
        }
    };
}

macro_rules! reject_containers {
    ($on_fail:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(
            self,
            _seq: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            Err($on_fail(self, Found("a list".to_owned())))
        }
        fn visit_map<A: MapAccess<'de>>(
            self,
            _map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            Err($on_fail(self, Found("an object".to_owned())))
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
            found: format!("the boolean {v}"),
        }))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: format!("the number {v}"),
        }))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: format!("the number {v}"),
        }))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: format!("the number {v}"),
        }))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: format!("the string {v:?}"),
        }))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> std::result::Result<Self::Value, A::Error> {
        Err(self.ctx.fail(Error::MetadataNotMap {
            found: "a list".to_owned(),
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
        Err(self.not_string(Found(format!("the boolean {v}"))))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(format!("the number {v}"))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(format!("the number {v}"))))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found(format!("the number {v}"))))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Err(self.not_string(Found("null".to_owned())))
    }
    reject_containers!(|s: Self, f: Found| s.not_string(f));
}

struct EntrySeed<'c, 'n> {
    ctx: &'c Ctx,
    name: &'n str,
}

impl EntrySeed<'_, '_> {
    fn not_object<E: de::Error>(self, found: Found) -> E {
        self.ctx.fail(Error::EntryNotObject {
            tensor: self.name.to_owned(),
            found: found.0,
        })
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
        Err(self.not_object(Found("a list".to_owned())))
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
            let dup = |field: String| {
                ctx.fail::<A::Error>(Error::DuplicateField {
                    tensor: tensor.to_owned(),
                    field,
                })
            };
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
        let missing = |field: &'static str| {
            ctx.fail::<A::Error>(Error::MissingField {
                tensor: tensor.to_owned(),
                field,
            })
        };
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
        self.ctx.fail(Error::WrongFieldType {
            tensor: self.tensor.to_owned(),
            field: "dtype",
            expected: "a string",
            found: found.0,
        })
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
        Dtype::from_name(v).ok_or_else(|| {
            self.ctx.fail(Error::UnknownDtype {
                tensor: self.tensor.to_owned(),
                dtype: v.to_owned(),
            })
        })
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(format!("the boolean {v}"))))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(format!("the number {v}"))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(format!("the number {v}"))))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found(format!("the number {v}"))))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Err(self.wrong(Found("null".to_owned())))
    }
    reject_containers!(|s: Self, f: Found| s.wrong(f));
}

struct ShapeSeed<'c, 'n> {
    ctx: &'c Ctx,
    tensor: &'n str,
}

impl ShapeSeed<'_, '_> {
    fn wrong<E: de::Error>(self, found: Found) -> E {
        self.ctx.fail(Error::WrongFieldType {
            tensor: self.tensor.to_owned(),
            field: "shape",
            expected: "a list of non-negative integers",
            found: found.0,
        })
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
        Err(self.wrong(Found("an object".to_owned())))
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
    fn bad<E: de::Error>(self, found: Found) -> E {
        self.ctx.fail(Error::BadShapeEntry {
            tensor: self.tensor.to_owned(),
            value: found.0,
        })
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
        if v < SHAPE_ENTRY_LIMIT {
            Ok(v)
        } else {
            Err(self.bad(Found(v.to_string())))
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        match u64::try_from(v) {
            Ok(u) => self.visit_u64(u),
            Err(_) => Err(self.bad(Found(v.to_string()))),
        }
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
        Err(self.bad(Found("null".to_owned())))
    }
    reject_containers!(|s: Self, f: Found| s.bad(f));
}

struct OffsetsSeed<'c, 'n> {
    ctx: &'c Ctx,
    tensor: &'n str,
}

impl OffsetsSeed<'_, '_> {
    fn bad<E: de::Error>(&self, found: String) -> E {
        self.ctx.fail(Error::BadOffsets {
            tensor: self.tensor.to_owned(),
            found,
        })
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
        Err(self.bad("an object".to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut vals = [0u64; 2];
        let mut count = 0usize;
        while let Some(v) = seq.next_element_seed(OffsetEntrySeed)? {
            match v {
                Some(v) if count < 2 => vals[count] = v,
                Some(_) => {}
                None => {
                    return Err(self.bad("a value that is not a non-negative integer".to_owned()))
                }
            }
            count += 1;
        }
        if count != 2 {
            return Err(self.bad(format!("a list of {count} values")));
        }
        Ok((vals[0], vals[1]))
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

/// Checks sizes, duplicates and the layout; returns the tensors in file
/// order and the name index.
fn validate(mut tensors: Vec<TensorInfo>, buffer_len: u64) -> Result<(Vec<TensorInfo>, Vec<u32>)> {
    for t in &tensors {
        check_size(t)?;
    }
    tensors.sort_unstable_by(|a, b| {
        (a.begin, a.end)
            .cmp(&(b.begin, b.end))
            .then_with(|| a.name.cmp(&b.name))
    });
    // Duplicate names are found through the name index.
    let count = u32::try_from(tensors.len()).map_err(|_| Error::TooManyTensors {
        count: tensors.len() as u64,
    })?;
    let mut by_name: Vec<u32> = (0..count).collect();
    by_name.sort_unstable_by(|&a, &b| tensors[a as usize].name.cmp(&tensors[b as usize].name));
    for pair in by_name.windows(2) {
        let (a, b) = (&tensors[pair[0] as usize], &tensors[pair[1] as usize]);
        if a.name == b.name {
            return Err(Error::DuplicateTensor {
                name: a.name.clone(),
            });
        }
    }
    let mut expected = 0u64;
    let mut last: Option<&TensorInfo> = None;
    for t in &tensors {
        if t.end > buffer_len {
            return Err(Error::DataTooShort {
                tensor: t.name.clone(),
                end: t.end,
                available: buffer_len,
            });
        }
        if t.begin > expected {
            return Err(Error::Hole {
                tensor: t.name.clone(),
                begin: t.begin,
                end: t.end,
                expected,
                gap: t.begin - expected,
            });
        }
        if t.begin < expected {
            let other = last.map(|o| o.name.clone()).unwrap_or_default();
            return Err(Error::Overlap {
                tensor: t.name.clone(),
                begin: t.begin,
                end: t.end,
                other,
                other_end: expected,
            });
        }
        if t.end > t.begin {
            last = Some(t);
        }
        expected = t.end;
    }
    if expected != buffer_len {
        return Err(Error::TrailingBytes {
            trailing: buffer_len - expected,
            covered: expected,
            available: buffer_len,
        });
    }
    Ok((tensors, by_name))
}

fn check_size(t: &TensorInfo) -> Result<()> {
    if t.begin > t.end {
        return Err(Error::OffsetsReversed {
            tensor: t.name.clone(),
            begin: t.begin,
            end: t.end,
        });
    }
    let overflow = || Error::SizeOverflow {
        tensor: t.name.clone(),
        shape: t.shape.clone(),
        dtype: t.dtype,
    };
    let n = t
        .shape
        .iter()
        .copied()
        .try_fold(1u64, u64::checked_mul)
        .ok_or_else(overflow)?;
    let bits = n.checked_mul(t.dtype.bits()).ok_or_else(overflow)?;
    if bits % 8 != 0 {
        return Err(Error::SubByteNotWhole {
            tensor: t.name.clone(),
            shape: t.shape.clone(),
            dtype: t.dtype,
            bits: t.dtype.bits(),
        });
    }
    let needed = bits / 8;
    let held = t.end - t.begin;
    if held != needed {
        return Err(Error::ByteLengthMismatch {
            tensor: t.name.clone(),
            begin: t.begin,
            end: t.end,
            held,
            shape: t.shape.clone(),
            dtype: t.dtype,
            needed,
        });
    }
    Ok(())
}
