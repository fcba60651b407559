//! Memory mappings of files (one of the five modules of `io` allowed
//! `unsafe`). fastst maps a file only to hand out tensors
//! under the default back end (zero-copy views, and copies of tensors under
//! 64 KiB) and to read pages ahead of them (`MADV_POPULATE_READ`, which
//! fails with an error where a touch would raise SIGBUS); its own reads
//! (owned copies, conversions, hashing, value scans) use positioned reads.
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
    // which leaves only a truncation racing that check, as docs/io.md says.
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

/// How many of the pages of `file`'s bytes `[offset, offset + len)` are in
/// the page cache, and how many pages the range spans: from `cachestat`
/// where the kernel has it (it counts without looking at every page), else
/// [`resident_pages`] over a read-only mapping that is never touched, so
/// nothing is read; `None` when the kernel cannot say or the range is not
/// in the file.
#[cfg(target_os = "linux")]
pub(crate) fn cached_pages(file: &File, offset: u64, len: u64) -> Option<(usize, usize)> {
    if let Some(counts) = super::sys::cachestat(file, offset, len, page_size() as u64) {
        return Some(counts);
    }
    let map = map_read_only(file).ok()?;
    resident_pages(
        &map,
        usize::try_from(offset).ok()?,
        usize::try_from(len).ok()?,
    )
}

/// Residency is not asked for elsewhere.
#[cfg(not(target_os = "linux"))]
pub(crate) fn cached_pages(_file: &File, _offset: u64, _len: u64) -> Option<(usize, usize)> {
    None
}

/// Asks the kernel to back the whole pages inside `mem` with transparent
/// huge pages (`huge`: `MADV_HUGEPAGE`) or not to (`MADV_NOHUGEPAGE`).
/// Pages already in memory stay as they are; the contents never change. A
/// hint: failures (memory that is not an anonymous mapping, a kernel
/// without huge pages) are ignored, and the memory is used as it is.
pub(crate) fn advise_huge_pages(mem: &mut [u8], huge: bool) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let page = page_size();
        let base = mem.as_mut_ptr() as usize;
        let Some(end) = base.checked_add(mem.len()) else {
            return;
        };
        let start = base.div_ceil(page) * page;
        let stop = end / page * page;
        if stop <= start {
            return;
        }
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: `[start, stop)` is a whole-page span inside `mem`, memory
        // we hold exclusively for the call; both pieces of advice only
        // change how pages faulted in later are backed, never their
        // contents, so no other owner of neighbouring memory is affected.
        unsafe {
            libc::madvise(start as *mut libc::c_void, stop - start, advice);
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (mem, huge);
}

/// The size of a memory page.
#[cfg(unix)]
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

/// The whole file as one private, writable, copy-on-write mapping
/// (`MAP_NORESERVE`), from which tensors are handed out as [`Region`]s: one
/// mapping for all of them instead of one each (fewer system calls and
/// mappings, and page-cache huge folios stay mapped whole across tensor
/// boundaries). Each byte range can be taken once: regions never overlap,
/// which is what makes their writable slices sound.
#[derive(Debug)]
pub(crate) struct SharedMap {
    raw: memmap2::MmapRaw,
    /// `start -> end` of the ranges taken so far.
    taken: std::sync::Mutex<std::collections::BTreeMap<usize, usize>>,
}

impl SharedMap {
    /// Maps the whole of `file` (non-empty).
    pub(crate) fn map(file: &File) -> io::Result<SharedMap> {
        // SAFETY: as for `map_private`: MAP_PRIVATE and writable, so writes
        // land in anonymous pages of this process and never reach the file;
        // Rust references into it are only made by `Region`, over ranges
        // taken once each (see `take`). The hazard left is another process
        // changing or truncating the file (bytes changing underneath, or
        // SIGBUS on touching lost pages), which the reader narrows by
        // checking the file is unchanged before each range is taken.
        let map = unsafe { MmapOptions::new().no_reserve_swap().map_copy(file)? };
        Ok(SharedMap {
            raw: memmap2::MmapRaw::from(map),
            taken: std::sync::Mutex::new(std::collections::BTreeMap::new()),
        })
    }

    /// The length of the mapping.
    pub(crate) fn len(&self) -> usize {
        self.raw.len()
    }

