//! Memory mappings of files: the only code of the crate allowed `unsafe`.
//!
//! Every mapping here is private (copy-on-write): fastst never writes to a
//! file through a mapping, and writes to a private writable mapping land in
//! anonymous memory of this process. What no mapping can prevent is another
//! process changing the file while it is mapped: bytes read through the
//! mapping may then change under the reader, and truncation makes touching
//! the lost pages raise SIGBUS. Every function documents this in its
//! `SAFETY` comment; callers accept it as every mmap-based reader must.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use memmap2::{Mmap, MmapMut, MmapOptions};

/// Maps the whole of `file` read-only (private).
pub(crate) fn map_read_only(file: &File) -> io::Result<Mmap> {
    // SAFETY: a private read-only mapping; nothing in fastst writes through
    // it, so Rust's aliasing rules hold for our own accesses. The hazard left
    // is another process modifying or truncating the file while it is mapped
    // (the bytes change under us, or touching them raises SIGBUS): no mmap
    // reader can defend against that, and `safe_open` documents it.
    unsafe { MmapOptions::new().map_copy_read_only(file) }
}

/// Maps `len` bytes of `file` from `offset` as private, writable,
/// copy-on-write memory: writes never reach the file.
pub(crate) fn map_private(file: &File, offset: u64, len: usize) -> io::Result<MmapMut> {
    // SAFETY: MAP_PRIVATE and writable: our writes go to anonymous
    // copy-on-write pages, never to the file, and the mapping is owned by the
    // one `TensorData` that hands it out, so no other Rust reference aliases
    // it. The caller checked that the range lies inside the file as it was
    // at open time. Another process changing the file before a page is first
    // written shows through (pages not yet copied are the file's), and
    // truncating it makes touching the lost pages raise SIGBUS: the hazard
    // every mmap reader shares.
    unsafe { MmapOptions::new().offset(offset).len(len).map_copy(file) }
}
