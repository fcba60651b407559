//! Fresh memory filled by positioned reads, without a zero-fill pass first:
//! on reused heap memory that pass is a second full write of the memory.
//! The reads write every byte before anything reads one, which is what this
//! module's `unsafe` rests on.
#![allow(unsafe_code)]

use std::fs::File;
use std::mem::MaybeUninit;

use crate::error::{Error, Result};

/// `len` bytes of `file` from offset `start`, read into fresh heap memory
/// at an address equal to `at` modulo `align`: `(memory, where the bytes
/// start in it)`. The reads are cut every `block` bytes and shared with up
/// to `helpers` threads ([`crate::parallel::steal`]). Rule `out-of-memory`
/// (naming `tensor`) when the memory cannot be had.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_fresh(
    file: &File,
    start: u64,
    len: usize,
    at: usize,
    align: usize,
    block: usize,
    helpers: usize,
    tensor: &str,
) -> Result<(Vec<u8>, usize)> {
    let align = align.max(1);
    let oom = || Error::OutOfMemory {
        bytes: len as u64,
        tensor: tensor.to_owned(),
    };
    let total = len.checked_add(align).ok_or_else(oom)?;
    let mut mem: Vec<u8> = Vec::new();
    mem.try_reserve_exact(total).map_err(|_| oom())?;
    let offset = (at % align + align - mem.as_ptr() as usize % align) % align;
    let (head, rest) = mem.spare_capacity_mut()[..total].split_at_mut(offset);
    let (body, tail) = rest.split_at_mut(len);
    head.fill(MaybeUninit::new(0));
    tail.fill(MaybeUninit::new(0));
    crate::parallel::steal(body, block, helpers, "a parallel read", |i, chunk| {
        read_uninit_at(file, chunk, start + i as u64)
    })?;
    // SAFETY: the first `total` bytes of the capacity are initialised: the
    // head and the tail were just filled, and `steal` returned Ok, so each
    // chunk of the body went through a `read_uninit_at` that returned Ok,
    // which writes every byte of its buffer.
    unsafe { mem.set_len(total) };
    Ok((mem, offset))
}

/// Fills `buf` from absolute offset `offset` of `file` with positioned
/// reads; every byte of `buf` is written when this returns Ok (a read that
/// ends early is an error).
#[cfg(unix)]
fn read_uninit_at(file: &File, buf: &mut [MaybeUninit<u8>], offset: u64) -> Result<()> {
    let len = buf.len();
    super::in_fault_pieces(buf, |piece, at| {
        pread_all(file, piece, offset.saturating_add(at as u64))
            .map_err(|e| Error::io(format!("cannot read {len} bytes at offset {offset}"), e))
    })
}

/// Fills `buf` from absolute offset `offset` of `file` with `pread`s.
#[cfg(unix)]
fn pread_all(file: &File, buf: &mut [MaybeUninit<u8>], offset: u64) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let mut done = 0;
    while done < buf.len() {
        let at = offset
            .checked_add(done as u64)
            .and_then(|at| libc::off_t::try_from(at).ok())
            .ok_or(std::io::ErrorKind::InvalidInput)?;
        let rest = &mut buf[done..];
        // SAFETY: `pread` writes at most `rest.len()` bytes at `rest`'s
        // address, memory this function borrows mutably, and reads none of
        // it; the descriptor is open for as long as `file` is borrowed.
        let n = unsafe { libc::pread(file.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len(), at) };
        match n {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n if n < 0 => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            n => done += n as usize,
        }
    }
    Ok(())
}

/// Fills `buf` from absolute offset `offset` of `file` (zero-filled first:
/// the standard library's positioned reads take initialised memory).
#[cfg(not(unix))]
fn read_uninit_at(file: &File, buf: &mut [MaybeUninit<u8>], offset: u64) -> Result<()> {
    buf.fill(MaybeUninit::new(0));
    // SAFETY: every byte of `buf` was just initialised; `u8` and
    // `MaybeUninit<u8>` have the same layout.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len()) };
    super::read_exact_at(file, buf, offset)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testfs::TempFile;

    /// Every byte read lands at the chosen address modulo the alignment,
    /// with or without helpers; a range past the end is an error.
    #[test]
    fn fresh_reads_fill_every_byte_at_the_chosen_alignment() {
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 + 1).collect();
        let f = TempFile::with("fresh", &bytes);
        let file = File::open(&f.0).unwrap();
        for (start, len, at, helpers) in [(0, 300_000, 0, 0), (7, 250_000, 13, 2), (5, 0, 63, 1)] {
            let (mem, offset) = read_fresh(&file, start, len, at, 64, 4096, helpers, "t").unwrap();
            assert_eq!((mem.as_ptr() as usize + offset) % 64, at);
            assert!(mem[offset..offset + len] == bytes[start as usize..start as usize + len]);
        }
        // One block over a fault piece: read in pieces.
        let len = super::super::FAULT_PIECE + 30_000;
        let (mem, offset) = read_fresh(&file, 3, len, 5, 64, 1 << 20, 0, "t").unwrap();
        assert!(mem[offset..offset + len] == bytes[3..3 + len]);
        let err = read_fresh(&file, 299_000, 2000, 0, 64, 512, 1, "t").unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
    }
}
