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

/// How many of the pages of `map[offset..offset + len]` are in memory (in
/// the page cache or this process's), and how many pages the range spans,
/// from `mincore`; `None` when the kernel cannot say (then nothing is known
/// and the caller reads as if nothing were resident).
#[cfg(target_os = "linux")]
pub(crate) fn resident_pages(map: &Mmap, offset: usize, len: usize) -> Option<(usize, usize)> {
    let end = offset.checked_add(len).filter(|&e| e <= map.len())?;
    if len == 0 {
        return Some((0, 0));
    }
    let page = page_size();
    let base = map.as_ptr() as usize;
    let start = (base + offset) / page * page;
    let stop = (base + end).div_ceil(page) * page;
    let pages = (stop - start) / page;
    let mut vec = Vec::new();
    vec.try_reserve_exact(pages).ok()?;
    vec.resize(pages, 0u8);
    // SAFETY: `[start, stop)` is the page-rounded span of a range inside
    // `map`, which is alive for the call (a mapping covers whole pages);
    // `vec` has one writable byte per page of that span, as mincore needs.
    let r = unsafe { libc::mincore(start as *mut libc::c_void, stop - start, vec.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    Some((vec.iter().filter(|&&b| b & 1 != 0).count(), pages))
}

/// The size of a memory page.
#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf takes an integer and touches no memory of ours.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Reads `map[offset..offset + len]` into memory without copying it
/// anywhere (`MADV_POPULATE_READ`: the pages come into the page cache and
/// are mapped read-only here). A page that no longer exists in the file
/// (it was truncated) gives an error (`EFAULT`), never SIGBUS.
#[cfg(unix)]
pub(crate) fn populate_read(map: &Mmap, offset: usize, len: usize) -> io::Result<()> {
    map.advise_range(memmap2::Advice::PopulateRead, offset, len)
}
