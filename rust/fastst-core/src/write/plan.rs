//! The layout of a file to write: tensor order, offsets and the header
//! bytes, byte-identical to the reference writer's for the same tensors.

use std::cmp::Reverse;

use super::METADATA_KEY;
use crate::dtype::{Dtype, SizeError};
use crate::error::{Error, Result};
use crate::json::{write_string, write_u64};

/// One tensor to write: its name, element type and shape (in elements).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTensor {
    /// The tensor's name.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape, outermost dimension first.
    pub shape: Vec<u64>,
}

impl NewTensor {
    /// A tensor named `name`.
    pub fn new(name: impl Into<String>, dtype: Dtype, shape: Vec<u64>) -> NewTensor {
        NewTensor {
            name: name.into(),
            dtype,
            shape,
        }
    }
}

/// A tensor placed in the file: where its bytes go and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    /// The tensor's name.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape, outermost dimension first.
    pub shape: Vec<u64>,
    /// First byte, relative to the start of the byte buffer.
    pub begin: u64,
    /// One past the last byte, relative to the start of the byte buffer.
    pub end: u64,
    /// Position of this tensor in the list given to [`WritePlan::new`].
    pub index: usize,
}

impl PlannedTensor {
    /// Length in bytes of the tensor's data.
    pub fn byte_len(&self) -> u64 {
        self.end - self.begin
    }
}

/// The alignment of the data section every header gets: the JSON is padded
/// with spaces to a multiple of this many bytes, as the reference pads it.
pub const DEFAULT_ALIGN: u64 = 8;

/// The largest alignment of the data section a writer may be asked for
/// (a page).
pub const MAX_ALIGN: u64 = 4096;

/// Checks that `align` is a power of two from 1 to [`MAX_ALIGN`].
pub fn check_alignment(align: u64) -> Result<u64> {
    if align.is_power_of_two() && align <= MAX_ALIGN {
        Ok(align)
    } else {
        Err(Error::BadAlignment {
            value: align,
            max: MAX_ALIGN,
        })
    }
}

/// The alignment of a data section starting at `offset`: the largest power
/// of two, up to [`MAX_ALIGN`], that divides it ([`MAX_ALIGN`] for 0).
pub fn data_alignment(offset: u64) -> u64 {
    if offset == 0 {
        return MAX_ALIGN;
    }
    (1u64 << offset.trailing_zeros()).min(MAX_ALIGN)
}

/// The layout of a file to write: tensors in file order with their
/// offsets, and the complete header (length prefix, JSON, space padding).
#[derive(Clone, Debug)]
pub struct WritePlan {
    tensors: Vec<PlannedTensor>,
    header: Vec<u8>,
    data_len: u64,
}

impl WritePlan {
    /// Orders `tensors`, assigns their offsets and renders the header.
    ///
    /// Metadata keys are written in sorted order (the reference writes them
    /// in hash order, so only files with at most one key can match it byte
    /// for byte). Fails on a name equal to `__metadata__`, a repeated name
    /// or metadata key, a shape whose byte size overflows or does not fill
    /// whole bytes, and a header longer than `header_cap`.
    pub fn new(
        tensors: Vec<NewTensor>,
        metadata: Option<Vec<(String, String)>>,
        header_cap: u64,
    ) -> Result<WritePlan> {
        WritePlan::aligned(tensors, metadata, header_cap, DEFAULT_ALIGN)
    }

