//! `LayoutWriter`: the Python face of the streaming writers. The layout
//! is planned as every save plans it; each tensor's bytes (a buffer, or an
//! iterator of buffers) are written at their place with the GIL released,
//! from whichever thread calls, and the result is saved only on `commit`
//! with every tensor complete: a local file (the core's `LayoutWriter`,
//! replacing its target atomically) or an object of a cloud store
//! (`fastst_remote::LayoutUpload`, a multipart upload completed last; the
//! writers wait for room among the parts in flight with the GIL released,
//! hearing Ctrl-C).

use fastst_core::{Dtype, LayoutWriter, TensorWrite};
use fastst_remote::{LayoutUpload, TensorUpload};
use pyo3::prelude::*;
use pyo3::types::{PyIterator, PyList};

use crate::errors::{to_pyerr, InFile};
use crate::paths::FsPath;
use crate::remote::{open_failed, warn_if_insecure, Options};
use crate::wait::WAIT_SLICE;
use crate::write::{header_dtype, new_plan, tensor_rows, Chunk, RELEASE_GIL_AT};

/// Where the writer writes.
// One per writer, never copied: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Writer {
    /// A local file.
    File(LayoutWriter),
    /// An object of a cloud store.
    Url(LayoutUpload),
}

/// A file being written from its layout (see the module's documentation).
#[pyclass(frozen, module = "fastst._fastst.write", name = "LayoutWriter")]
pub struct PyLayoutWriter {
    writer: Writer,
    display_name: String,
}

impl PyLayoutWriter {
    fn plan(&self) -> &fastst_core::WritePlan {
        match &self.writer {
            Writer::File(w) => w.plan(),
            Writer::Url(u) => u.plan(),
        }
    }

