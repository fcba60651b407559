//! Where each tensor of a streaming writer stands: the rules every
//! streaming writer (a local file, an object of a store) enforces on the
//! tensors it is given, in one place.
//!
//! A [`Ledger`] holds a [`WritePlan`] and, per tensor, whether it is
//! pending, being written, written, or spoiled. [`Ledger::begin`] admits a
//! tensor only when it is in the layout with exactly its dtype and shape
//! and is neither written nor being written (rules
//! `tensor-not-in-layout`, `layout-mismatch`, `tensor-written-twice`);
//! [`Ledger::close`] closes the writer and says whether every tensor was
//! written (rule `tensors-missing` otherwise). A write that stops part-way
//! gives its tensor back ([`Ledger::release`]): pending again when the
//! writer can take it anew, spoiled when it cannot (some of its bytes left
//! already, as a part of an upload does).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::plan::{PlannedTensor, WritePlan};
use crate::dtype::Dtype;
use crate::error::{Error, Result};

/// How many missing tensors a [`Error::TensorsMissing`] message names.
const NAMED_MISSING: usize = 5;

/// Where one tensor of the layout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Nothing written yet (or a write that failed part-way and left
    /// nothing that counts: it may be written again, in full).
    Pending,
    /// A write is filling it.
    Writing,
    /// Written completely.
    Written,
    /// A write failed part-way after some of its bytes were sent for good:
    /// it cannot be written again (the writer can no longer save).
    Spoiled,
}

#[derive(Debug)]
struct State {
    /// Per tensor, in file order.
    slots: Vec<Slot>,
    /// Committed or aborted: nothing more may be written.
    closed: bool,
}

/// The tensors of a streaming writer's layout and where each stands (see
/// the module's documentation). Every method takes `&self`: one ledger is
/// shared by the threads that write.
#[derive(Debug)]
pub struct Ledger {
    plan: WritePlan,
    /// Name -> position in `plan.tensors()` (file order).
    by_name: HashMap<String, usize>,
    state: Mutex<State>,
}

impl Ledger {
    /// A ledger of `plan`'s tensors, all pending.
    pub fn new(plan: WritePlan) -> Ledger {
        let by_name = plan
            .tensors()
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let slots = vec![Slot::Pending; plan.tensors().len()];
        Ledger {
            plan,
            by_name,
            state: Mutex::new(State {
                slots,
                closed: false,
            }),
        }
    }

