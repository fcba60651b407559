//! `stats_file`: what each tensor's values look like (the forensics
//! crate's `stats_path`), without the GIL, as plain Python data.

use fastst_core::DEFAULT_HEADER_CAP;
use fastst_inspect::{self as inspect, Number, StatsOptions};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::InFile;
use crate::inspect::with_progress;
use crate::paths::FsPath;

fn number<'py>(py: Python<'py>, n: Option<Number>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match n {
        Some(Number::Int(v)) => v.into_pyobject(py)?.into_any(),
        Some(Number::Float(v)) => v.into_pyobject(py)?.into_any(),
        None => py.None().into_bound(py),
    })
}

/// Statistics of the tensors of a file (those in `names`, every tensor when
/// None), in file order: a list of dicts with `name`, `dtype`, `shape`,
/// `values`, `finite`, `nan`, `inf`, `zero`, `min`, `max`, `abs_max` (int
/// for integer kinds and BOOL, float otherwise, None without finite
/// values), `mean`, `std` and `histogram` (`lo`, `hi`, `counts`, `exact`;
/// or None).
#[pyfunction]
#[pyo3(signature = (path, names = None, bins = 32, threads = 0, header_cap = DEFAULT_HEADER_CAP, progress = None))]
fn stats_file<'py>(
    py: Python<'py>,
    path: FsPath,
    names: Option<Vec<String>>,
    bins: usize,
    threads: usize,
    header_cap: u64,
    progress: Option<String>,
) -> PyResult<Bound<'py, PyList>> {
    let name = crate::text::display_path(&path);
    let options = StatsOptions {
        bins,
        threads,
        header_cap,
    };
    let url = crate::inspect::remote(py, &path)?;
    let cancel = url.as_ref().map(fastst_remote::RemoteSource::canceller);
    let found = with_progress(py, cancel.as_ref(), progress.as_deref(), |p| match url {
        Some(src) => inspect::stats_source(src, names.as_deref(), &options, p),
        None => inspect::stats_path(&path, names.as_deref(), &options, p),
    })?
    .in_file(&name)?;
    // Thousands of small dicts would each wake the cycle collector, which
    // has nothing to find in them: pause it while they are built.
    let gc = py.import("gc")?;
    let collecting = gc.call_method0("isenabled")?.is_truthy()?;
    gc.call_method0("disable")?;
    let out = to_python(py, found);
    if collecting {
        gc.call_method0("enable")?;
    }
    out
}

fn to_python(py: Python<'_>, found: Vec<inspect::TensorStats>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for s in found {
        let d = PyDict::new(py);
        d.set_item("name", &s.name)?;
        d.set_item("dtype", s.dtype.name())?;
        d.set_item("shape", &s.shape)?;
        d.set_item("values", s.values)?;
        d.set_item("finite", s.finite)?;
        d.set_item("nan", s.nan)?;
        d.set_item("inf", s.inf)?;
        d.set_item("zero", s.zero)?;
        d.set_item("min", number(py, s.min)?)?;
        d.set_item("max", number(py, s.max)?)?;
        d.set_item("abs_max", number(py, s.abs_max)?)?;
        d.set_item("mean", s.mean)?;
        d.set_item("std", s.std)?;
        match &s.histogram {
            Some(h) => {
                let hd = PyDict::new(py);
                hd.set_item("lo", h.lo)?;
                hd.set_item("hi", h.hi)?;
                hd.set_item("counts", &h.counts)?;
                hd.set_item("exact", h.exact)?;
                d.set_item("histogram", hd)?;
            }
            None => d.set_item("histogram", py.None())?,
        }
        out.append(d)?;
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stats_file, m)?)
}
