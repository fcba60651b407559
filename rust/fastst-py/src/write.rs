//! `WritePlan`: the Python face of the writer. The layout, header, length checks and the atomic file
//! are `fastst-core`'s; this module moves bytes from Python buffers to them
//! with the GIL released.

use fastst_core::{
    link_replace, replace_with_bytes, write_atomic, Dtype, Error, NewTensor, Replaced,
    TensorStream, WritePlan,
};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyIterator, PyList, PyTuple};
use std::sync::Mutex;

use crate::errors::{to_pyerr, InFile};
use crate::paths::FsPath;

/// Chunks at least this long are written with the GIL released; shorter
/// ones are not worth the hand-off.
pub(crate) const RELEASE_GIL_AT: usize = 64 * 1024;

/// The layout of a file to write, built from `(name, dtype, shape)` triples
/// and the metadata pairs.
#[pyclass(frozen, module = "fastst._fastst.write", name = "WritePlan")]
pub struct PyWritePlan {
    pub(crate) plan: WritePlan,
}

/// One Python buffer of bytes (`bytes`, `bytearray`, a uint8 array...),
/// kept exported while its bytes are borrowed.
pub(crate) struct Chunk {
    buffer: PyBuffer<u8>,
}

impl Chunk {
    pub(crate) fn get(obj: &Bound<'_, PyAny>, tensor: &str) -> PyResult<Chunk> {
        let buffer = PyBuffer::<u8>::get(obj)?;
        if !buffer.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "tensor {tensor:?}: a data chunk must be a C-contiguous byte buffer"
            )));
        }
        Ok(Chunk { buffer })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let len = self.buffer.len_bytes();
        if len == 0 {
            return &[];
        }
        // SAFETY: the buffer is C-contiguous (checked in `get`), so its
        // `len_bytes()` bytes start at `buf_ptr()`; `self.buffer` keeps the
        // export alive for as long as the returned slice borrows `self`. The
        // bytes are only copied to a file or another buffer; if Python code
        // mutates the source concurrently the copy may mix old and new
        // values, as with any write of shared memory, but no Rust invariant
        // depends on their contents.
        unsafe { std::slice::from_raw_parts(self.buffer.buf_ptr().cast::<u8>(), len) }
    }
}

impl PyWritePlan {
    /// Feeds every tensor's data, in file order, to `stream`. `sources[i]`
    /// holds the data of input tensor `i`: one C-contiguous byte buffer, or
    /// an iterator of them.
    pub(crate) fn feed<W: std::io::Write + Send>(
        &self,
        py: Python<'_>,
        display_name: &str,
        sources: &Bound<'_, PyAny>,
        stream: &mut TensorStream<'_, W>,
    ) -> PyResult<()> {
        let write = |stream: &mut TensorStream<'_, W>, part: &Bound<'_, PyAny>, tensor: &str| {
            let chunk = Chunk::get(part, tensor)?;
            let bytes = chunk.bytes();
            let result = if bytes.len() >= RELEASE_GIL_AT {
                py.allow_threads(|| stream.write(bytes))
            } else {
                stream.write(bytes)
            };
            result.in_file(display_name)
        };
        for t in self.plan.tensors() {
            let source = sources.get_item(t.index)?;
            if let Ok(parts) = source.downcast::<PyIterator>() {
                for part in parts.clone() {
                    write(stream, &part?, &t.name)?;
                }
            } else {
                write(stream, &source, &t.name)?;
            }
            stream.end_tensor().in_file(display_name)?;
        }
        Ok(())
    }
}

#[pymethods]
impl PyWritePlan {
    /// Bytes per writeback window of a durable save: each window is handed
    /// to the device as the writer leaves it (`sync_file_range`, Linux).
    #[classattr]
    const WRITEBACK_WINDOW: u64 = fastst_core::internal::WRITEBACK_WINDOW;

