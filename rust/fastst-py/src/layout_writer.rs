//! `LayoutWriter`: the Python face of the core's streaming writer. The
//! layout is planned as every save plans it; each tensor's bytes (a buffer,
//! or an iterator of buffers) are written at its offset with the GIL
//! released, from whichever thread calls; the file replaces its target only
//! on `commit` with every tensor complete.

use fastst_core::{LayoutWriter, TensorWrite};
use pyo3::prelude::*;
use pyo3::types::{PyIterator, PyList};

use crate::errors::InFile;
use crate::paths::FsPath;
use crate::write::{header_dtype, new_plan, tensor_rows, Chunk, RELEASE_GIL_AT};

/// A file being written from its layout (see the module's documentation).
#[pyclass(frozen, module = "fastst._fastst", name = "LayoutWriter")]
pub struct PyLayoutWriter {
    writer: LayoutWriter,
    display_name: String,
}

impl PyLayoutWriter {
    /// Writes one part of a tensor, with the GIL released when it is large.
    fn write_part(
        &self,
        py: Python<'_>,
        write: &mut TensorWrite<'_>,
        part: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let chunk = Chunk::get(part, write.name())?;
        let bytes = chunk.bytes();
        let result = if bytes.len() >= RELEASE_GIL_AT {
            py.allow_threads(|| write.write(bytes))
        } else {
            write.write(bytes)
        };
        result.in_file(&self.display_name)
    }
}

#[pymethods]
impl PyLayoutWriter {
    /// Plans the layout of `(name, dtype, shape)` triples and `metadata`
    /// (the data aligned to `align`), creates the temporary file beside
    /// `path` (unnamed where the system allows) and writes the header.
    /// `durable`: flush the data to the device before the commit (`None`:
    /// when a file is replaced).
    #[new]
    #[pyo3(signature = (path, display_name, tensors, metadata, header_cap = fastst_core::DEFAULT_HEADER_CAP, align = fastst_core::DEFAULT_ALIGN, durable = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: FsPath,
        display_name: String,
        tensors: Vec<(String, String, Vec<u64>)>,
        metadata: Option<Vec<(String, String)>>,
        header_cap: u64,
        align: u64,
        durable: Option<bool>,
    ) -> PyResult<PyLayoutWriter> {
        let plan = new_plan(tensors, metadata, &display_name, header_cap, align)?;
        let writer = py
            .allow_threads(|| LayoutWriter::create(plan, &path, durable))
            .in_file(&display_name)?;
        Ok(PyLayoutWriter {
            writer,
            display_name,
        })
    }

    /// Writes tensor `name`, declared with header dtype `dtype` and `shape`
    /// (both must be the layout's), from `data`: one C-contiguous byte
    /// buffer, or an iterator of them giving the bytes in order. On any
    /// error (an exception from the iterator included) the tensor is left
    /// unwritten, to be written again in full.
    fn write(
        &self,
        py: Python<'_>,
        name: &str,
        dtype: &str,
        shape: Vec<u64>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let dtype = header_dtype(name, dtype, &self.display_name)?;
        let mut write = self
            .writer
            .begin(name, dtype, &shape)
            .in_file(&self.display_name)?;
        if let Ok(parts) = data.downcast::<PyIterator>() {
            for part in parts.clone() {
                self.write_part(py, &mut write, &part?)?;
            }
        } else {
            self.write_part(py, &mut write, data)?;
        }
        py.allow_threads(|| write.finish())
            .in_file(&self.display_name)
    }

    /// Renames the file over its target when every tensor was written
    /// completely (flushed to the device first when durable); otherwise
    /// saves nothing and raises `SerializeError` (rule `tensors-missing`).
    /// The writer is closed afterwards either way.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.writer.commit())
            .in_file(&self.display_name)
    }

    /// Closes the writer without saving anything (no-op once closed).
    fn abort(&self, py: Python<'_>) {
        py.allow_threads(|| self.writer.abort());
    }

    /// Names of the tensors not written completely yet, in layout order.
    fn missing(&self) -> Vec<String> {
        self.writer
            .missing()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// True once committed or aborted.
    #[getter]
    fn closed(&self) -> bool {
        self.writer.is_closed()
    }

    /// Whether the data is flushed to the device before the commit.
    #[getter]
    fn durable(&self) -> bool {
        self.writer.durable()
    }

    /// Offset of the data section in the file.
    #[getter]
    fn data_start(&self) -> u64 {
        self.writer.plan().data_start()
    }

    /// Length of the whole file.
    #[getter]
    fn total_len(&self) -> u64 {
        self.writer.plan().total_len()
    }

    /// `(name, dtype, shape, begin, end)` of each tensor, in file order.
    fn tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = tensor_rows(
            py,
            self.writer
                .plan()
                .tensors()
                .iter()
                .map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice(), t.begin, t.end)),
        )?;
        PyList::new(py, items)
    }
}
