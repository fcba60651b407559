//! The bytes of an open file: a validated header plus access to tensor data
//! through a memory map (the default) or positioned reads.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::header::{Header, TensorInfo, DEFAULT_HEADER_CAP};
use crate::io::{self, mmap, read_exact_at};

/// How tensor bytes are fetched from the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// Memory-map the file; tensors become private copy-on-write mappings.
    #[default]
    Mmap,
    /// Read tensor bytes with positioned reads into owned memory.
    Pread,
}

impl Backend {
    /// Parses `"mmap"` / `"pread"`.
    pub fn from_name(name: &str) -> Option<Backend> {
        match name {
            "mmap" => Some(Backend::Mmap),
            "pread" => Some(Backend::Pread),
            _ => None,
        }
    }
}

/// Options for [`MappedFile::open`].
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Largest header length prefix accepted.
    pub header_cap: u64,
    /// How tensor bytes are fetched.
    pub backend: Backend,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            header_cap: DEFAULT_HEADER_CAP,
            backend: Backend::Mmap,
        }
    }
}

/// Tensors smaller than this are copied into owned memory instead of getting
/// a private mapping of their own (a mapping costs a VMA and a syscall).
pub const PRIVATE_MAP_THRESHOLD: u64 = 64 * 1024;

/// Owned copies of at least this many bytes use positioned reads.
const POSITIONED_READ_MIN: usize = 1 << 20;

/// File offsets of private mappings are aligned down to this (2 MiB).
const MAP_ALIGN: u64 = 2 * 1024 * 1024;

/// An open, validated `.safetensors` file.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    file: File,
    file_len: u64,
    header: Header,
    map: Option<Mmap>,
    backend: Backend,
}

impl MappedFile {
    /// Opens `path`, reads and validates the header. Tensor data is not read.
    pub fn open(path: impl AsRef<Path>, options: OpenOptions) -> Result<MappedFile> {
        let path = path.as_ref().to_path_buf();
        let opened = io::open(&path)?;
        let (n, json) = opened.read_header(options.header_cap)?;
        let io::OpenFile {
            file,
            len: file_len,
        } = opened;
        let buffer_len = file_len - 8 - n;
        let header = Header::parse(&json, buffer_len)?;
        drop(json);
        let map = if options.backend == Backend::Mmap && file_len > 0 {
            Some(mmap::map_read_only(&file).map_err(|e| Error::io("cannot memory-map file", e))?)
        } else {
            None
        };
        Ok(MappedFile {
            path,
            file,
            file_len,
            header,
            map,
            backend: options.backend,
        })
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length in bytes when it was opened.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Absolute file range of a tensor's bytes.
    fn absolute(&self, info: &TensorInfo) -> (u64, usize) {
        // Validation guarantees begin <= end <= buffer_len, so neither the
        // addition nor the length can exceed the file's length.
        let start = self.header.data_start() + info.begin;
        (start, (info.end - info.begin) as usize)
    }

    /// Borrowed bytes of a tensor (mmap backend), without copying.
    pub fn tensor_slice(&self, info: &TensorInfo) -> Option<&[u8]> {
        let map = self.map.as_deref()?;
        let (start, len) = self.absolute(info);
        let start = usize::try_from(start).ok()?;
        map.get(start..start.checked_add(len)?)
    }

    /// Copies `buf.len()` bytes of the tensor, starting `offset` bytes into
    /// it, into `buf`.
    pub fn read_tensor_into(&self, info: &TensorInfo, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (start, len) = self.absolute(info);
        offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= len as u64)
            .ok_or_else(|| Error::ReadPastEnd {
                tensor: info.name.clone(),
                offset,
                len: buf.len() as u64,
                tensor_len: len as u64,
            })?;
        if let Some(src) = self.tensor_slice(info) {
            let o = offset as usize;
            buf.copy_from_slice(&src[o..o + buf.len()]);
            Ok(())
        } else {
            read_exact_at(&self.file, buf, start + offset)
        }
    }

    /// Copies part of a tensor with positioned reads, whatever the backend.
    fn pread_tensor_into(&self, info: &TensorInfo, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (start, _) = self.absolute(info);
        read_exact_at(&self.file, buf, start + offset)
    }