    /// Orders the tensors, assigns offsets and renders the header, padded
    /// so that the data starts at a multiple of `align` (a power of two up
    /// to 4096; the header is always padded to a multiple of 8); fails
    /// with a `SerializeError` on a reserved or repeated name, a shape that
    /// does not fill whole bytes or overflows, a header over `header_cap`,
    /// or another `align`.
    #[new]
    #[pyo3(signature = (tensors, metadata, display_name, header_cap = fastst_core::DEFAULT_HEADER_CAP, align = fastst_core::DEFAULT_ALIGN))]
    fn new(
        tensors: Vec<(String, String, Vec<u64>)>,
        metadata: Option<Vec<(String, String)>>,
        display_name: &str,
        header_cap: u64,
        align: u64,
    ) -> PyResult<PyWritePlan> {
        let plan = new_plan(tensors, metadata, display_name, header_cap, align)?;
        Ok(PyWritePlan { plan })
    }

    /// Offset of the data section in the file.
    #[getter]
    fn data_start(&self) -> u64 {
        self.plan.data_start()
    }

    /// Input positions of the tensors, in file order.
    #[getter]
    fn order(&self) -> Vec<usize> {
        self.plan.tensors().iter().map(|t| t.index).collect()
    }

    /// `(name, dtype, shape, begin, end)` of each tensor, in file order.
    fn tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = tensor_rows(
            py,
            self.plan
                .tensors()
                .iter()
                .map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice(), t.begin, t.end)),
        )?;
        PyList::new(py, items)
    }

    /// The bytes before the data: length prefix, JSON, padding.
    fn header<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.plan.header())
    }

    /// Length of the padded JSON header.
    #[getter]
    fn header_len(&self) -> u64 {
        self.plan.header_len()
    }

    /// Length of all tensors' data.
    #[getter]
    fn data_len(&self) -> u64 {
        self.plan.data_len()
    }

    /// Length of the whole file.
    #[getter]
    fn total_len(&self) -> u64 {
        self.plan.total_len()
    }

    /// Writes the file to `path` through a temporary file renamed over it.
    /// `sources[i]` holds the data of input tensor `i`: a C-contiguous byte
    /// buffer, or an iterator of them (consumed in file order). On any error
    /// (a Python exception from an iterator included) the temporary file is
    /// removed and `path` is left as it was. `durable` flushes the data to
    /// disk before the rename (written to the device behind the writer as
    /// it goes, then `fsync`); `None` does so only when a file is replaced,
    /// so that a system crash can never lose the old file's contents.
    #[pyo3(signature = (path, display_name, sources, durable = None))]
    fn write_file(
        &self,
        py: Python<'_>,
        path: FsPath,
        display_name: &str,
        sources: &Bound<'_, PyAny>,
        durable: Option<bool>,
    ) -> PyResult<()> {
        let blocking = |work: &mut (dyn FnMut() + Send)| py.allow_threads(work);
        write_atomic(&self.plan, &path, durable, &blocking, |stream| {
            self.feed(py, display_name, sources, stream)
        })
        .in_file(display_name)
    }

    /// The whole file as `bytes`, allocated once at its exact size; `sources`
    /// as for `write_file`.
    fn to_bytes<'py>(
        &self,
        py: Python<'py>,
        display_name: &str,
        sources: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let total = usize::try_from(self.plan.total_len()).map_err(|_| {
            let err = Error::FileTooLarge {
                reason: format!(
                    "the file would be {} bytes, more than this machine can address",
                    self.plan.total_len()
                ),
            };
            to_pyerr(display_name, err)
        })?;
        PyBytes::new_with(py, total, |out: &mut [u8]| {
            let mut stream = TensorStream::new(&self.plan, out).in_file(display_name)?;
            self.feed(py, display_name, sources, &mut stream)?;
            let rest = stream.finish().in_file(display_name)?;
            if !rest.is_empty() {
                let err = Error::StreamOrder {
                    reason: format!("{} bytes of the output were not written", rest.len()),
                };
                return Err(to_pyerr(display_name, err));
            }
            Ok(())
        })
    }
}

