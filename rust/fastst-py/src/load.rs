//! `load_into`: many tensors of one open file read (and converted) into
//! destinations Python allocated beforehand, in one call, with the GIL
//! released while bytes move (`fastst_core::load_into`); `fault_probe`,
//! the probe by which a cold load chooses its page size.

use std::ops::ControlFlow;

use fastst_core::{Destination, Dtype, HugePages, LoadOptions, LoadProgress, Outcome, StderrLine};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::InFile;
use crate::file::{writable, RawFile, WritableBytes};
use crate::wait::hearing_signals;

/// Reads tensors `names` of `raw` into `outs` (writable C-contiguous byte
/// buffers, one per name, exactly the tensor's length, or its converted
/// length where `targets` names another dtype; `None` keeps the tensor's
/// own). `progress(done, total)` is called from this thread, with the GIL,
/// at most every `report_every` source bytes and at the end; an exception
/// it raises (or a signal handler's, e.g. KeyboardInterrupt) stops the load
/// and is raised here. `bar`, when given, draws a progress line on stderr
/// labelled with it (written as given: the caller escapes it). `direct`
/// (None or True: when most of the data is not cached; False: never) reads
/// uncached pages around the page cache. `huge_pages` (None: the measured
/// choice, `HugePages::Auto`; True: keep the allocator's advice; False:
/// never) governs transparent huge pages for the destinations. `stream`:
/// `progress(done, total, filled)` is also called before the first read and
/// each time more tensors are filled (every tensor ending at or before
/// `filled` in the data section), and once more before a read error is
/// raised (its answer then ignored); it answers None, or the most source
/// bytes, in file order from the start of the load, that reads may start
/// below (`fastst_core::StreamReporter`: called with all of them read, it
/// raises the bound or stops the load), and the load lets go of each
/// destination once it is filled (its owner may free it while the rest is
/// read). `in_order` (with
/// `stream`, read around the page cache): requests are handed out close
/// behind the first one not read (the files of a sharded checkpoint). `job`: the
/// bytes of the whole job this load is part of (a prefetch plan's loads; 0: none),
/// for the huge-page choice (`LoadOptions::job`). The reads of an
/// object of a store hear Ctrl-C while they wait (`crate::wait`); the
/// callbacks run on this thread all the same.
#[pyfunction]
#[pyo3(signature = (raw, names, outs, targets, progress = None, bar = None, threads = 0, piece = 0, report_every = 0, direct = None, huge_pages = None, stream = false, in_order = false, job = 0))]
#[allow(clippy::too_many_arguments)]
pub fn load_into(
    py: Python<'_>,
    raw: &Bound<'_, RawFile>,
    names: Vec<String>,
    outs: Vec<PyBuffer<u8>>,
    targets: Vec<Option<String>>,
    progress: Option<PyObject>,
    bar: Option<String>,
    threads: usize,
    piece: usize,
    report_every: u64,
    direct: Option<bool>,
    huge_pages: Option<bool>,
    stream: bool,
    in_order: bool,
    job: u64,
) -> PyResult<()> {
    let raw = raw.get();
    if names.len() != outs.len() || names.len() != targets.len() {
        return Err(PyValueError::new_err(
            "names, outs and targets must have the same length",
        ));
    }
    let file = raw.file()?;
    let mut wanted = Vec::with_capacity(names.len());
    // Where each destination's tensor ends in the data section.
    let mut ends = Vec::with_capacity(names.len());
    for ((name, out), target) in names.iter().zip(&outs).zip(&targets) {
        let info = raw.lookup(&file, name)?;
        let to = match target {
            None => info.dtype,
            Some(t) => Dtype::from_name(t)
                .ok_or_else(|| PyValueError::new_err(format!("unknown dtype {t:?}")))?,
        };
        ends.push(info.end);
        wanted.push((info, to, writable(out)?));
    }
    let mut outs: Vec<Option<PyBuffer<u8>>> = outs.into_iter().map(Some).collect();
    check_disjoint(&wanted)?;
    let options = LoadOptions {
        threads,
        piece,
        report_every,
        direct: direct.unwrap_or(true),
        huge_pages: match huge_pages {
            None => HugePages::Auto,
            Some(true) => HugePages::Keep,
            Some(false) => HugePages::Avoid,
        },
        in_order,
        job,
    };
    let file_ref = &*file;
    let mut pending: Option<PyErr> = None;
    let pending_ref = &mut pending;
    // Borrowed, so that no Python object is dropped without the GIL.
    let progress = progress.as_ref();
    let outcome = hearing_signals(py, raw.canceller(), move |caller| {
        let line = bar.as_deref().map(StderrLine::new);
        let dests = wanted
            .into_iter()
            .map(|(info, to, bytes)| Destination {
                info,
                to,
                dst: bytes.into_slice(),
            })
            .collect();
        let mut report = |p: LoadProgress| -> ControlFlow<(), u64> {
            let LoadProgress {
                done,
                total,
                filled,
            } = p;
            if let Some(line) = &line {
                line.report(done, total);
            }
            // Filled: every request into it is read, and its slices of the
            // destination dropped. Released below, with the GIL.
            let filled_outs: Vec<PyBuffer<u8>> = match stream {
                true => outs
                    .iter_mut()
                    .zip(&ends)
                    .filter(|(_, &end)| end <= filled)
                    .filter_map(|(out, _)| out.take())
                    .collect(),
                false => Vec::new(),
            };
            let called = caller.call(move |py| {
                drop(filled_outs);
                py.check_signals().and_then(|()| match progress {
                    Some(cb) if stream => cb
                        .call1(py, (done, total, filled))
                        .and_then(|bound| bound.extract::<Option<u64>>(py))
                        .map(|bound| bound.unwrap_or(u64::MAX)),
                    Some(cb) => cb.call1(py, (done, total)).map(|_| u64::MAX),
                    None => Ok(u64::MAX),
                })
            });
            match called {
                Some(Ok(bound)) => ControlFlow::Continue(bound),
                Some(Err(e)) => {
                    *pending_ref = Some(e);
                    ControlFlow::Break(())
                }
                None => ControlFlow::Break(()),
            }
        };
        let outcome = if stream {
            fastst_core::load_streaming(file_ref, dests, options, &mut report)
        } else {
            let mut steps = |done, total| match report(LoadProgress {
                done,
                total,
                filled: 0,
            }) {
                ControlFlow::Break(()) => ControlFlow::Break(()),
                ControlFlow::Continue(_) => ControlFlow::Continue(()),
            };
            fastst_core::load_into(file_ref, dests, options, Some(&mut steps))
        };
        if let Some(line) = &line {
            line.finish();
        }
        outcome
    })?;
    match outcome.in_file(raw.display_name())? {
        Outcome::Done => Ok(()),
        Outcome::Stopped => Err(pending.unwrap_or_else(|| {
            pyo3::exceptions::PyKeyboardInterrupt::new_err("the load was stopped")
        })),
    }
}