    /// The tensor's bytes as memory the caller owns and may write to, without
    /// copying where the backend allows it: large tensors under the mmap
    /// backend get a private copy-on-write mapping of their own (writes never
    /// reach the file, and two calls give independent memory); small ones and
    /// the pread backend get an owned copy.
    pub fn tensor_data(&self, info: &TensorInfo) -> Result<TensorData> {
        let (start, len) = self.absolute(info);
        if len == 0 {
            return Ok(TensorData::Owned(Vec::new()));
        }
        if self.backend == Backend::Mmap && len as u64 >= PRIVATE_MAP_THRESHOLD {
            // Map from a 2 MiB-aligned file offset: the kernel then places the
            // mapping so that page-cache huge folios can be mapped whole, which
            // makes first touches as cheap as in one mapping of the whole file.
            let lead = start % MAP_ALIGN;
            let map_start = start - lead;
            let map_len = len + lead as usize;
            // The range lies inside the file, as validated against its
            // length at open.
            let mapped = mmap::map_private(&self.file, map_start, map_len);
            // On failure (out of mappings under vm.max_map_count, or of address
            // space) fall back to a copy rather than fail.
            if let Ok(map) = mapped {
                return Ok(TensorData::Mapped {
                    map,
                    offset: lead as usize,
                    len,
                });
            }
        }
        // `vec!` of zeros is calloc: fresh zero pages, no fill pass.
        let mut buf = vec![0u8; len];
        self.copy_tensor_into(info, &mut buf)?;
        Ok(TensorData::Owned(buf))
    }
}

impl MappedFile {
    /// Copies a tensor's bytes into `dst` (exactly its length), with several
    /// threads for large tensors: memory copies from the mapping, or
    /// positioned reads under the pread backend.
    pub fn copy_tensor_into(&self, info: &TensorInfo, dst: &mut [u8]) -> Result<()> {
        let len = info.byte_len() as usize;
        if dst.len() != len {
            return Err(Error::DestinationSize {
                tensor: info.name.clone(),
                what: "the destination",
                expected: len as u64,
                got: dst.len() as u64,
            });
        }
        // Small tensors: a memory copy from the mapping. Large ones: positioned
        // reads, which copy in the kernel straight from the page cache and so
        // skip the page faults a fresh mapping would take on every source page.
        if len < POSITIONED_READ_MIN {
            if let Some(src) = self.tensor_slice(info) {
                dst.copy_from_slice(src);
                return Ok(());
            }
        }
        let threads = crate::parallel::threads_for(len / 4);
        if threads <= 1 {
            return self.pread_tensor_into(info, 0, dst);
        }
        let per = len.div_ceil(threads);
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = dst
                .chunks_mut(per)
                .enumerate()
                .map(|(i, chunk)| {
                    s.spawn(move || self.read_tensor_into(info, (i * per) as u64, chunk))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or(Err(Error::WorkerFailed {
                        task: "a parallel read",
                    }))
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// Converts a tensor into `to` while reading it, writing `dst` (exactly
    /// the converted length), with several threads for large tensors.
    pub fn convert_tensor_into(&self, info: &TensorInfo, to: Dtype, dst: &mut [u8]) -> Result<()> {
        crate::convert::check(&info.name, info.dtype, to, info.byte_len(), dst.len())?;
        if let Some(src) = self.tensor_slice(info) {
            return crate::convert::convert(info.dtype, to, src, dst);
        }
        // pread back end: read in bounded chunks, converting each.
        const CHUNK: usize = 8 << 20;
        let (fs, ts) = ((info.dtype.bits() / 8) as usize, (to.bits() / 8) as usize);
        if fs == 0 || ts == 0 {
            return crate::convert::convert(info.dtype, to, &[], dst);
        }
        let per = CHUNK / fs * fs;
        let mut buf = vec![0u8; per.min(info.byte_len() as usize)];
        let mut done = 0usize;
        for out in dst.chunks_mut(per / fs * ts) {
            let n = out.len() / ts * fs;
            self.read_tensor_into(info, done as u64, &mut buf[..n])?;
            crate::convert::convert(info.dtype, to, &buf[..n], out)?;
            done += n;
        }
        Ok(())
    }

    /// Tells the kernel the whole file will be read front to back soon
    /// (mmap back end; a no-op otherwise). Advice is a hint: failures are
    /// ignored.
    pub fn advise_sequential(&self) {
        #[cfg(unix)]
        if let Some(map) = &self.map {
            let _ = map.advise(memmap2::Advice::Sequential);
            let _ = map.advise(memmap2::Advice::WillNeed);
        }
    }
}

/// Writable memory holding one tensor's bytes.
#[derive(Debug)]
pub enum TensorData {
    /// A private copy-on-write mapping of the file; the tensor's bytes are
    /// `map[offset..offset + len]`.
    Mapped {
        /// The mapping (from a page-aligned file offset).
        map: MmapMut,
        /// Where the tensor starts inside the mapping.
        offset: usize,
        /// The tensor's length in bytes.
        len: usize,
    },
    /// An owned copy.
    Owned(Vec<u8>),
}

impl TensorData {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            TensorData::Mapped { map, offset, len } => &map[*offset..*offset + *len],
            TensorData::Owned(v) => v,
        }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            TensorData::Mapped { map, offset, len } => &mut map[*offset..*offset + *len],
            TensorData::Owned(v) => v,
        }
    }

    /// True when the bytes are a private mapping of the file (no copy made).
    pub fn is_mapped(&self) -> bool {
        matches!(self, TensorData::Mapped { .. })
    }
}
