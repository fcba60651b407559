//! Writing `.safetensors` files: the header bytes, byte-identical to the
//! reference writer's for the same tensors, and a streaming writer that
//! replaces a file atomically.
//!
//! - [`plan`]: a [`WritePlan`] takes the tensors' names, dtypes and shapes
//!   plus the metadata, orders the tensors (dtype rank descending, then name,
//!   as the reference does), assigns the data offsets and renders the header.
//! - [`stream`]: the bytes of each tensor are fed in that order to a
//!   [`TensorStream`], which checks every tensor gets exactly its byte length.
//! - [`atomic`]: [`AtomicFile`] is the destination for files, a temporary
//!   file next to the target renamed over it on commit (flushed to disk first
//!   by the durability policy) and removed on any failure, so the target is
//!   either the old file or the complete new one; [`write_atomic`] runs the
//!   whole sequence.
//! - [`writeback`]: [`FileSink`], the file as the stream writes it; for a
//!   durable save it has the data written to the device behind the writer
//!   (`sync_file_range`), so the flush before the commit finds little left.
//! - [`layout_writer`]: [`LayoutWriter`], the streaming writer: a plan's
//!   tensors written at their offsets in any order, from any thread, and
//!   committed atomically only once all are complete.
//! - [`ledger`]: [`Ledger`], where each tensor of a streaming writer stands
//!   and the rules on what it is given, shared by the local writer and the
//!   object-store writer of `fastst-remote`.
//!
//! The header is padded with spaces to a multiple of 8 bytes, as the
//! reference pads it, or with [`WritePlan::aligned`] so that the data
//! section starts at a multiple of a chosen power of two up to a page.

mod atomic;
mod layout_writer;
mod ledger;
mod plan;
mod stream;
mod writeback;

use std::io::Write;
use std::path::Path;

pub use atomic::{
    link_replace, replace_with_bytes, write_atomic, AtomicFile, Blocking, Replaced, WriteFailure,
};
pub use layout_writer::{LayoutWriter, TensorWrite};
pub use ledger::Ledger;
pub use plan::{
    check_alignment, data_alignment, NewTensor, PlannedTensor, WritePlan, DEFAULT_ALIGN, MAX_ALIGN,
};
pub use stream::TensorStream;
pub use writeback::{FileSink, WINDOW as WRITEBACK_WINDOW};

use crate::error::{Error, Result};

/// The key reserved for the metadata map in a header.
pub const METADATA_KEY: &str = "__metadata__";

/// Size of the write buffer that coalesces small tensors into larger writes.
pub const WRITE_BUFFER: usize = 1 << 20;

/// Writes the tensors of `plan` to `path` atomically; `data[i]` holds the
/// bytes of the `i`-th tensor given to [`WritePlan::new`].
pub fn write_file(plan: &WritePlan, data: &[&[u8]], path: &Path, durable: bool) -> Result<()> {
    write_atomic(plan, path, Some(durable), &|work| work(), |stream| {
        feed(plan, data, stream)
    })
    .map_err(WriteFailure::into_inner)
}

/// Serialises the tensors of `plan` to memory; `data[i]` holds the bytes of
/// the `i`-th tensor given to [`WritePlan::new`].
pub fn serialize(plan: &WritePlan, data: &[&[u8]]) -> Result<Vec<u8>> {
    let cap = usize::try_from(plan.total_len()).map_err(|_| Error::FileTooLarge {
        reason: "the file does not fit in memory".to_owned(),
    })?;
    let mut stream = TensorStream::new(plan, Vec::with_capacity(cap))?;
    feed(plan, data, &mut stream)?;
    stream.finish()
}

fn feed<W: Write>(
    plan: &WritePlan,
    data: &[&[u8]],
    stream: &mut TensorStream<'_, W>,
) -> Result<()> {
    for t in plan.tensors() {
        let bytes = data.get(t.index).ok_or_else(|| Error::StreamOrder {
            reason: format!("no data given for tensor {:?}", t.name),
        })?;
        stream.write(bytes)?;
        stream.end_tensor()?;
    }
    Ok(())
}

/// A plan of `tensors` and `meta` under the default header cap, for the
/// writer's unit tests.
#[cfg(test)]
pub(crate) fn plan_for_tests(
    tensors: Vec<NewTensor>,
    meta: Option<Vec<(&str, &str)>>,
) -> Result<WritePlan> {
    let meta = meta.map(|m| {
        m.into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    });
    WritePlan::new(tensors, meta, crate::header::DEFAULT_HEADER_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Dtype;
    use crate::header::{check_prefix, Header, DEFAULT_HEADER_CAP};

    use super::plan_for_tests as plan;

    #[test]
    fn parse_file_bytes_checks_framing() {
        let p = plan(vec![NewTensor::new("a", Dtype::U8, vec![2])], None).expect("plan");
        let bytes = serialize(&p, &[&[5, 6]]).expect("ser");
        let h = crate::header::parse_file_bytes(&bytes, DEFAULT_HEADER_CAP).expect("parse");
        assert_eq!(h.data_start(), p.header().len() as u64);
        let e =
            crate::header::parse_file_bytes(&bytes[..5], DEFAULT_HEADER_CAP).expect_err("short");
        assert_eq!(e.rule(), "file-too-short");
        let e = crate::header::parse_file_bytes(&bytes[..bytes.len() - 1], DEFAULT_HEADER_CAP)
            .expect_err("truncated");
        assert_eq!(e.rule(), "data-too-short");
    }

    #[test]
    fn serialized_bytes_parse_back() {
        let f32s: Vec<u8> = (0..12u8).collect();
        let f4 = [0x21u8, 0x43];
        let p = plan(
            vec![
                NewTensor::new("w", Dtype::F32, vec![3]),
                NewTensor::new("q", Dtype::F4, vec![2, 2]),
                NewTensor::new("s", Dtype::F6E2M3, vec![4]),
                NewTensor::new("e", Dtype::U8, vec![0, 5]),
                NewTensor::new("scalar", Dtype::I16, vec![]),
            ],
            Some(vec![("format", "pt")]),
        )
        .expect("plan");
        let f6 = [1u8, 2, 3];
        let scalar = [7u8, 0];
        let bytes = serialize(&p, &[&f32s, &f4, &f6, &[], &scalar]).expect("serialize");
        assert_eq!(bytes.len() as u64, p.total_len());
        let n = check_prefix(&bytes, bytes.len() as u64, DEFAULT_HEADER_CAP).expect("prefix");
        let start = 8 + n as usize;
        let h = Header::parse(&bytes[8..start], (bytes.len() - start) as u64).expect("parse");
        let w = h.require("w").expect("w");
        assert_eq!(
            &bytes[start + w.begin as usize..start + w.end as usize],
            &f32s[..]
        );
        let q = h.require("q").expect("q");
        assert_eq!(
            &bytes[start + q.begin as usize..start + q.end as usize],
            &f4[..]
        );
        assert_eq!(h.require("scalar").expect("s").shape, Vec::<u64>::new());
        assert_eq!(
            h.metadata(),
            Some(&[("format".to_owned(), "pt".to_owned())][..])
        );
    }
}