/// What the probe of a cold load measured here, now
/// (`fastst_core::probe_faults`): `(CPU seconds to fault in 8 MiB as
/// transparent huge pages, or None where the kernel gives none; the same
/// as 4 KiB pages; whether a load would take huge pages)`, or None when the
/// probe could not run. For benchmarks: loads run it themselves.
#[pyfunction]
pub fn fault_probe(py: Python<'_>) -> Option<(Option<f64>, f64, bool)> {
    py.allow_threads(fastst_core::probe_faults).map(|p| {
        (
            p.huge.map(|h| h.as_secs_f64()),
            p.small.as_secs_f64(),
            p.huge_pages_win(),
        )
    })
}

/// Two destinations sharing memory would be written by two threads at once:
/// refused before anything is read.
fn check_disjoint<T, U>(wanted: &[(T, U, WritableBytes)]) -> PyResult<()> {
    let mut ranges: Vec<(usize, usize)> = wanted
        .iter()
        .filter(|(_, _, b)| b.len() > 0)
        .map(|(_, _, b)| (b.addr(), b.addr() + b.len()))
        .collect();
    ranges.sort_unstable();
    if ranges.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err(PyValueError::new_err("destination buffers overlap"));
    }
    Ok(())
}

/// Calls `allocate()` holding the process's mapping gate
/// (`fastst_core::enter_changes`): the destinations a load allocates are
/// mapped while no read of fastst faults pages in, and the reads wait
/// once for the whole batch of changes. The GIL is released while the
/// gate is awaited. Returns what `allocate` returns.
#[pyfunction]
pub fn changing_mappings(py: Python<'_>, allocate: &Bound<'_, PyAny>) -> PyResult<PyObject> {
    let _changing = py.allow_threads(fastst_core::enter_changes);
    allocate.call0().map(Bound::unbind)
}
