//! Feeding a plan's tensor bytes, in file order, to a writer.

use std::io::Write;

use super::plan::{PlannedTensor, WritePlan};
use crate::error::{Error, Result};

/// Feeds a plan's tensors, in file order, to a writer: the header first,
/// then each tensor's bytes (in as many parts as convenient), checking that
/// each tensor gets exactly its byte length.
pub struct TensorStream<'p, W: Write> {
    plan: &'p WritePlan,
    out: W,
    next: usize,
    filled: u64,
}

impl<'p, W: Write> TensorStream<'p, W> {
    /// Writes the header of `plan` to `out`.
    pub fn new(plan: &'p WritePlan, mut out: W) -> Result<TensorStream<'p, W>> {
        out.write_all(plan.header())
            .map_err(|e| Error::io("writing the header", e))?;
        Ok(TensorStream {
            plan,
            out,
            next: 0,
            filled: 0,
        })
    }

    /// The tensor whose bytes come next, or `None` once all were written.
    pub fn current(&self) -> Option<&'p PlannedTensor> {
        self.plan.tensors().get(self.next)
    }

    /// Appends `bytes` to the current tensor's data.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let Some(t) = self.current() else {
            return Err(Error::StreamOrder {
                reason: format!("{} bytes given after the last tensor", bytes.len()),
            });
        };
        let got = self.filled.saturating_add(bytes.len() as u64);
        if got > t.byte_len() {
            return Err(Error::DataLength {
                tensor: t.name.clone(),
                expected: t.byte_len(),
                got,
            });
        }
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(format!("writing the data of tensor {:?}", t.name), e))?;
        self.filled = got;
        Ok(())
    }

    /// Ends the current tensor, checking it received all its bytes.
    pub fn end_tensor(&mut self) -> Result<()> {
        let Some(t) = self.current() else {
            return Err(Error::StreamOrder {
                reason: "no tensor left to end".to_owned(),
            });
        };
        if self.filled != t.byte_len() {
            return Err(Error::DataLength {
                tensor: t.name.clone(),
                expected: t.byte_len(),
                got: self.filled,
            });
        }
        self.next += 1;
        self.filled = 0;
        Ok(())
    }

    /// Checks every tensor was written and hands the writer back.
    pub fn finish(self) -> Result<W> {
        if let Some(t) = self.current() {
            return Err(Error::DataLength {
                tensor: t.name.clone(),
                expected: t.byte_len(),
                got: self.filled,
            });
        }
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{serialize, NewTensor};
    use super::*;
    use crate::dtype::Dtype;

    use super::super::plan_for_tests as plan;

    #[test]
    fn stream_checks_lengths() {
        let p = plan(
            vec![
                NewTensor::new("a", Dtype::F32, vec![2]),
                NewTensor::new("b", Dtype::U8, vec![3]),
            ],
            None,
        )
        .expect("plan");
        let e = serialize(&p, &[&[0u8; 7], &[0u8; 3]]).expect_err("must fail");
        assert_eq!(e.rule(), "data-length");
        assert_eq!(e.tensor(), Some("a"));
        let e = serialize(&p, &[&[0u8; 8], &[0u8; 4]]).expect_err("must fail");
        assert_eq!(e.tensor(), Some("b"));
        let e = serialize(&p, &[&[0u8; 8]]).expect_err("must fail");
        assert_eq!(e.rule(), "stream-order");

        let mut s = TensorStream::new(&p, Vec::new()).expect("stream");
        s.write(&[1; 4]).expect("part");
        s.write(&[2; 4]).expect("part");
        s.end_tensor().expect("end");
        s.write(&[3; 2]).expect("part");
        let e = s.finish().expect_err("must fail");
        assert_eq!(e.tensor(), Some("b"));
    }
}