    /// Takes `[offset, offset + len)` (inside the mapping, `len > 0`) for
    /// one owner; `None` when it lies outside or overlaps a range taken
    /// before.
    pub(crate) fn take(self: &std::sync::Arc<Self>, offset: usize, len: usize) -> Option<Region> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.len() && len > 0)?;
        let mut taken = self
            .taken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, &before_end)) = taken.range(..end).next_back() {
            if before_end > offset {
                return None;
            }
        }
        taken.insert(offset, end);
        Some(Region {
            map: std::sync::Arc::clone(self),
            offset,
            len,
        })
    }

    /// Makes the mapping's pages for `map[offset..offset + len]` resident
    /// and mapped (read-only until written), as [`populate_read`] does; a
    /// page the file lost gives an error, never SIGBUS.
    #[cfg(unix)]
    pub(crate) fn populate_read(&self, offset: usize, len: usize) -> io::Result<()> {
        self.raw
            .advise_range(memmap2::Advice::PopulateRead, offset, len)
    }
}

/// One tensor's bytes inside a [`SharedMap`], owned by one holder. Dropping
/// it gives back the memory of the pages that lie wholly inside it
/// (copies made by writes, page tables), unless it was the mapping's last
/// holder (the unmapping then does it).
#[derive(Debug)]
pub(crate) struct Region {
    map: std::sync::Arc<SharedMap>,
    offset: usize,
    len: usize,
}

impl Region {
    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `[offset, offset + len)` lies inside the live mapping
        // (checked by `take`, which also made sure no other region covers
        // any of these bytes, so no `&mut` to them exists elsewhere); a
        // `&mut` from `as_mut_slice` needs `&mut self`, so it cannot coexist
        // with this borrow.
        unsafe { std::slice::from_raw_parts(self.map.raw.as_ptr().add(self.offset), self.len) }
    }

    /// The bytes, writable (copy-on-write: writes never reach the file).
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; the range is this region's alone and
        // `&mut self` makes this the only live reference to it.
        unsafe {
            std::slice::from_raw_parts_mut(self.map.raw.as_mut_ptr().add(self.offset), self.len)
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        #[cfg(unix)]
        if std::sync::Arc::strong_count(&self.map) > 1 {
            let page = page_size();
            let base = self.map.raw.as_ptr() as usize;
            let first = (base + self.offset).div_ceil(page) * page - base;
            let last = (base + self.offset + self.len) / page * page - base;
            if last > first {
                // SAFETY: the pages `[first, last)` lie wholly inside this
                // region, which is being dropped and was the only owner of
                // those bytes: nothing can read them again. MADV_DONTNEED on
                // a private file mapping frees their written copies and page
                // tables (a later touch would see the file's bytes).
                let _ = unsafe {
                    self.map.raw.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        first,
                        last - first,
                    )
                };
            }
        }
    }
}

/// Whether any page of `map[offset..offset + len]` is in memory
/// ([`resident_pages`]); `None` when the kernel cannot tell.
#[cfg(target_os = "linux")]
pub(crate) fn any_resident(map: &Mmap, offset: usize, len: usize) -> Option<bool> {
    resident_pages(map, offset, len).map(|(resident, _)| resident > 0)
}

/// Residency is not asked for elsewhere.
#[cfg(not(target_os = "linux"))]
pub(crate) fn any_resident(_map: &Mmap, _offset: usize, _len: usize) -> Option<bool> {
    None
}