/// The plan of `(name, dtype, shape)` triples and metadata pairs, the data
/// aligned to `align`; errors name `display_name`.
pub(crate) fn new_plan(
    tensors: Vec<(String, String, Vec<u64>)>,
    metadata: Option<Vec<(String, String)>>,
    display_name: &str,
    header_cap: u64,
    align: u64,
) -> PyResult<WritePlan> {
    let mut entries = Vec::with_capacity(tensors.len());
    for (name, dtype, shape) in tensors {
        entries.push(NewTensor {
            dtype: header_dtype(&name, &dtype, display_name)?,
            name,
            shape,
        });
    }
    WritePlan::aligned(entries, metadata, header_cap, align).in_file(display_name)
}

/// The dtype of header name `dtype`, or rule `unsupported-dtype` naming
/// `tensor` and `display_name`.
pub(crate) fn header_dtype(tensor: &str, dtype: &str, display_name: &str) -> PyResult<Dtype> {
    Dtype::from_name(dtype).ok_or_else(|| {
        let err = Error::UnsupportedDtype {
            tensor: tensor.to_owned(),
            dtype: dtype.to_owned(),
        };
        to_pyerr(display_name, err)
    })
}

/// `(name, dtype, shape, begin, end)` tuples of tensors, in the order given.
pub(crate) fn tensor_rows<'py, 'a>(
    py: Python<'py>,
    tensors: impl Iterator<Item = (&'a str, fastst_core::Dtype, &'a [u64], u64, u64)>,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    tensors
        .map(|(name, dtype, shape, begin, end)| {
            (
                name,
                dtype.name(),
                PyTuple::new(py, shape.iter().copied())?,
                begin,
                end,
            )
                .into_pyobject(py)
        })
        .collect()
}

/// The alignment of a data section starting at `offset`: the largest power
/// of two up to 4096 that divides it.
#[pyfunction]
pub fn data_alignment(offset: u64) -> u64 {
    fastst_core::data_alignment(offset)
}

/// Replaces `path` with a file holding `data`, whole or not at all, through
/// the core's one atomic commit (`AtomicFile`): an exclusive temporary
/// file beside `path` (a symbolic link at `path` is replaced, never written
/// through), flushed to disk with its folder when `durable`, renamed over
/// `path`. On any error `path` is left as it was and the temporary file is
/// removed. The GIL is released while the bytes are written.
#[pyfunction]
#[pyo3(signature = (path, display_name, data, durable = true))]
pub fn replace_file(
    py: Python<'_>,
    path: FsPath,
    display_name: &str,
    data: &[u8],
    durable: bool,
) -> PyResult<()> {
    py.allow_threads(|| replace_with_bytes(&path, data, durable))
        .in_file(display_name)
}

/// Gives the complete file `staged` the name `target` too, replacing what is
/// there in one step (`fastst_core::link_replace`: a hard link renamed over
/// `target`, or a copy committed atomically where there are no hard links);
/// `staged` keeps its name. The GIL is released meanwhile. Returns the
/// replaced file, held until `release()` (or until the object is dropped).
#[pyfunction]
#[pyo3(signature = (staged, target, display_name, durable = false))]
pub fn link_file(
    py: Python<'_>,
    staged: FsPath,
    target: FsPath,
    display_name: &str,
    durable: bool,
) -> PyResult<ReplacedFile> {
    py.allow_threads(|| link_replace(&staged, &target, durable))
        .in_file(display_name)
        .map(|held| ReplacedFile(Mutex::new(held)))
}

/// The file a `link_file` replaced (`fastst_core::Replaced`): a commit keeps
/// it until its last flush, then lets it go.
#[pyclass(frozen, module = "fastst._fastst.write", name = "ReplacedFile")]
pub struct ReplacedFile(Mutex<Replaced>);

#[pymethods]
impl ReplacedFile {
    /// Lets the replaced file go (its blocks are freed by a background
    /// thread); later calls do nothing.
    fn release(&self) {
        if let Ok(mut held) = self.0.lock() {
            drop(std::mem::take(&mut *held));
        }
    }
}