    /// Gives `put` the bytes of `data` (one buffer, or an iterator of
    /// buffers), in order.
    fn feed(
        &self,
        py: Python<'_>,
        name: &str,
        data: &Bound<'_, PyAny>,
        mut put: impl FnMut(Python<'_>, &[u8]) -> PyResult<()>,
    ) -> PyResult<()> {
        if let Ok(parts) = data.downcast::<PyIterator>() {
            for part in parts.clone() {
                let chunk = Chunk::get(&part?, name)?;
                put(py, chunk.bytes())?;
            }
            Ok(())
        } else {
            let chunk = Chunk::get(data, name)?;
            put(py, chunk.bytes())
        }
    }

    /// Writes one part of a tensor to the file, with the GIL released when
    /// it is large.
    fn write_file(
        &self,
        py: Python<'_>,
        write: &mut TensorWrite<'_>,
        bytes: &[u8],
    ) -> PyResult<()> {
        let result = if bytes.len() >= RELEASE_GIL_AT {
            py.allow_threads(|| write.write(bytes))
        } else {
            write.write(bytes)
        };
        result.in_file(&self.display_name)
    }

    /// Writes one part of a tensor to the upload, a part's worth at a
    /// time, waiting for room among the parts in flight after each.
    fn write_url(
        &self,
        py: Python<'_>,
        upload: &LayoutUpload,
        write: &mut TensorUpload<'_>,
        bytes: &[u8],
    ) -> PyResult<()> {
        for piece in bytes.chunks(upload.part_size().max(1)) {
            let result = if piece.len() >= RELEASE_GIL_AT {
                py.allow_threads(|| write.write(piece))
            } else {
                write.write(piece)
            };
            result.in_file(&self.display_name)?;
            while upload.backlogged().in_file(&self.display_name)? {
                py.check_signals()?;
                py.allow_threads(|| upload.wait_for_room(WAIT_SLICE))
                    .in_file(&self.display_name)?;
            }
        }
        Ok(())
    }

    /// Closes the upload, waits for its last parts (GIL released, hearing
    /// Ctrl-C) and completes it; on any failure it is aborted.
    fn complete(&self, py: Python<'_>, upload: &LayoutUpload) -> PyResult<()> {
        py.allow_threads(|| upload.close())
            .in_file(&self.display_name)?;
        loop {
            let stop = match upload.unsettled() {
                Ok(false) => break,
                Ok(true) => py.check_signals().err(),
                Err(e) => Some(to_pyerr(&self.display_name, e)),
            };
            if let Some(e) = stop {
                let _ = py.allow_threads(|| upload.abort());
                return Err(e);
            }
            // A failure is reported by the next look.
            let _ = py.allow_threads(|| upload.wait(WAIT_SLICE));
        }
        py.allow_threads(|| upload.complete())
            .in_file(&self.display_name)
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
            writer: Writer::File(writer),
            display_name,
        })
    }

    /// Plans the layout as `new` does and starts the multipart upload of
    /// the object `url` (of S3, GCS or Azure), configured by `options` as
    /// reads are; errors name it `display_name`. The object appears on
    /// `commit` with every tensor written; until then nothing does.
    #[staticmethod]
    #[pyo3(signature = (url, display_name, tensors, metadata, options, header_cap = fastst_core::DEFAULT_HEADER_CAP, align = fastst_core::DEFAULT_ALIGN))]
    #[allow(clippy::too_many_arguments)]
    fn to_url(
        py: Python<'_>,
        url: &str,
        display_name: String,
        tensors: Vec<(String, String, Vec<u64>)>,
        metadata: Option<Vec<(String, String)>>,
        options: Options,
        header_cap: u64,
        align: u64,
    ) -> PyResult<PyLayoutWriter> {
        let plan = new_plan(tensors, metadata, &display_name, header_cap, align)?;
        let started = py.allow_threads(|| LayoutUpload::start(url, &options, plan));
        warn_if_insecure(py)?;
        let upload = started.map_err(|e| open_failed(&display_name, e))?;
        Ok(PyLayoutWriter {
            writer: Writer::Url(upload),
            display_name,
        })
    }

    /// Writes tensor `name`, declared with header dtype `dtype` and `shape`
    /// (both must be the layout's), from `data`: one C-contiguous byte
    /// buffer, or an iterator of them giving the bytes in order. On any
    /// error (an exception from the iterator included) the tensor is left
    /// unwritten, to be written again in full (an upload's tensor whose
    /// first bytes went up already cannot be: rule `tensor-written-twice`
    /// then says so).
    fn write(
        &self,
        py: Python<'_>,
        name: &str,
        dtype: &str,
        shape: Vec<u64>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let dtype: Dtype = header_dtype(name, dtype, &self.display_name)?;
        match &self.writer {
            Writer::File(writer) => {
                let mut write = writer
                    .begin(name, dtype, &shape)
                    .in_file(&self.display_name)?;
                self.feed(py, name, data, |py, bytes| {
                    self.write_file(py, &mut write, bytes)
                })?;
                py.allow_threads(|| write.finish())
                    .in_file(&self.display_name)
            }
            Writer::Url(upload) => {
                let mut write = upload
                    .begin(name, dtype, &shape)
                    .in_file(&self.display_name)?;
                self.feed(py, name, data, |py, bytes| {
                    self.write_url(py, upload, &mut write, bytes)
                })?;
                write.finish().in_file(&self.display_name)
            }
        }
    }

    /// Saves when every tensor was written completely: renames the file
    /// over its target (flushed to the device first when durable), or
    /// completes the upload after its last parts (waiting with the GIL
    /// released, hearing Ctrl-C); otherwise saves nothing and raises
    /// `SerializeError` (rule `tensors-missing`). The writer is closed
    /// afterwards either way.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        match &self.writer {
            Writer::File(w) => py.allow_threads(|| w.commit()).in_file(&self.display_name),
            Writer::Url(u) => self.complete(py, u),
        }
    }

    /// Closes the writer without saving anything (no-op once closed): the
    /// temporary file is removed, or the upload aborted.
    fn abort(&self, py: Python<'_>) {
        match &self.writer {
            Writer::File(w) => py.allow_threads(|| w.abort()),
            Writer::Url(u) => {
                let _ = py.allow_threads(|| u.abort());
            }
        }
    }

    /// Names of the tensors not written completely yet, in layout order.
    fn missing(&self) -> Vec<String> {
        let names = match &self.writer {
            Writer::File(w) => w.missing(),
            Writer::Url(u) => u.missing(),
        };
        names.into_iter().map(str::to_owned).collect()
    }

    /// True once committed or aborted.
    #[getter]
    fn closed(&self) -> bool {
        match &self.writer {
            Writer::File(w) => w.is_closed(),
            Writer::Url(u) => u.is_closed(),
        }
    }

    /// Whether the data is flushed to the device before the commit (an
    /// upload: never; the store's completion is the commit).
    #[getter]
    fn durable(&self) -> bool {
        match &self.writer {
            Writer::File(w) => w.durable(),
            Writer::Url(_) => false,
        }
    }

    /// Offset of the data section in the file.
    #[getter]
    fn data_start(&self) -> u64 {
        self.plan().data_start()
    }

    /// Length of the whole file.
    #[getter]
    fn total_len(&self) -> u64 {
        self.plan().total_len()
    }

    /// `(name, dtype, shape, begin, end)` of each tensor, in file order.
    fn tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = tensor_rows(
            py,
            self.plan()
                .tensors()
                .iter()
                .map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice(), t.begin, t.end)),
        )?;
        PyList::new(py, items)
    }
}