    /// As [`WritePlan::new`], with the header padded with spaces so that the
    /// data section starts at a multiple of `align` bytes (a power of two
    /// from 1 to [`MAX_ALIGN`]; below [`DEFAULT_ALIGN`], the header is padded
    /// to a multiple of [`DEFAULT_ALIGN`] as always). Fails with rule
    /// `bad-alignment` for any other `align`.
    pub fn aligned(
        tensors: Vec<NewTensor>,
        metadata: Option<Vec<(String, String)>>,
        header_cap: u64,
        align: u64,
    ) -> Result<WritePlan> {
        let align = check_alignment(align)?.max(DEFAULT_ALIGN);
        let mut lens = Vec::with_capacity(tensors.len());
        for t in &tensors {
            if t.name == METADATA_KEY {
                return Err(Error::ReservedName {
                    name: t.name.clone(),
                });
            }
            lens.push(tensor_byte_len(t)?);
        }
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by(|&a, &b| {
            let (ta, tb) = (&tensors[a], &tensors[b]);
            Reverse(ta.dtype.write_rank())
                .cmp(&Reverse(tb.dtype.write_rank()))
                .then_with(|| ta.name.cmp(&tb.name))
        });
        let mut by_name: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        by_name.sort_unstable();
        if let Some(pair) = by_name.windows(2).find(|p| p[0] == p[1]) {
            return Err(Error::DuplicateName {
                name: pair[0].to_owned(),
            });
        }
        let metadata = match metadata {
            None => None,
            Some(mut pairs) => {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                if let Some(pair) = pairs.windows(2).find(|p| p[0].0 == p[1].0) {
                    return Err(Error::DuplicateKey {
                        key: pair[0].0.clone(),
                    });
                }
                Some(pairs)
            }
        };

        let mut slots: Vec<Option<NewTensor>> = tensors.into_iter().map(Some).collect();
        let mut planned = Vec::with_capacity(slots.len());
        let mut offset = 0u64;
        for index in order {
            let Some(t) = slots.get_mut(index).and_then(Option::take) else {
                continue;
            };
            let end = offset
                .checked_add(lens[index])
                .ok_or_else(|| Error::BadTensorSize {
                    tensor: t.name.clone(),
                    reason: "the file's data would exceed 2^64 bytes".to_owned(),
                })?;
            planned.push(PlannedTensor {
                name: t.name,
                dtype: t.dtype,
                shape: t.shape,
                begin: offset,
                end,
                index,
            });
            offset = end;
        }

        let header = render_header(&planned, metadata.as_deref(), header_cap, align)?;
        let total_ok = (header.len() as u64).checked_add(offset).is_some();
        if !total_ok {
            return Err(Error::FileTooLarge {
                reason: "the file would exceed 2^64 bytes".to_owned(),
            });
        }
        Ok(WritePlan {
            tensors: planned,
            header,
            data_len: offset,
        })
    }

    /// Tensors in file order.
    pub fn tensors(&self) -> &[PlannedTensor] {
        &self.tensors
    }

    /// The bytes before the data: 8-byte length prefix, JSON, padding.
    pub fn header(&self) -> &[u8] {
        &self.header
    }

    /// Length of the padded JSON header (the `N` of the prefix).
    pub fn header_len(&self) -> u64 {
        self.header.len() as u64 - 8
    }

    /// Length of the byte buffer (all tensors' data).
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Length of the whole file.
    pub fn total_len(&self) -> u64 {
        self.header.len() as u64 + self.data_len
    }

    /// Offset of the data section in the file (the header's length).
    pub fn data_start(&self) -> u64 {
        self.header.len() as u64
    }
}

fn tensor_byte_len(t: &NewTensor) -> Result<u64> {
    t.dtype.byte_len(&t.shape).map_err(|e| Error::BadTensorSize {
        tensor: t.name.clone(),
        reason: match e {
            SizeError::Overflow => format!(
                "shape {:?} of {} overflows 64-bit byte arithmetic",
                t.shape, t.dtype
            ),
            SizeError::NotWholeBytes { elements } => format!(
                "shape {:?} holds {elements} elements of {} ({} bits each), which do not fill whole bytes",
                t.shape,
                t.dtype,
                t.dtype.bits()
            ),
        },
    })
}

