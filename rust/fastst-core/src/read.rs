//! The bytes of an open file: a validated header plus access to tensor data
//! through a memory map (the default) or positioned reads. Every kind of
//! input is opened here, from a [`Source`]: a local file keeps the
//! memory-map and direct-I/O fast paths, any other source is read with
//! positioned reads into owned memory (the pread back end).

use std::cell::RefCell;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::{Mmap, MmapMut};

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::header::{Header, TensorInfo, DEFAULT_HEADER_CAP};
use crate::io::{self, mmap};
use crate::source::{self, Source};

/// How tensor bytes are fetched from the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// Memory-map the file; tensors become private copy-on-write mappings.
    #[default]
    Mmap,
    /// Read tensor bytes with positioned reads into owned memory (the
    /// only back end of sources that are not local files).
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

/// File offsets of private mappings are aligned down to this (2 MiB).
const MAP_ALIGN: u64 = 2 * 1024 * 1024;

/// Owned copies handed out sit at the address their file offset has modulo
/// this, as a view of the file would (a mapping is page-aligned).
pub const HANDOUT_ALIGN: usize = 64;

/// Owned copies of at least this many bytes get an anonymous mapping of
/// their own (page-aligned; backed by transparent huge pages where the
/// system allows); smaller ones come from the allocator, which reuses
/// memory freed by earlier calls (no fresh pages to fault in) up to about
/// this size (glibc's largest mmap threshold).
const ANON_MIN: usize = 32 << 20;

/// Copies and conversions of one tensor shared between threads are cut
/// into chunks of this many bytes of the file, taken by whichever thread is
/// free ([`crate::parallel::steal`]).
const STEAL_BLOCK: usize = 1 << 20;

/// Conversions while reading go through a block of this many source bytes
/// per thread: read, then converted while in cache (with its converted
/// bytes, within a core's L2 cache).
const CONVERT_BLOCK: usize = 128 << 10;

