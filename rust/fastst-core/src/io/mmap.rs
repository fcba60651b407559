//! Memory mappings of files (with [`sys`](super::sys), the only code of the
//! crate allowed `unsafe`). fastst maps a file only to hand out tensors
//! under the default back end (zero-copy views, and copies of tensors under
//! 64 KiB); its own reads (owned copies, conversions, hashing, value scans)
//! use positioned reads.
//!
//! Every mapping here is private (copy-on-write): fastst never writes to a
//! file through a mapping, and writes to a private writable mapping land in
//! anonymous memory of this process. What no mapping can prevent is another
//! process changing the file while it is mapped: bytes read through the
//! mapping may then change under the reader, and truncation makes touching
//! the lost pages raise SIGBUS. Every function documents this in its
//! `SAFETY` comment; callers accept it as every mmap-based reader must, and
//! `MappedFile` checks the file is unchanged before each new mapping.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use memmap2::{Mmap, MmapMut, MmapOptions};

/// Maps the whole of `file` read-only (private).
pub(crate) fn map_read_only(file: &File) -> io::Result<Mmap> {
    // SAFETY: a private read-only mapping; nothing in fastst writes through
    // it, so Rust's aliasing rules hold for our own accesses. The hazard left
    // is another process modifying or truncating the file while it is mapped
    // (the bytes change under us, or touching them raises SIGBUS): the
    // reader checks the file is unchanged just before each copy out of it,
    // which leaves only a truncation racing that check, as README says.
    unsafe { MmapOptions::new().map_copy_read_only(file) }
}

/// Maps `len` bytes of `file` from `offset` as private, writable,
/// copy-on-write memory: writes never reach the file. The mapping reserves
/// no swap (`MAP_NORESERVE`): only pages actually written take memory, so a
/// tensor larger than RAM plus swap maps under heuristic overcommit.
pub(crate) fn map_private(file: &File, offset: u64, len: usize) -> io::Result<MmapMut> {
    // SAFETY: MAP_PRIVATE and writable: our writes go to anonymous
    // copy-on-write pages, never to the file, and the mapping is owned by the
    // one `TensorData` that hands it out, so no other Rust reference aliases
    // it. The caller checked that the range lies inside the file as it was
    // at open time. Another process changing the file before a page is first
    // written shows through (pages not yet copied are the file's), and
    // truncating it makes touching the lost pages raise SIGBUS: the hazard
    // every mmap reader shares.
    unsafe {
        MmapOptions::new()
            .offset(offset)
            .len(len)
            .no_reserve_swap()
            .map_copy(file)
    }
}

/// Whether any page of `map[offset..offset + len]` is in the page cache
/// (`mincore`, which reads nothing and faults nothing in); `None` when the
/// kernel cannot tell.
#[cfg(unix)]
pub(crate) fn any_resident(map: &Mmap, offset: usize, len: usize) -> Option<bool> {
    const PAGE: usize = 4096;
    let end = offset.checked_add(len)?;
    if end > map.len() || len == 0 {
        return None;
    }
    let lo = offset - offset % PAGE;
    let pages = (end - lo).div_ceil(PAGE);
    let mut vec = vec![0u8; pages];
    // SAFETY: `[lo, end)` lies inside the mapping (checked above), so the
    // pointer arithmetic stays in bounds; `vec` has one byte per 4 KiB of
    // that range, at least one per page of any page size, which is all
    // mincore writes; it reads no memory of ours. An address that is not
    // page-aligned for the kernel (pages over 4 KiB) is refused with
    // EINVAL, reported as `None`.
    let r = unsafe {
        libc::mincore(
            map.as_ptr().add(lo) as *mut libc::c_void,
            end - lo,
            vec.as_mut_ptr(),
        )
    };
    if r != 0 {
        return None;
    }
    Some(vec.iter().any(|&b| b & 1 != 0))
}

/// Residency is not asked for elsewhere.
#[cfg(not(unix))]
pub(crate) fn any_resident(_map: &Mmap, _offset: usize, _len: usize) -> Option<bool> {
    None
}