/// Renders the header as the reference does: compact JSON, `__metadata__`
/// first, each entry's fields in the order dtype, shape, data_offsets,
/// strings escaped as serde_json escapes them, then spaces until the data
/// section starts at a multiple of `align` (a power of two, at least 8: the
/// reference's padding is `align` 8).
fn render_header(
    tensors: &[PlannedTensor],
    metadata: Option<&[(String, String)]>,
    header_cap: u64,
    align: u64,
) -> Result<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(8 + 16 + tensors.len() * 80);
    out.extend_from_slice(&[0u8; 8]);
    out.push(b'{');
    let mut first = true;
    if let Some(pairs) = metadata {
        write_string(&mut out, METADATA_KEY);
        out.extend_from_slice(b":{");
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_string(&mut out, k);
            out.push(b':');
            write_string(&mut out, v);
        }
        out.push(b'}');
        first = false;
    }
    for t in tensors {
        if !first {
            out.push(b',');
        }
        first = false;
        write_string(&mut out, &t.name);
        out.extend_from_slice(b":{\"dtype\":");
        write_string(&mut out, t.dtype.name());
        out.extend_from_slice(b",\"shape\":[");
        for (i, d) in t.shape.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_u64(&mut out, *d);
        }
        out.extend_from_slice(b"],\"data_offsets\":[");
        write_u64(&mut out, t.begin);
        out.push(b',');
        write_u64(&mut out, t.end);
        out.extend_from_slice(b"]}");
        // Give up early on a runaway header rather than building gigabytes.
        if (out.len() as u64).saturating_sub(8) > header_cap {
            return Err(Error::HeaderOverCap {
                len: out.len() as u64 - 8,
                cap: header_cap,
            });
        }
    }
    out.push(b'}');
    // `align` is a power of two up to 4096 (checked by the caller), so this
    // rounding cannot overflow for a header that fits in memory.
    let unit = usize::try_from(align).unwrap_or(8).max(8);
    let padded_total = out.len().div_ceil(unit) * unit;
    let n = (padded_total - 8) as u64;
    if n > header_cap {
        return Err(Error::HeaderOverCap {
            len: n,
            cap: header_cap,
        });
    }
    out.resize(padded_total, b' ');
    out[..8].copy_from_slice(&n.to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::DEFAULT_HEADER_CAP;

    use super::super::plan_for_tests as plan;

    fn json_of(p: &WritePlan) -> &str {
        std::str::from_utf8(&p.header()[8..]).unwrap_or("<not utf-8>")
    }

    #[test]
    fn header_matches_reference_layout() {
        let p = plan(
            vec![
                NewTensor::new("b", Dtype::F32, vec![3]),
                NewTensor::new("a", Dtype::I64, vec![2]),
                NewTensor::new("c", Dtype::Bf16, vec![3]),
                NewTensor::new("z", Dtype::F32, vec![0]),
            ],
            Some(vec![("k", "v")]),
        )
        .expect("plan");
        let expected = concat!(
            r#"{"__metadata__":{"k":"v"},"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"#,
            r#""b":{"dtype":"F32","shape":[3],"data_offsets":[16,28]},"#,
            r#""z":{"dtype":"F32","shape":[0],"data_offsets":[28,28]},"#,
            r#""c":{"dtype":"BF16","shape":[3],"data_offsets":[28,34]}}"#
        );
        assert_eq!(json_of(&p).trim_end_matches(' '), expected);
        assert_eq!(p.header_len() % 8, 0);
        assert_eq!(p.data_len(), 34);
        let order: Vec<usize> = p.tensors().iter().map(|t| t.index).collect();
        assert_eq!(order, vec![1, 0, 3, 2]);
    }

    #[test]
    fn dtype_order_is_the_reference_order() {
        // File order the reference package (0.8.0) gives one tensor of each
        // dtype it can write, with names that sort against that order.
        let expected = [
            "U64",
            "I64",
            "F64",
            "C64",
            "F32",
            "U32",
            "I32",
            "BF16",
            "F16",
            "U16",
            "I16",
            "F8_E5M2FNUZ",
            "F8_E4M3FNUZ",
            "F8_E8M0",
            "F8_E4M3",
            "F8_E5M2",
            "I8",
            "U8",
            "F4",
            "BOOL",
        ];
        let tensors = expected
            .iter()
            .rev()
            .enumerate()
            .map(|(i, name)| {
                let dtype = Dtype::from_name(name).expect("known dtype");
                NewTensor::new(format!("{i:02}"), dtype, vec![2])
            })
            .collect();
        let p = plan(tensors, None).expect("plan");
        let got: Vec<&str> = p.tensors().iter().map(|t| t.dtype.name()).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn empty_file_and_empty_metadata() {
        let p = plan(vec![], None).expect("plan");
        assert_eq!(p.header(), b"\x08\0\0\0\0\0\0\0{}      ");
        let p = plan(vec![], Some(vec![])).expect("plan");
        assert_eq!(json_of(&p), r#"{"__metadata__":{}}     "#);
    }

    #[test]
    fn metadata_keys_are_sorted_and_unique() {
        let p = plan(vec![], Some(vec![("b", "1"), ("a", "2")])).expect("plan");
        assert!(json_of(&p).starts_with(r#"{"__metadata__":{"a":"2","b":"1"}}"#));
        let e = plan(vec![], Some(vec![("a", "1"), ("a", "2")])).expect_err("must fail");
        assert_eq!(e.rule(), "duplicate-key");
    }

    #[test]
    fn rejects_bad_input() {
        let e = plan(
            vec![NewTensor::new("__metadata__", Dtype::F32, vec![1])],
            None,
        )
        .expect_err("must fail");
        assert_eq!(e.rule(), "reserved-name");
        let e = plan(
            vec![
                NewTensor::new("x", Dtype::F32, vec![1]),
                NewTensor::new("x", Dtype::I8, vec![1]),
            ],
            None,
        )
        .expect_err("must fail");
        assert_eq!(e.rule(), "duplicate-name");
        let e = plan(vec![NewTensor::new("x", Dtype::F4, vec![3])], None).expect_err("must fail");
        assert_eq!(e.rule(), "bad-tensor-size");
        assert_eq!(e.tensor(), Some("x"));
        let e = plan(
            vec![NewTensor::new("x", Dtype::F64, vec![u64::MAX / 2, 3])],
            None,
        )
        .expect_err("must fail");
        assert_eq!(e.rule(), "bad-tensor-size");
        let e = plan(
            vec![
                NewTensor::new("x", Dtype::F64, vec![1 << 61]),
                NewTensor::new("y", Dtype::F64, vec![1 << 61]),
            ],
            None,
        )
        .expect_err("must fail");
        assert_eq!(e.rule(), "bad-tensor-size");
    }

    #[test]
    fn aligned_headers_start_the_data_at_a_multiple() {
        let tensors = || {
            vec![
                NewTensor::new("w", Dtype::F32, vec![3]),
                NewTensor::new("b", Dtype::U8, vec![5]),
            ]
        };
        let base = plan(tensors(), Some(vec![("k", "v")])).expect("plan");
        for align in [1u64, 2, 4, 8] {
            let p = WritePlan::aligned(
                tensors(),
                Some(vec![("k".into(), "v".into())]),
                DEFAULT_HEADER_CAP,
                align,
            )
            .expect("plan");
            assert_eq!(p.header(), base.header(), "align {align}");
        }
        for align in [16u64, 64, 256, 4096] {
            let p = WritePlan::aligned(
                tensors(),
                Some(vec![("k".into(), "v".into())]),
                DEFAULT_HEADER_CAP,
                align,
            )
            .expect("plan");
            assert_eq!(p.data_start() % align, 0, "align {align}");
            assert!(p.data_start() < base.data_start() + align);
            // The same JSON, more spaces; offsets unchanged.
            let json = json_of(&p).trim_end_matches(' ');
            assert_eq!(json, json_of(&base).trim_end_matches(' '));
            assert_eq!(p.tensors(), base.tensors());
            assert_eq!(
                data_alignment(p.data_start()),
                align.max(data_alignment(base.data_start()))
            );
        }
        for bad in [0u64, 3, 12, 8192, u64::MAX] {
            let e = WritePlan::aligned(tensors(), None, DEFAULT_HEADER_CAP, bad)
                .expect_err("must fail");
            assert_eq!(e.rule(), "bad-alignment");
        }
        // Padding counts against the header cap.
        let n = base.header_len();
        assert!(WritePlan::aligned(tensors(), Some(vec![("k".into(), "v".into())]), n, 8).is_ok());
        let e = WritePlan::aligned(tensors(), Some(vec![("k".into(), "v".into())]), n, 4096)
            .expect_err("over the cap");
        assert_eq!(e.rule(), "header-over-cap");
    }

    #[test]
    fn data_alignment_is_the_largest_power_of_two_up_to_a_page() {
        assert_eq!(data_alignment(8), 8);
        assert_eq!(data_alignment(24), 8);
        assert_eq!(data_alignment(13), 1);
        assert_eq!(data_alignment(192), 64);
        assert_eq!(data_alignment(4096), 4096);
        assert_eq!(data_alignment(3 << 20), 4096);
        assert_eq!(data_alignment(0), 4096);
    }

    #[test]
    fn header_cap_is_enforced() {
        let tensors: Vec<NewTensor> = (0..100)
            .map(|i| NewTensor::new(format!("t{i}"), Dtype::F32, vec![1]))
            .collect();
        let e = WritePlan::new(tensors.clone(), None, 1000).expect_err("must fail");
        assert_eq!(e.rule(), "header-over-cap");
        let p = WritePlan::new(tensors, None, DEFAULT_HEADER_CAP).expect("plan");
        let n = p.header_len();
        assert!(WritePlan::new(
            (0..100)
                .map(|i| NewTensor::new(format!("t{i}"), Dtype::F32, vec![1]))
                .collect(),
            None,
            n
        )
        .is_ok());
    }
}
