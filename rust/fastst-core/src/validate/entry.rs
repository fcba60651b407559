//! One tensor entry's rules, once its JSON value is typed: the strict
//! reader's visitors and `verify`'s lenient checks both call these, so each
//! rule and its message exist once.

use crate::dtype::{Dtype, SizeError};
use crate::error::{Error, Result};

/// Shape entries must be below this (2^63).
pub(crate) const SHAPE_ENTRY_LIMIT: u64 = 1 << 63;

/// A tensor entry that is not a JSON object (`found`: what it is).
#[cold]
pub fn not_object(tensor: &str, found: String) -> Error {
    Error::EntryNotObject {
        tensor: tensor.to_owned(),
        found,
    }
}

/// A field given twice in one entry.
#[cold]
pub fn duplicate_field(tensor: &str, field: String) -> Error {
    Error::DuplicateField {
        tensor: tensor.to_owned(),
        field,
    }
}

/// A required field (`dtype`, `shape`, `data_offsets`) that is absent.
#[cold]
pub fn missing(tensor: &str, field: &'static str) -> Error {
    Error::MissingField {
        tensor: tensor.to_owned(),
        field,
    }
}

/// The `dtype` or `shape` field holding the wrong kind of JSON value
/// (`found`: what it holds).
#[cold]
pub fn wrong_type(tensor: &str, field: &'static str, found: String) -> Error {
    let expected = if field == "dtype" {
        "a string"
    } else {
        "a list of non-negative integers"
    };
    Error::WrongFieldType {
        tensor: tensor.to_owned(),
        field,
        expected,
        found,
    }
}

/// `data_offsets` that are not a list of two non-negative integers
/// (`found`: what they are).
#[cold]
pub fn bad_offsets(tensor: &str, found: String) -> Error {
    Error::BadOffsets {
        tensor: tensor.to_owned(),
        found,
    }
}

/// The `dtype` field: one of the format's names, case-sensitive.
pub fn dtype(tensor: &str, name: &str) -> Result<Dtype> {
    Dtype::from_name(name).ok_or_else(|| Error::UnknownDtype {
        tensor: tensor.to_owned(),
        dtype: name.to_owned(),
    })
}

/// One shape entry: `value` when the JSON held a non-negative integer
/// (`None` otherwise), accepted below 2^63; `shown` gives the entry's JSON
/// text for the message.
pub fn shape_entry(
    tensor: &str,
    value: Option<u64>,
    shown: impl FnOnce() -> String,
) -> Result<u64> {
    match value {
        Some(v) if v < SHAPE_ENTRY_LIMIT => Ok(v),
        _ => Err(bad_shape_entry(tensor, shown())),
    }
}

/// The error for a shape entry that is not a non-negative integer below
/// 2^63 (`shown`: its JSON text).
#[cold]
pub(crate) fn bad_shape_entry(tensor: &str, shown: String) -> Error {
    Error::BadShapeEntry {
        tensor: tensor.to_owned(),
        value: shown,
    }
}

/// The `data_offsets` list: `count` values, `all_integers` when every one
/// is a non-negative integer, `first_two` the first two of them.
pub fn offsets(
    tensor: &str,
    count: usize,
    all_integers: bool,
    first_two: [u64; 2],
) -> Result<(u64, u64)> {
    let found = if !all_integers {
        "a value that is not a non-negative integer".to_owned()
    } else if count != 2 {
        format!("a list of {count} values")
    } else {
        return Ok((first_two[0], first_two[1]));
    };
    Err(bad_offsets(tensor, found))
}

/// `data_offsets` must not begin after they end.
pub fn ordered(tensor: &str, begin: u64, end: u64) -> Result<()> {
    if begin > end {
        return Err(Error::OffsetsReversed {
            tensor: tensor.to_owned(),
            begin,
            end,
        });
    }
    Ok(())
}