    /// The layout.
    pub fn plan(&self) -> &WritePlan {
        &self.plan
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave the slots
        // inconsistent (each update is one assignment): carry on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a write of tensor `name`, which must be in the layout with
    /// exactly `dtype` and `shape` and be neither written nor being
    /// written; returns its position in the plan's tensors (file order).
    /// The caller then either [`Ledger::finish`]es or
    /// [`Ledger::release`]s it.
    pub fn begin(&self, name: &str, dtype: Dtype, shape: &[u64]) -> Result<usize> {
        let index = *self.by_name.get(name).ok_or_else(|| Error::NotInLayout {
            name: name.to_owned(),
        })?;
        let planned = self.planned(index)?;
        if planned.dtype != dtype || planned.shape != shape {
            return Err(Error::LayoutMismatch {
                tensor: name.to_owned(),
                expected: describe(planned.dtype, &planned.shape),
                got: describe(dtype, shape),
            });
        }
        let mut state = self.state();
        if state.closed {
            return Err(Error::WriterClosed);
        }
        let slot = state.slots.get_mut(index).ok_or(Error::WriterClosed)?;
        let how = match *slot {
            Slot::Pending => {
                *slot = Slot::Writing;
                return Ok(index);
            }
            Slot::Written => "was written already",
            Slot::Writing => "is being written by another call",
            Slot::Spoiled => {
                "was partly written and its first bytes were uploaded already, so the \
                 upload cannot be completed"
            }
        };
        Err(Error::WrittenTwice {
            name: name.to_owned(),
            how,
        })
    }

    /// The tensor at `index` of the plan (file order).
    pub fn planned(&self, index: usize) -> Result<&PlannedTensor> {
        self.plan.tensors().get(index).ok_or(Error::WriterClosed)
    }

    /// Checks that a write of the tensor at `index` that took `got` bytes
    /// in all stays within its length (rule `data-length`).
    pub fn check_len(&self, index: usize, got: u64) -> Result<&PlannedTensor> {
        let t = self.planned(index)?;
        if got > t.byte_len() {
            return Err(Error::DataLength {
                tensor: t.name.clone(),
                expected: t.byte_len(),
                got,
            });
        }
        Ok(t)
    }

    /// Marks the tensor at `index`, whose write took `filled` bytes, as
    /// written: rule `data-length` unless that is its length, rule
    /// `closed-file` when the writer was closed meanwhile.
    pub fn finish(&self, index: usize, filled: u64) -> Result<()> {
        let t = self.planned(index)?;
        if filled != t.byte_len() {
            return Err(Error::DataLength {
                tensor: t.name.clone(),
                expected: t.byte_len(),
                got: filled,
            });
        }
        let mut state = self.state();
        if state.closed {
            return Err(Error::WriterClosed);
        }
        if let Some(slot) = state.slots.get_mut(index) {
            *slot = Slot::Written;
        }
        Ok(())
    }

    /// Gives back the tensor at `index` whose write stopped unfinished:
    /// pending again when `again` (it may be written anew, in full),
    /// spoiled otherwise.
    pub fn release(&self, index: usize, again: bool) {
        let mut state = self.state();
        if let Some(slot) = state.slots.get_mut(index) {
            if *slot == Slot::Writing {
                *slot = if again { Slot::Pending } else { Slot::Spoiled };
            }
        }
    }

    /// Names of the tensors not written completely yet, in the order they
    /// were given to the plan.
    pub fn missing(&self) -> Vec<&str> {
        let state = self.state();
        let mut missing: Vec<&PlannedTensor> = self
            .plan
            .tensors()
            .iter()
            .zip(&state.slots)
            .filter(|(_, s)| **s != Slot::Written)
            .map(|(t, _)| t)
            .collect();
        missing.sort_by_key(|t| t.index);
        missing.into_iter().map(|t| t.name.as_str()).collect()
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// Closes the writer for its commit: `Ok` when every tensor was
    /// written completely; rule `tensors-missing` naming what is missing
    /// otherwise, rule `closed-file` when it was closed already. Closed
    /// afterwards either way.
    pub fn close(&self) -> Result<()> {
        let missing = {
            let mut state = self.state();
            if state.closed {
                return Err(Error::WriterClosed);
            }
            state.closed = true;
            state.slots.iter().filter(|s| **s != Slot::Written).count()
        };
        if missing == 0 {
            return Ok(());
        }
        let names = self.missing();
        let shown: Vec<String> = names
            .iter()
            .take(NAMED_MISSING)
            .map(|n| format!("{n:?}"))
            .collect();
        let more = names.len().saturating_sub(NAMED_MISSING);
        let mut list = shown.join(", ");
        if more > 0 {
            list.push_str(&format!(" and {more} more"));
        }
        Err(Error::TensorsMissing {
            tensor: names.first().map(|n| (*n).to_owned()).unwrap_or_default(),
            count: missing,
            total: self.plan.tensors().len(),
            names: list,
        })
    }

    /// Closes the writer without a commit (an abort); true when it was
    /// open until now.
    pub fn close_quietly(&self) -> bool {
        let mut state = self.state();
        !std::mem::replace(&mut state.closed, true)
    }
}

/// `"BF16 [4096, 4096]"`.
fn describe(dtype: Dtype, shape: &[u64]) -> String {
    format!("{dtype} {shape:?}")
}

#[cfg(test)]
mod tests {
    use super::super::{plan_for_tests as plan, NewTensor};
    use super::*;

    fn ledger() -> Ledger {
        let p = plan(
            vec![
                NewTensor::new("b", Dtype::U8, vec![3]),
                NewTensor::new("a", Dtype::F32, vec![2]),
            ],
            None,
        )
        .expect("plan");
        Ledger::new(p)
    }

    #[test]
    fn a_released_tensor_is_pending_again_or_spoiled() {
        let l = ledger();
        let b = l.begin("b", Dtype::U8, &[3]).expect("b");
        l.release(b, true);
        let b = l.begin("b", Dtype::U8, &[3]).expect("again");
        l.release(b, false);
        let e = l.begin("b", Dtype::U8, &[3]).expect_err("spoiled");
        assert_eq!(
            (e.rule().id(), e.tensor()),
            ("tensor-written-twice", Some("b"))
        );
        assert!(e.to_string().contains("uploaded already"), "{e}");
        let a = l.begin("a", Dtype::F32, &[2]).expect("a");
        assert_eq!(l.check_len(a, 9).expect_err("long").rule(), "data-length");
        l.finish(a, 8).expect("finish");
        assert_eq!(l.missing(), ["b"]);
        let e = l.close().expect_err("missing");
        assert_eq!((e.rule().id(), e.tensor()), ("tensors-missing", Some("b")));
        assert!(l.is_closed());
        assert!(!l.close_quietly());
        assert_eq!(l.close().expect_err("closed").rule(), "closed-file");
    }
}