thread_local! {
    /// Each thread's block of source bytes for conversions while reading,
    /// kept between calls (a fresh block would fault in fresh pages).
    static BLOCK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// An open, validated `.safetensors` file.
#[derive(Debug)]
pub struct MappedFile {
    path: Option<PathBuf>,
    source: Box<dyn Source>,
    file_len: u64,
    header: Header,
    /// The whole file, read-only, for copies of small tensors (mmap back
    /// end; `None` where it could not be mapped, e.g. under an
    /// address-space limit: positioned reads then serve).
    map: Option<Mmap>,
    /// The whole file as one private copy-on-write mapping, made when the
    /// first large tensor is handed out (mmap back end): each large
    /// tensor's first handout is a region of it; a second handout of the
    /// same tensor gets a mapping of its own. `None` inside when it could
    /// not be mapped.
    shared: OnceLock<Option<Arc<mmap::SharedMap>>>,
    backend: Backend,
}

/// The share of a range's pages in the page cache from which reads of it
/// count as warm ([`MappedFile::cached_share`]).
pub const MOSTLY_CACHED: f64 = 0.5;

impl MappedFile {
    /// Opens `path`, reads and validates the header. Tensor data is not read.
    pub fn open(path: impl AsRef<Path>, options: OpenOptions) -> Result<MappedFile> {
        let path = path.as_ref();
        let mut file = MappedFile::from_source(io::open(path)?, options)?;
        file.path = Some(path.to_path_buf());
        Ok(file)
    }

    /// Opens any source: reads and validates the header through it. A
    /// source that is not a local file ([`Source::local`]) is read with
    /// positioned reads into owned memory, whatever `options.backend` says.
    pub fn from_source(source: impl Source + 'static, options: OpenOptions) -> Result<MappedFile> {
        let file_len = source.len();
        let (n, json) = source::read_header(&source, options.header_cap)?;
        let header = Header::parse(&json, file_len - 8 - n)?;
        drop(json);
        let backend = match source.local() {
            Some(_) => options.backend,
            None => Backend::Pread,
        };
        let map = match source.local() {
            Some(file) if backend == Backend::Mmap && file_len > 0 => {
                mmap::map_read_only(file).ok()
            }
            _ => None,
        };
        Ok(MappedFile {
            path: None,
            source: Box::new(source),
            file_len,
            header,
            map,
            shared: OnceLock::new(),
            backend,
        })
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The path the file was opened from (`None` for another source).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The file's length in bytes when it was opened.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The local file behind the source, for the fast paths (mappings,
    /// direct I/O, kernel hints); `None` for other sources.
    pub(crate) fn local(&self) -> Option<&File> {
        self.source.local()
    }

    /// The share of the pages of `range` (offsets in the data section) of
    /// a local file in the page cache, 0 to 1 (from [`MOSTLY_CACHED`] on,
    /// the range counts as cached: the cold/warm choices of loads and
    /// loaders); `None` when the kernel cannot tell or the source is not a
    /// local file.
    pub fn cached_share(&self, range: std::ops::Range<u64>) -> Option<f64> {
        let len = range.end.saturating_sub(range.start);
        let (cached, pages) =
            crate::io::cached_pages(self.local()?, self.header().data_start() + range.start, len)?;
        Some(if pages == 0 {
            1.0
        } else {
            cached as f64 / pages as f64
        })
    }

    /// The source the file is read from.
    pub(crate) fn source(&self) -> &dyn Source {
        &*self.source
    }

    /// The source's own request shape for whole loads
    /// ([`Source::load_hint`]).
    pub(crate) fn load_hint(&self) -> Option<crate::source::LoadHint> {
        self.source.load_hint()
    }

    /// Whether the source serves one read at a time
    /// ([`Source::one_read_at_a_time`]).
    pub(crate) fn one_read_at_a_time(&self) -> bool {
        self.source.one_read_at_a_time()
    }

    /// The local file (tests of the fast paths).
    #[cfg(test)]
    #[allow(clippy::expect_used)]
    pub(crate) fn raw(&self) -> &File {
        self.local().expect("a local file")
    }

    /// The whole-file copy-on-write mapping tensors are handed out of
    /// (made on first use; `None` under the pread back end or when it
    /// cannot be mapped).
    pub(crate) fn shared_map(&self) -> Option<&Arc<mmap::SharedMap>> {
        if self.backend != Backend::Mmap || self.file_len == 0 {
            return None;
        }
        self.shared
            .get_or_init(|| {
                let file = self.local()?;
                mmap::SharedMap::map(file).ok().map(Arc::new)
            })
            .as_ref()
    }

    /// The whole-file read-only mapping, when there is one.
    pub(crate) fn whole_map(&self) -> Option<&Mmap> {
        self.map.as_ref()
    }

    /// Absolute file range of a tensor's bytes.
    fn absolute(&self, info: &TensorInfo) -> (u64, usize) {
        // Validation guarantees begin <= end <= buffer_len, so neither the
        // addition nor the length can exceed the file's length.
        let start = self.header.data_start() + info.begin;
        (start, (info.end - info.begin) as usize)
    }

    /// The bytes `[start, start + len)` of the whole-file mapping, for
    /// tensors under [`PRIVATE_MAP_THRESHOLD`] only.
    fn small_slice(&self, start: u64, len: usize) -> Option<&[u8]> {
        if len as u64 >= PRIVATE_MAP_THRESHOLD {
            return None;
        }
        let map = self.map.as_deref()?;
        let start = usize::try_from(start).ok()?;
        map.get(start..start.checked_add(len)?)
    }

    /// Fails with rule `file-changed` when another program wrote to,
    /// truncated or extended the file since it was opened (for a local
    /// file, one `fstat` on the open descriptor). Every method that hands
    /// out tensor bytes checks this first, so that no new mapping or copy
    /// is made of pages that may no longer exist.
    pub fn check_unchanged(&self) -> Result<()> {
        self.source.check_unchanged()
    }

    /// Copies `buf.len()` bytes of the tensor, starting `offset` bytes into
    /// it, into `buf`, with positioned reads (a file that shrank underneath
    /// gives an error, never SIGBUS).
    pub fn read_tensor_into(&self, info: &TensorInfo, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_unchanged()?;
        self.read_part(info, offset, buf)
    }

    /// [`MappedFile::read_tensor_into`] without the change check.
    fn read_part(&self, info: &TensorInfo, offset: u64, buf: &mut [u8]) -> Result<()> {
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
        self.source
            .read_at(start + offset, buf)
            .map_err(|e| reading(&info.name, e))
    }

    /// A read error, or rule `file-changed` when the file shrank under the
    /// read (a positioned read past the new end).
    #[cold]
    fn shrunk(&self, err: Error) -> Error {
        match self.check_unchanged() {
            Err(changed @ Error::FileChanged { .. }) => changed,
            _ => err,
        }
    }

    /// The tensor's bytes as memory the caller owns and may write to, without
    /// copying where the backend allows it: large tensors under the mmap
    /// backend get a private copy-on-write mapping of their own (writes never
    /// reach the file, and two calls give independent memory); small ones and
    /// the pread backend get an owned copy.
    ///
    /// Fails with rule `file-changed` when the file changed since it was
    /// opened, and with rule `out-of-memory` (naming the tensor) when
    /// neither a mapping nor memory for a copy can be had: never an abort.
    pub fn tensor_data(&self, info: &TensorInfo) -> Result<TensorData> {
        let (start, len) = self.absolute(info);
        if len == 0 {
            return Ok(TensorData::Owned(OwnedBytes::zeroed(0, 0, &info.name)?));
        }
        self.check_unchanged()?;
        if self.backend == Backend::Mmap && len as u64 >= PRIVATE_MAP_THRESHOLD {
            // First handout: a region of the one whole-file mapping (no
            // system call; huge folios stay mapped whole across tensors).
            if let Some(region) = self
                .shared_map()
                .and_then(|map| map.take(usize::try_from(start).ok()?, len))
            {
                return Ok(TensorData::Shared(SharedRegion(region)));
            }
            // Map from a 2 MiB-aligned file offset: the kernel then places the
            // mapping so that page-cache huge folios can be mapped whole, which
            // makes first touches as cheap as in one mapping of the whole file.
            let lead = start % MAP_ALIGN;
            let map_start = start - lead;
            let map_len = len + lead as usize;
            // The range lies inside the file, as validated against its
            // length at open.
            let mapped = self
                .local()
                .map(|file| mmap::map_private(file, map_start, map_len));
            // On failure (out of mappings under vm.max_map_count, or of address
            // space) fall back to a copy, if memory for it can be had.
            if let Some(Ok(map)) = mapped {
                return Ok(TensorData::Mapped {
                    map,
                    offset: lead as usize,
                    len,
                });
            }
        }
        // Where a view of the file would be, modulo 64 (a mapping is
        // page-aligned): numerics that depend on addresses (vectorised
        // kernels' peeling) come out as for a view.
        let at = (start % HANDOUT_ALIGN as u64) as usize;
        let buf = match (self.small_slice(start, len), self.local()) {
            // Small tensors: one memory copy out of the mapping, just after
            // the change check above (cheaper than a read system call).
            (Some(src), _) => OwnedBytes::copy_of(src, at, &info.name)?,
            // Heap memory (reused from earlier calls) filled by the reads
            // alone, with no zero-fill pass first.
            (None, Some(file)) if len < ANON_MIN => self.read_fresh(file, info, at)?,
            _ => {
                let mut buf = OwnedBytes::zeroed(len, at, &info.name)?;
                self.copy_unchecked(info, buf.as_mut_slice())?;
                buf
            }
        };
        Ok(TensorData::Owned(buf))
    }
}

/// The error of a read of tensor `name`: an I/O error names the tensor
/// (a remote store's failure reaches the user with the tensor it was for).
#[cold]
pub(crate) fn reading(name: &str, err: Error) -> Error {
    match err {
        Error::Io { context, source } if !name.is_empty() => Error::Io {
            context: format!("tensor {name:?}: {context}"),
            source,
        },
        Error::RemoteDeadline { context, seconds } if !name.is_empty() => Error::RemoteDeadline {
            context: format!("tensor {name:?}: {context}"),
            seconds,
        },
        Error::RemoteAnswerOverCap { context, cap } if !name.is_empty() => {
            Error::RemoteAnswerOverCap {
                context: format!("tensor {name:?}: {context}"),
                cap,
            }
        }
        e => e,
    }
}

impl MappedFile {
    /// Copies a tensor's bytes into `dst` (exactly its length) with
    /// positioned reads, several threads for large tensors. Never reads
    /// through a mapping: a file truncated by another program gives an
    /// error (rule `file-changed`), never SIGBUS.
    pub fn copy_tensor_into(&self, info: &TensorInfo, dst: &mut [u8]) -> Result<()> {
        self.check_unchanged()?;
        self.copy_unchecked(info, dst)
    }

    /// The tensor's bytes read from the local `file` into fresh heap
    /// memory at `at` modulo [`HANDOUT_ALIGN`], without the change check.
    fn read_fresh(&self, file: &File, info: &TensorInfo, at: usize) -> Result<OwnedBytes> {
        let (start, len) = self.absolute(info);
        let helpers = crate::parallel::helpers_for_bytes(len);
        let (mem, offset) = io::read_fresh(
            file,
            start,
            len,
            at,
            HANDOUT_ALIGN,
            STEAL_BLOCK,
            helpers,
            &info.name,
        )
        .map_err(|e| self.shrunk(reading(&info.name, e)))?;
        Ok(OwnedBytes {
            mem: OwnedMemory::Heap(mem),
            offset,
            len,
        })
    }

    fn copy_unchecked(&self, info: &TensorInfo, dst: &mut [u8]) -> Result<()> {
        let len = info.byte_len() as usize;
        if dst.len() != len {
            return Err(Error::DestinationSize {
                tensor: info.name.clone(),
                what: "the destination",
                expected: len as u64,
                got: dst.len() as u64,
            });
        }
        // Positioned reads copy in the kernel straight from the page cache
        // (no page faults on a mapping) and fail cleanly past a new end.
        let helpers = crate::parallel::helpers_for_bytes(len);
        if helpers == 0 {
            return self.read_part(info, 0, dst);
        }
        crate::parallel::steal(dst, STEAL_BLOCK, helpers, "a parallel read", |at, chunk| {
            self.read_part(info, at as u64, chunk)
        })
    }

    /// Converts a tensor into `to` while reading it, writing `dst` (exactly
    /// the converted length): positioned reads of bounded chunks (never
    /// through a mapping, so a file truncated underneath gives an error, not
    /// SIGBUS), each converted by several threads when large.
    pub fn convert_tensor_into(&self, info: &TensorInfo, to: Dtype, dst: &mut [u8]) -> Result<()> {
        crate::convert::check(&info.name, info.dtype, to, info.byte_len(), dst.len())?;
        self.check_unchanged()?;
        let (fs, ts) = ((info.dtype.bits() / 8) as usize, (to.bits() / 8) as usize);
        if fs == 0 || ts == 0 {
            return crate::convert::convert(info.dtype, to, &[], dst);
        }
        // Threads take chunks of elements in turn, each read and converted
        // in cache-sized blocks.
        let helpers = crate::parallel::helpers_for_bytes(info.byte_len() as usize);
        if helpers == 0 {
            return self.convert_range(info, to, 0, dst);
        }
        let per = STEAL_BLOCK / fs * ts;
        crate::parallel::steal(dst, per, helpers, "a parallel conversion", |at, out| {
            self.convert_range(info, to, at / ts * fs, out)
        })
    }

    /// Converts the tensor's bytes from `offset` into `out` (whole elements
    /// of `to`) on this thread, reading bounded chunks.
    fn convert_range(
        &self,
        info: &TensorInfo,
        to: Dtype,
        offset: usize,
        out: &mut [u8],
    ) -> Result<()> {
        // Below the parallel threshold for every element size: each block
        // is converted on this thread, while it is still in cache.
        let (fs, ts) = ((info.dtype.bits() / 8) as usize, (to.bits() / 8) as usize);
        let per = CONVERT_BLOCK / fs;
        BLOCK.with(|block| {
            let mut buf = block.borrow_mut();
            if buf.len() < per * fs {
                *buf = io::zeroed((per * fs) as u64, &info.name)?;
            }
            let mut done = offset;
            for out in out.chunks_mut(per * ts) {
                let n = out.len() / ts * fs;
                self.read_part(info, done as u64, &mut buf[..n])?;
                crate::convert::convert(info.dtype, to, &buf[..n], out)?;
                done += n;
            }
            Ok(())
        })
    }

    /// Fills `buf` from absolute file offset `start` with positioned reads;
    /// a read past the end of a file that shrank is rule `file-changed`.
    /// `tensor` names the tensor in an out-of-range error.
    pub(crate) fn read_at(&self, start: u64, buf: &mut [u8], tensor: &str) -> Result<()> {
        self.check_range(start, buf.len(), tensor)?;
        self.source
            .read_at(start, buf)
            .map_err(|e| reading(tensor, e))
    }

    /// Fails (rule `read-past-end`, naming `tensor`) unless `len` bytes at
    /// `start` lie inside the file.
    fn check_range(&self, start: u64, len: usize, tensor: &str) -> Result<()> {
        match start.checked_add(len as u64) {
            Some(end) if end <= self.file_len => Ok(()),
            _ => Err(Error::ReadPastEnd {
                tensor: tensor.to_owned(),
                offset: start,
                len: len as u64,
                tensor_len: self.file_len,
            }),
        }
    }

    /// Fills `bufs`, in order, from absolute file offset `start` on, as
    /// one request of a load ([`Source::read_request`]); `tensor` names the
    /// tensor in an error.
    pub(crate) fn read_request(
        &self,
        start: u64,
        bufs: &mut [&mut [u8]],
        tensor: &str,
    ) -> Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.check_range(start, len, tensor)?;
        self.source
            .read_request(start, bufs)
            .map_err(|e| reading(tensor, e))
    }

    /// The error for a failed read of this file: rule `file-changed` when it
    /// changed since it was opened, the read error otherwise.
    #[cold]
    pub(crate) fn read_failed(&self, err: std::io::Error) -> Error {
        self.shrunk(Error::io("cannot read the file", err))
    }

    /// Tells the kernel the whole file will be read front to back soon
    /// (readahead starts at once). Advice is a hint: failures are ignored.
    pub fn advise_sequential(&self) {
        if let Some(file) = self.local() {
            io::advise_sequential(file);
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
    Owned(OwnedBytes),
    /// A region of the file's one shared copy-on-write mapping, owned by
    /// this value alone (writes never reach the file nor another tensor).
    Shared(SharedRegion),
}

/// Memory of its own holding a tensor's bytes, at a chosen address modulo
/// [`HANDOUT_ALIGN`] (see [`TensorData::Owned`]).
#[derive(Debug)]
pub struct OwnedBytes {
    mem: OwnedMemory,
    offset: usize,
    len: usize,
}

#[derive(Debug)]
enum OwnedMemory {
    Heap(Vec<u8>),
    Anonymous(MmapMut),
}

impl OwnedBytes {
    /// `len` zero bytes starting at an address equal to `at` modulo
    /// [`HANDOUT_ALIGN`]; rule `out-of-memory` (naming `tensor`) when the
    /// memory cannot be had.
    pub fn zeroed(len: usize, at: usize, tensor: &str) -> Result<OwnedBytes> {
        let at = at % HANDOUT_ALIGN;
        let oom = || Error::OutOfMemory {
            bytes: len as u64,
            tensor: tensor.to_owned(),
        };
        let total = len.checked_add(HANDOUT_ALIGN).ok_or_else(oom)?;
        if len >= ANON_MIN {
            // Page-aligned: the tensor starts `at` bytes in.
            let map = MmapMut::map_anon(total).map_err(|_| oom())?;
            #[cfg(any(target_os = "linux", target_os = "android"))]
            let _ = map.advise(memmap2::Advice::HugePage); // a hint
            return Ok(OwnedBytes {
                mem: OwnedMemory::Anonymous(map),
                offset: at,
                len,
            });
        }
        let buf = io::zeroed(total as u64, tensor)?;
        let offset = (at + HANDOUT_ALIGN - buf.as_ptr() as usize % HANDOUT_ALIGN) % HANDOUT_ALIGN;
        Ok(OwnedBytes {
            mem: OwnedMemory::Heap(buf),
            offset,
            len,
        })
    }

    /// A copy of `src` starting at an address equal to `at` modulo
    /// [`HANDOUT_ALIGN`] (no zero-fill pass); rule `out-of-memory` (naming
    /// `tensor`) when the memory cannot be had.
    fn copy_of(src: &[u8], at: usize, tensor: &str) -> Result<OwnedBytes> {
        let len = src.len();
        let oom = || Error::OutOfMemory {
            bytes: len as u64,
            tensor: tensor.to_owned(),
        };
        let total = len.checked_add(HANDOUT_ALIGN).ok_or_else(oom)?;
        let mut mem = Vec::new();
        mem.try_reserve_exact(total).map_err(|_| oom())?;
        let offset = (at % HANDOUT_ALIGN + HANDOUT_ALIGN - mem.as_ptr() as usize % HANDOUT_ALIGN)
            % HANDOUT_ALIGN;
        mem.resize(offset, 0);
        mem.extend_from_slice(src);
        mem.resize(total, 0);
        Ok(OwnedBytes {
            mem: OwnedMemory::Heap(mem),
            offset,
            len,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        let all: &[u8] = match &self.mem {
            OwnedMemory::Heap(v) => v,
            OwnedMemory::Anonymous(m) => m,
        };
        &all[self.offset..self.offset + self.len]
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let all: &mut [u8] = match &mut self.mem {
            OwnedMemory::Heap(v) => v,
            OwnedMemory::Anonymous(m) => m,
        };
        &mut all[self.offset..self.offset + self.len]
    }
}

/// A tensor's bytes inside the whole-file copy-on-write mapping (see
/// [`TensorData::Shared`]).
#[derive(Debug)]
pub struct SharedRegion(mmap::Region);

impl TensorData {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            TensorData::Mapped { map, offset, len } => &map[*offset..*offset + *len],
            TensorData::Owned(v) => v.as_slice(),
            TensorData::Shared(r) => r.0.as_slice(),
        }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            TensorData::Mapped { map, offset, len } => &mut map[*offset..*offset + *len],
            TensorData::Owned(v) => v.as_mut_slice(),
            TensorData::Shared(r) => r.0.as_mut_slice(),
        }
    }

    /// True when the bytes are a private mapping of the file (no copy made).
    pub fn is_mapped(&self) -> bool {
        matches!(self, TensorData::Mapped { .. } | TensorData::Shared(_))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testfs::build;

    const HEADER: &str = r#"{"big":{"dtype":"F32","shape":[65536],"data_offsets":[0,262144]},"s":{"dtype":"U8","shape":[4],"data_offsets":[262144,262148]}}"#;

    fn data() -> Vec<u8> {
        (0..262_148u32).map(|i| (i % 251) as u8).collect()
    }

    /// `path` opened with `backend` and the default header cap.
    fn open_as(path: &std::path::Path, backend: Backend) -> MappedFile {
        MappedFile::open(
            path,
            OpenOptions {
                backend,
                ..OpenOptions::default()
            },
        )
        .unwrap()
    }

    /// Under the mmap back end a large tensor is handed out first as a
    /// region of the one shared mapping, then (taken already) as a private
    /// mapping from a 2 MiB-aligned offset; small ones and every tensor
    /// under the pread back end are copies, and pread has no mapping.
    #[test]
    fn handouts_share_then_map_and_pread_copies() {
        let (pad, big) = (100_000usize, 3 << 20);
        let header = format!(
            r#"{{"pad":{{"dtype":"U8","shape":[{pad}],"data_offsets":[0,{pad}]}},"big":{{"dtype":"U8","shape":[{big}],"data_offsets":[{pad},{}]}}}}"#,
            pad + big
        );
        let bytes: Vec<u8> = (0..pad + big).map(|i| (i % 249) as u8).collect();
        let f = build(&header, &bytes);
        let file = open_as(&f.0, Backend::Mmap);
        assert!(file.shared_map().is_some() && file.whole_map().is_some());
        let info = file.header().require("big").unwrap();
        let want = &bytes[pad..];
        let first = file.tensor_data(info).unwrap();
        assert!(matches!(first, TensorData::Shared(_)));
        assert!(first.as_slice() == want);
        let second = file.tensor_data(info).unwrap();
        let start = file.header().data_start() + pad as u64;
        match &second {
            TensorData::Mapped { map, offset, len } => {
                assert_eq!(*offset as u64, start % (2 << 20));
                assert_eq!((*len, map.len()), (big, big + *offset));
            }
            other => panic!("a second handout is a private mapping, got {other:?}"),
        }
        assert!(second.as_slice() == want);
        let pad_info = file.header().require("pad").unwrap();
        let small = file.tensor_data(pad_info).unwrap();
        assert!(
            matches!(small, TensorData::Shared(_)),
            "100 000 bytes: over the threshold"
        );
        drop((first, second, small));

        let file = open_as(&f.0, Backend::Pread);
        assert!(file.shared_map().is_none() && file.whole_map().is_none());
        let info = file.header().require("big").unwrap();
        let copy = file.tensor_data(info).unwrap();
        assert!(matches!(copy, TensorData::Owned(_)));
        assert!(copy.as_slice() == want);
    }

    /// Copies handed out sit where a view of the file would, modulo 64:
    /// small tensors under the mmap back end, every tensor under pread
    /// (heap and anonymous-mapping memory alike).
    #[test]
    fn copies_handed_out_sit_at_their_file_offset_modulo_64() {
        let sizes = [1usize, 3, 70, 5000, (32 << 20) + 5, 13, 100_001, 7];
        let mut header = String::from("{");
        let mut at = 0;
        for (i, n) in sizes.iter().enumerate() {
            header += &format!(
                r#"{}"t{i}":{{"dtype":"U8","shape":[{n}],"data_offsets":[{at},{}]}}"#,
                if i > 0 { "," } else { "" },
                at + n
            );
            at += n;
        }
        header += "}";
        let bytes: Vec<u8> = (0..at).map(|i| (i % 253) as u8).collect();
        let f = build(&header, &bytes);
        for backend in [Backend::Mmap, Backend::Pread] {
            let file = open_as(&f.0, backend);
            let mut kept = Vec::new();
            for t in file.header().tensors() {
                let data = file.tensor_data(t).unwrap();
                let start = file.header().data_start() + t.begin;
                let addr = data.as_slice().as_ptr() as usize;
                assert_eq!(addr % 64, (start % 64) as usize, "{backend:?} {}", t.name);
                assert!(data.as_slice() == &bytes[t.begin as usize..t.end as usize]);
                kept.push(data);
            }
        }
    }

    /// Empty tensors convert to nothing under both back ends (no thread
    /// split of zero elements).
    #[test]
    fn empty_tensors_convert_to_nothing() {
        let header = r#"{"e":{"dtype":"BF16","shape":[0,3],"data_offsets":[0,0]},"x":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}"#;
        let f = build(header, &[0x80, 0x3f]);
        for backend in [Backend::Mmap, Backend::Pread] {
            let file = open_as(&f.0, backend);
            let e = file.header().require("e").unwrap();
            file.convert_tensor_into(e, Dtype::F32, &mut []).unwrap();
            let x = file.header().require("x").unwrap();
            let mut out = [0u8; 4];
            file.convert_tensor_into(x, Dtype::F32, &mut out).unwrap();
            assert_eq!(f32::from_le_bytes(out), 1.0);
        }
    }

    #[test]
    fn every_read_notices_a_truncated_file() {
        for backend in [Backend::Mmap, Backend::Pread] {
            let f = build(HEADER, &data());
            let file = open_as(&f.0, backend);
            let big = file.header().require("big").unwrap().clone();
            let small = file.header().require("s").unwrap().clone();
            assert_eq!(
                file.tensor_data(&small).unwrap().as_slice(),
                &data()[262_144..]
            );
            std::fs::OpenOptions::new()
                .write(true)
                .open(&f.0)
                .unwrap()
                .set_len(100)
                .unwrap();
            let mut dst = vec![0u8; 262_144];
            let mut half = vec![0u8; 131_072];
            let errors = [
                file.tensor_data(&big).map(|_| ()).unwrap_err(),
                file.tensor_data(&small).map(|_| ()).unwrap_err(),
                file.copy_tensor_into(&big, &mut dst).unwrap_err(),
                file.read_tensor_into(&big, 4, &mut dst[..8]).unwrap_err(),
                file.convert_tensor_into(&big, Dtype::F16, &mut half)
                    .unwrap_err(),
            ];
            for e in errors {
                assert_eq!(e.rule(), "file-changed", "{backend:?}: {e}");
            }
        }
    }

    /// Conversions large enough to be split between threads, under both
    /// back ends, against the one-element kernels.
    #[test]
    fn large_conversions_while_reading_are_exact() {
        const N: usize = (16 << 20) + 7;
        let (h, w) = (N * 2, N * 4);
        let header = format!(
            r#"{{"h":{{"dtype":"BF16","shape":[{N}],"data_offsets":[0,{h}]}},"w":{{"dtype":"F32","shape":[{N}],"data_offsets":[{h},{}]}}}}"#,
            h + w
        );
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..h + w)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let f = build(&header, &data);
        for backend in [Backend::Mmap, Backend::Pread] {
            let file = open_as(&f.0, backend);
            let half = file.header().require("h").unwrap().clone();
            let wide = file.header().require("w").unwrap().clone();
            let mut out = vec![0u8; w];
            file.convert_tensor_into(&half, Dtype::F32, &mut out)
                .unwrap();
            for (i, (s, d)) in data[..h]
                .chunks_exact(2)
                .zip(out.chunks_exact(4))
                .enumerate()
            {
                let want = crate::convert::bf16_to_f32(u16::from_le_bytes([s[0], s[1]]));
                let got = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
                assert_eq!(got, want.to_bits(), "{backend:?}: element {i}");
            }
            let mut out = vec![0u8; h];
            file.convert_tensor_into(&wide, Dtype::F16, &mut out)
                .unwrap();
            for (i, (s, d)) in data[h..]
                .chunks_exact(4)
                .zip(out.chunks_exact(2))
                .enumerate()
            {
                let want = crate::convert::f32_to_f16(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
                assert_eq!(
                    u16::from_le_bytes([d[0], d[1]]),
                    want,
                    "{backend:?}: element {i}"
                );
            }
            let mut out = vec![0u8; w];
            file.copy_tensor_into(&wide, &mut out).unwrap();
            assert!(out == data[h..], "{backend:?}: copy");
        }
    }

    /// A source that is not a local file is read through `read_at` only,
    /// with the pread back end: every way of getting bytes (handouts,
    /// copies, ranges, conversions, whole loads)
    /// gives what the same file gives from its path, the prefetcher plans
    /// nothing, and a source that ends early is rule `file-changed`.
    #[test]
    fn any_source_reads_like_the_local_file() {
        use crate::source::tests::Memory;
        const N: usize = (1 << 20) + 3;
        let header = format!(
            r#"{{"h":{{"dtype":"BF16","shape":[{N}],"data_offsets":[0,{}]}},"s":{{"dtype":"U8","shape":[3],"data_offsets":[{},{}]}}}}"#,
            2 * N,
            2 * N,
            2 * N + 3
        );
        let data: Vec<u8> = (0..2 * N + 3).map(|i| (i * 7 % 253) as u8).collect();
        let f = build(&header, &data);
        let path = open_as(&f.0, Backend::Pread);
        let options = OpenOptions::default();
        let memory = Memory::new(std::fs::read(&f.0).unwrap());
        let end = Arc::clone(&memory.end);
        let file = Arc::new(MappedFile::from_source(memory, options).unwrap());
        assert_eq!(
            (file.backend(), file.path(), file.local().is_none()),
            (Backend::Pread, None, true)
        );
        assert_eq!(file.header().data_start(), path.header().data_start());
        let (h, s) = (
            file.header().require("h").unwrap(),
            file.header().require("s").unwrap(),
        );
        for t in [h, s] {
            assert!(
                file.tensor_data(t).unwrap().as_slice() == path.tensor_data(t).unwrap().as_slice()
            );
            let mut got = vec![0u8; t.byte_len() as usize];
            file.copy_tensor_into(t, &mut got).unwrap();
            assert!(got[..] == data[t.begin as usize..t.end as usize]);
            file.read_tensor_into(t, 1, &mut got[..2]).unwrap();
            assert_eq!(got[..2], data[t.begin as usize + 1..t.begin as usize + 3]);
        }
        let (mut want, mut got) = (vec![0u8; 4 * N], vec![0u8; 4 * N]);
        path.convert_tensor_into(h, Dtype::F32, &mut want).unwrap();
        file.convert_tensor_into(h, Dtype::F32, &mut got).unwrap();
        assert!(got == want);
        let mut loaded = vec![0u8; 4 * N];
        let dests = vec![crate::load::Destination {
            info: h,
            to: Dtype::F32,
            dst: &mut loaded,
        }];
        crate::load::load_into(&file, dests, crate::load::LoadOptions::default(), None).unwrap();
        assert!(loaded == want);
        file.advise_sequential();
        let ahead = crate::prefetch::Prefetcher::start(
            Arc::clone(&file),
            &[(0, file.file_len())],
            crate::prefetch::PrefetchOptions::default(),
        );
        assert_eq!((ahead.status().planned, ahead.status().workers), (0, 0));
        end.store(100, std::sync::atomic::Ordering::Relaxed);
        let mut dst = vec![0u8; 2 * N];
        let errors = [
            file.tensor_data(h).map(|_| ()).unwrap_err(),
            file.copy_tensor_into(h, &mut dst).unwrap_err(),
            file.read_tensor_into(s, 0, &mut dst[..3]).unwrap_err(),
            file.convert_tensor_into(h, Dtype::F32, &mut got)
                .unwrap_err(),
        ];
        for e in errors {
            assert_eq!(e.rule(), "file-changed", "{e}");
        }
    }

    #[test]
    fn a_read_racing_a_truncation_reports_the_change() {
        let f = build(HEADER, &data());
        let file = MappedFile::open(&f.0, OpenOptions::default()).unwrap();
        let big = file.header().require("big").unwrap().clone();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f.0)
            .unwrap()
            .set_len(100)
            .unwrap();
        // Past the check, as if the truncation came just after it.
        let mut dst = vec![0u8; 262_144];
        assert_eq!(
            file.copy_unchecked(&big, &mut dst).unwrap_err().rule(),
            "file-changed"
        );
        let fresh = file.read_fresh(file.raw(), &big, 0).map(drop);
        assert_eq!(fresh.unwrap_err().rule(), "file-changed");
    }

    #[test]
    fn a_second_handout_gets_a_mapping_of_its_own() {
        let f = build(HEADER, &data());
        let file = MappedFile::open(&f.0, OpenOptions::default()).unwrap();
        let big = file.header().require("big").unwrap().clone();
        let mut first = file.tensor_data(&big).unwrap();
        let mut second = file.tensor_data(&big).unwrap();
        assert!(matches!(first, TensorData::Shared(_)), "{first:?}");
        assert!(matches!(second, TensorData::Mapped { .. }), "{second:?}");
        first.as_mut_slice()[7] = 1;
        second.as_mut_slice()[7] = 2;
        assert_eq!((first.as_slice()[7], second.as_slice()[7]), (1, 2));
        assert_eq!(&first.as_slice()[8..], &data()[8..262_144]);
        // The shared mapping hands out each byte range once.
        let map = file.shared_map().unwrap();
        let start = usize::try_from(file.header().data_start()).unwrap();
        assert!(map.take(start + 100, 10).is_none());
        assert!(map.take(start - 10, 11).is_none());
        assert!(map.take(start - 10, 10).is_some());
        assert!(map.take(map.len(), 1).is_none());
    }

    #[test]
    fn mappings_reserve_nothing_and_copies_are_exact() {
        let f = build(HEADER, &data());
        let file = MappedFile::open(&f.0, OpenOptions::default()).unwrap();
        let big = file.header().require("big").unwrap().clone();
        let mut mapped = file.tensor_data(&big).unwrap();
        assert!(mapped.is_mapped());
        assert_eq!(mapped.as_slice(), &data()[..262_144]);
        mapped.as_mut_slice()[0] = 255;
        assert_eq!(std::fs::read(&f.0).unwrap()[8 + HEADER.len()], 0);
        let mut dst = vec![0u8; 262_144];
        file.copy_tensor_into(&big, &mut dst).unwrap();
        assert_eq!(dst, &data()[..262_144]);
    }
}