/// The byte-size rule: `shape` of `dtype` ([`Dtype::byte_len`]) must neither
/// overflow nor leave a partial byte, and must equal the bytes the ordered
/// offsets `[begin, end]` hold.
pub fn size(tensor: &str, dtype: Dtype, shape: &[u64], begin: u64, end: u64) -> Result<()> {
    let needed = dtype.byte_len(shape).map_err(|e| match e {
        SizeError::Overflow => Error::SizeOverflow {
            tensor: tensor.to_owned(),
            shape: shape.to_vec(),
            dtype,
        },
        SizeError::NotWholeBytes { .. } => Error::SubByteNotWhole {
            tensor: tensor.to_owned(),
            shape: shape.to_vec(),
            dtype,
            bits: dtype.bits(),
        },
    })?;
    let held = end - begin;
    if held != needed {
        return Err(Error::ByteLengthMismatch {
            tensor: tensor.to_owned(),
            begin,
            end,
            held,
            shape: shape.to_vec(),
            dtype,
            needed,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule<T>(r: Result<T>) -> &'static str {
        r.err().map_or("ok", |e| e.rule().id())
    }

    #[test]
    fn each_rule() {
        assert_eq!(rule(dtype("t", "F32")), "ok");
        assert_eq!(rule(dtype("t", "f32")), "unknown-dtype");
        assert_eq!(rule(shape_entry("t", Some(3), String::new)), "ok");
        assert_eq!(
            rule(shape_entry("t", Some(1 << 63), String::new)),
            "bad-shape-entry"
        );
        assert_eq!(rule(shape_entry("t", None, String::new)), "bad-shape-entry");
        assert_eq!(offsets("t", 2, true, [1, 2]).ok(), Some((1, 2)));
        assert_eq!(rule(offsets("t", 3, true, [1, 2])), "bad-offsets");
        assert_eq!(rule(offsets("t", 2, false, [1, 2])), "bad-offsets");
        assert_eq!(rule(ordered("t", 2, 1)), "offsets-reversed");
        assert_eq!(rule(size("t", Dtype::F32, &[2], 0, 8)), "ok");
        assert_eq!(
            rule(size("t", Dtype::F32, &[2], 0, 4)),
            "byte-length-mismatch"
        );
        assert_eq!(rule(size("t", Dtype::F4, &[3], 0, 2)), "sub-byte-not-whole");
        assert_eq!(
            rule(size("t", Dtype::F64, &[u64::MAX / 2], 0, 0)),
            "size-overflow"
        );
    }

    #[test]
    fn boundaries_of_each_rule() {
        let limit = SHAPE_ENTRY_LIMIT;
        assert_eq!(limit, 9_223_372_036_854_775_808);
        assert_eq!(
            shape_entry("t", Some(limit - 1), String::new).ok(),
            Some(limit - 1)
        );
        assert_eq!(shape_entry("t", Some(0), String::new).ok(), Some(0));
        assert!(ordered("t", 5, 5).is_ok());
        assert!(ordered("t", 0, 1).is_ok());
        assert_eq!(rule(size("t", Dtype::F32, &[2], 8, 16)), "ok");
        assert_eq!(rule(size("t", Dtype::U8, &[0], 7, 7)), "ok");
        assert_eq!(
            rule(size("t", Dtype::U8, &[3], 7, 9)),
            "byte-length-mismatch"
        );
    }

    #[test]
    fn errors_carry_the_entry_and_the_values() {
        let e = ordered("w", 9, 4).err();
        assert!(
            matches!(e, Some(Error::OffsetsReversed { ref tensor, begin: 9, end: 4 }) if tensor == "w"),
            "{e:?}"
        );
        let e = size("w", Dtype::F32, &[2, 3], 8, 12).err();
        assert!(
            matches!(
                e,
                Some(Error::ByteLengthMismatch { ref tensor, begin: 8, end: 12, held: 4, ref shape, dtype: Dtype::F32, needed: 24 })
                    if tensor == "w" && shape == &[2, 3]
            ),
            "{e:?}"
        );
        let e = size("w", Dtype::F6E2M3, &[3], 0, 3).err();
        assert!(
            matches!(e, Some(Error::SubByteNotWhole { ref tensor, ref shape, dtype: Dtype::F6E2M3, bits: 6 }) if tensor == "w" && shape == &[3]),
            "{e:?}"
        );
        let e = size("w", Dtype::I64, &[1 << 62], 0, 0).err();
        assert!(
            matches!(e, Some(Error::SizeOverflow { ref tensor, ref shape, dtype: Dtype::I64 }) if tensor == "w" && shape == &[1 << 62]),
            "{e:?}"
        );
        let e = dtype("w", "F33").err();
        assert!(
            matches!(e, Some(Error::UnknownDtype { ref tensor, ref dtype }) if tensor == "w" && dtype == "F33"),
            "{e:?}"
        );
        let e = shape_entry("w", None, || "-1".to_owned()).err();
        assert!(
            matches!(e, Some(Error::BadShapeEntry { ref tensor, ref value }) if tensor == "w" && value == "-1"),
            "{e:?}"
        );
        let e = offsets("w", 3, true, [0, 4]).err();
        assert!(
            matches!(e, Some(Error::BadOffsets { ref tensor, ref found }) if tensor == "w" && found == "a list of 3 values"),
            "{e:?}"
        );
        let e = offsets("w", 2, false, [0, 4]).err();
        assert!(
            matches!(e, Some(Error::BadOffsets { ref found, .. }) if found == "a value that is not a non-negative integer"),
            "{e:?}"
        );
        let e = wrong_type("w", "dtype", "the number 3".to_owned());
        assert!(
            matches!(e, Error::WrongFieldType { ref tensor, field: "dtype", expected: "a string", ref found } if tensor == "w" && found == "the number 3"),
            "{e:?}"
        );
        let e = wrong_type("w", "shape", "null".to_owned());
        assert!(
            matches!(
                e,
                Error::WrongFieldType {
                    field: "shape",
                    expected: "a list of non-negative integers",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = not_object("w", "a list".to_owned());
        assert!(
            matches!(e, Error::EntryNotObject { ref tensor, ref found } if tensor == "w" && found == "a list"),
            "{e:?}"
        );
        let e = duplicate_field("w", "dtype".to_owned());
        assert!(
            matches!(e, Error::DuplicateField { ref tensor, ref field } if tensor == "w" && field == "dtype"),
            "{e:?}"
        );
        let e = missing("w", "shape");
        assert!(
            matches!(e, Error::MissingField { ref tensor, field: "shape" } if tensor == "w"),
            "{e:?}"
        );
    }
}