// Two attributes, not `cfg(all(test, ...))`: cargo-mutants leaves alone
// only items marked with a plain `#[cfg(test)]` (scripts/mutants.sh).
#[cfg(test)]
#[cfg(target_os = "linux")]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;

    /// The value of `field` (e.g. `"VmFlags:"`) for the mapping holding
    /// `addr`, from /proc/self/smaps (tests of memory advice).
    pub(crate) fn smaps_field(addr: usize, field: &str) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a <= addr && addr < b;
                    continue;
                }
            }
            if let Some(value) = line.strip_prefix(field).filter(|_| inside) {
                return value.trim().to_owned();
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    /// Private_Dirty (KiB) of the mapping holding `addr`.
    fn private_dirty_kib(addr: usize) -> u64 {
        smaps_field(addr, "Private_Dirty:")
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap()
    }

    /// Resident memory (KiB) of the mapping holding `addr`.
    fn rss_kib(addr: usize) -> u64 {
        smaps_field(addr, "Rss:")
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap()
    }

    /// `populate_read` maps the pages of the range it is given into a
    /// read-only mapping no one has touched, not the whole file; the shared
    /// mapping's does the same for its range. (The kernel may map a little
    /// more than asked: neighbours of a fault, a huge folio whole.)
    #[test]
    fn populate_read_maps_the_pages_of_its_range() {
        let file = crate::testfs::TempFile::with("populate", &vec![5u8; 16 << 20]);
        let f = File::open(&file).unwrap();
        let map = map_read_only(&f).unwrap();
        let base = map.as_ptr() as usize;
        assert_eq!(rss_kib(base), 0, "nothing touched yet");
        populate_read(&map, 4 << 20, 4 << 20).unwrap();
        let rss = rss_kib(base);
        assert!((4 << 10..=8 << 10).contains(&rss), "{rss} KiB");
        let shared = Arc::new(SharedMap::map(&f).unwrap());
        let base = shared.raw.as_ptr() as usize;
        assert_eq!(rss_kib(base), 0, "nothing touched yet");
        shared.populate_read(4 << 20, 4 << 20).unwrap();
        let rss = rss_kib(base);
        assert!((4 << 10..=8 << 10).contains(&rss), "{rss} KiB");
    }

    /// Ranges are taken once each, inside the mapping, and never empty.
    #[test]
    fn a_shared_map_hands_out_non_empty_ranges_inside_it_once() {
        let file = crate::testfs::TempFile::with("take", &[1u8; 10_000]);
        let map = Arc::new(SharedMap::map(&File::open(&file).unwrap()).unwrap());
        assert!(map.take(100, 0).is_none(), "empty");
        assert!(map.take(9_000, 1_001).is_none(), "past the end");
        assert!(map.take(usize::MAX, 2).is_none(), "overflowing");
        let first = map.take(100, 50).unwrap();
        assert_eq!(first.as_slice(), &[1u8; 50]);
        assert!(map.take(149, 1).is_none(), "overlaps the end of the first");
        assert!(map.take(50, 51).is_none(), "overlaps its start");
        assert!(map.take(50, 50).is_some(), "ends where the first starts");
        assert!(map.take(150, 9_850).is_some(), "from its end to the file's");
    }

    /// A region dropped while others are alive frees the pages written in
    /// it (whole pages only), and leaves its neighbours' bytes alone.
    #[test]
    fn a_dropped_region_frees_its_written_pages_and_nothing_else() {
        let n = 12 << 20;
        let path = crate::testfs::TempFile::with("region", &vec![7u8; n]);
        let file = File::open(&path).unwrap();
        let map = Arc::new(SharedMap::map(&file).unwrap());
        // Regions that do not start or end on page boundaries, with
        // neighbours on both sides of a sharing its first and last pages.
        let (a_at, a_len) = (100, (4 << 20) - 200);
        let mut z = map.take(0, a_at).unwrap();
        let mut a = map.take(a_at, a_len).unwrap();
        let mut b = map.take(a_at + a_len, 4 << 20).unwrap();
        let mut c = map.take(a_at + a_len + (4 << 20), 1000).unwrap();
        z.as_mut_slice().fill(9);
        a.as_mut_slice().fill(1);
        b.as_mut_slice().fill(2);
        c.as_mut_slice().fill(3);
        let base = map.raw.as_ptr() as usize;
        let before = private_dirty_kib(base);
        assert!(before >= 8 << 10, "{before} KiB written");
        drop(a);
        let after = private_dirty_kib(base);
        // The written pages wholly inside a are gone; the two it shares with
        // its neighbours stay.
        assert!(before - after >= (4 << 10) - 8, "{before} -> {after} KiB");
        assert!(before - after <= 4 << 10, "{before} -> {after} KiB");
        assert!(z.as_slice().iter().all(|&x| x == 9));
        assert!(b.as_slice().iter().all(|&x| x == 2));
        assert!(c.as_slice().iter().all(|&x| x == 3));
        // The last region dropped frees nothing itself: the mapping goes.
        drop((z, b, c));
    }
}
