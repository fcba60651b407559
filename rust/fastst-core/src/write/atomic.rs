//! The atomic commit: a new file is written to a temporary file next to its
//! target and renamed over it, with the durability policy, in one place.
//!
//! Where the system offers it (Linux `O_TMPFILE`), the temporary file has no
//! name while it is written: a process killed mid-save leaves nothing
//! behind. It is given a short random name only once complete, then renamed
//! over the target (`linkat` cannot replace an existing name atomically).
//! Elsewhere, or on filesystems without `O_TMPFILE`, the temporary file is
//! created under a short random name (`.<16 hex digits>.fastst-tmp`, so
//! every target name the filesystem accepts can be saved), exclusively
//! (`O_EXCL`, never through a symbolic link), and removed on failure; only
//! a crash can leave it behind.
//!
//! The target's last path component is never followed: saving to a path
//! that is a symbolic link replaces the link with the new file (rename
//! semantics, as `mv` does), and never writes to what the link points to.

use std::fs::{self, File};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::plan::WritePlan;
use super::stream::TensorStream;
use super::writeback::{FileSink, DIRECT_BUFFERS, DIRECT_CHUNK};
use super::WRITE_BUFFER;
use crate::error::{Error, Result};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Suffix of the names of temporary files (`.<16 hex>.fastst-tmp`).
pub const TEMP_SUFFIX: &str = ".fastst-tmp";

/// A short name for a temporary file, unlikely to be taken (the caller
/// creates it exclusively and retries when it is).
fn temp_name() -> String {
    #[cfg(test)]
    if let Some(name) = tests::NEXT_NAMES.with(|q| q.borrow_mut().pop_front()) {
        return name;
    }
    let count = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let x = mix(seed(nanos, std::process::id(), count));
    format!(".{x:016x}{TEMP_SUFFIX}")
}

/// The clock, the process id and a counter in one word: each bit of each
/// changes it (the pid in the high half, the counter spread by an odd
/// multiplier), so that names differ between processes, threads and calls.
fn seed(nanos: u64, pid: u32, count: u64) -> u64 {
    nanos ^ (u64::from(pid) << 32) ^ count.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// splitmix64's finaliser: a bijection of 64-bit words in which every
/// input bit moves about half of the output bits.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A new file being written next to its target. [`AtomicFile::commit`]
/// renames it over the target; dropping it uncommitted removes it, so the
/// target is never seen half-written and no temporary file is left behind.
///
/// The temporary file is created with the default mode (0o666 less the
/// umask), or with the owner, group and permissions of the regular file it
/// replaces (see `keep_owner_and_mode`). When the target is a symbolic
/// link, the link itself is replaced; the file it points to is left alone.
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    dir: PathBuf,
    /// The temporary file's name while it has one (empty while unnamed).
    temp: PathBuf,
    file: Option<File>,
    replaces: bool,
}

fn temp_error(e: io::Error) -> Error {
    Error::io("creating a temporary file in the target's folder", e)
}

impl AtomicFile {
    /// Creates the temporary file in the target's folder: unnamed where the
    /// system allows it, else under a short random name, exclusively.
    pub fn create(target: &Path) -> Result<AtomicFile> {
        let target = target.to_path_buf();
        if target.file_name().is_none() {
            return Err(Error::io(
                "choosing a temporary file",
                io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"),
            ));
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // The last component is not followed: a symbolic link is what gets
        // replaced, and only a regular file lends its owner and permissions.
        let existing = fs::symlink_metadata(&target).ok();
        let replaced = existing.clone().filter(|m| m.file_type().is_file());
        let (file, temp) = match open_unnamed(&dir)? {
            Some(file) => (file, PathBuf::new()),
            None => open_named(&dir)?,
        };
        let atomic = AtomicFile {
            target,
            dir,
            temp,
            file: Some(file),
            replaces: existing.is_some(),
        };
        if let (Some(old), Some(f)) = (&replaced, &atomic.file) {
            keep_owner_and_mode(f, old)
                .map_err(|e| Error::io("copying the permissions of the file being replaced", e))?;
        }
        Ok(atomic)
    }

    /// The file being written.
    pub fn file(&mut self) -> Result<&mut File> {
        self.file.as_mut().ok_or_else(|| {
            Error::io(
                "writing the temporary file",
                io::Error::other("file already closed"),
            )
        })
    }

    /// The file being written, shared: positioned writes (`pwrite`) from
    /// several threads at once need no more.
    pub fn file_ref(&self) -> Result<&File> {
        self.file.as_ref().ok_or_else(|| {
            Error::io(
                "writing the temporary file",
                io::Error::other("file already closed"),
            )
        })
    }

    /// True when something already exists at the target (it will be
    /// replaced).
    pub fn replaces_existing(&self) -> bool {
        self.replaces
    }

    /// The durability policy: flush the new file to the device before the
    /// rename exactly when it replaces an existing file, so that a system
    /// crash can never lose the old file's contents, while writing fresh
    /// files does not pay for a flush.
    pub fn durable_by_default(&self) -> bool {
        self.replaces
    }

    /// Path of the temporary file, or `None` while it has no name (an
    /// unnamed `O_TMPFILE` file: nothing to clean up after a crash).
    pub fn temp_path(&self) -> Option<&Path> {
        if self.temp.as_os_str().is_empty() {
            None
        } else {
            Some(&self.temp)
        }
    }

    /// Path the file will have once committed.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Closes the file and renames it over the target. With `durable`, the
    /// data is flushed to the device before the rename and the folder after
    /// it, so a system crash leaves either the old file or the new one.
    /// `None` applies the default policy, [`AtomicFile::durable_by_default`].
    /// A large regular file being replaced is let go of on a background
    /// thread (Linux), so that freeing its pages and blocks does not delay
    /// the commit.
    pub fn commit(mut self, durable: Option<bool>) -> Result<()> {
        let durable = durable.unwrap_or_else(|| self.durable_by_default());
        let file = self.file.take().ok_or_else(|| {
            Error::io(
                "committing the temporary file",
                io::Error::other("file already closed"),
            )
        })?;
        if durable {
            file.sync_all()
                .map_err(|e| Error::io("flushing the new file to disk", e))?;
        }
        if self.temp.as_os_str().is_empty() {
            // Unnamed: give it a short random name, then rename that over the
            // target (a link cannot replace an existing name atomically).
            self.temp = link_named(&file, &self.dir)?;
        }
        drop(file);
        let replaced = hold_replaced(&self.target);
        fs::rename(&self.temp, &self.target)
            .map_err(|e| Error::io("renaming the temporary file over the target", e))?;
        // The temporary path no longer exists: nothing to clean up.
        self.temp = PathBuf::new();
        if durable {
            // Folders cannot be opened for syncing everywhere; the file
            // itself is already safe, so a failure here is not an error.
            if let Ok(d) = File::open(&self.dir) {
                let _ = d.sync_all();
            }
        }
        release_in_background(replaced);
        Ok(())
    }
}

/// Gives the new file the owner, group and permission bits of the regular
/// file it replaces, through the open descriptor (no path is followed). The
/// owner and the group are each kept where the process may set them (root
/// may; others only a group they belong to), else left as created; the
/// setuid, setgid and sticky bits are dropped, as the system drops them
/// from a file that is written.
#[cfg(unix)]
fn keep_owner_and_mode(file: &File, old: &fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::{fchown, MetadataExt, PermissionsExt};
    let _ = fchown(file, None, Some(old.gid()));
    let _ = fchown(file, Some(old.uid()), None);
    file.set_permissions(fs::Permissions::from_mode(old.mode() & 0o777))
}

#[cfg(not(unix))]
fn keep_owner_and_mode(file: &File, old: &fs::Metadata) -> io::Result<()> {
    file.set_permissions(old.permissions())
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        self.file.take();
        if !self.temp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// Replaced files at least this long are let go of by a background thread.
const RELEASE_IN_BACKGROUND_AT: u64 = 64 << 20;

/// A handle on the large regular file about to be replaced at `target`
/// (`O_PATH`, never following a symbolic link, opening nothing for I/O),
/// or `None`. While it is held the replaced file outlives the rename, so
/// the rename returns without first dropping the old file's cached pages
/// and blocks (a third of a second for a gigabyte on ext4); the handle is
/// then closed by [`release_in_background`].
#[cfg(target_os = "linux")]
fn hold_replaced(target: &Path) -> Option<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(target)
        .ok()?;
    let meta = file.metadata().ok()?;
    (meta.file_type().is_file() && meta.nlink() == 1 && meta.len() >= RELEASE_IN_BACKGROUND_AT)
        .then_some(file)
}

#[cfg(not(target_os = "linux"))]
fn hold_replaced(_target: &Path) -> Option<File> {
    None
}

/// The file a [`link_replace`] replaced, kept open until the commit it is
/// part of has flushed everything it flushes: dropping it hands the file to
/// [`release_in_background`]. Freeing a replaced file's blocks joins the
/// filesystem's running journal transaction (on a filesystem mounted with
/// `discard`, trimming them too), which the next flush of the same commit
/// would then wait for; a commit that replaces several files and flushes
/// after each keeps them all until its last flush.
#[derive(Debug, Default)]
#[must_use = "dropping it lets the replaced file go at once"]
pub struct Replaced(Option<File>);

impl Drop for Replaced {
    fn drop(&mut self) {
        release_in_background(self.0.take());
    }
}

/// Closes the handle on a replaced file on a short-lived thread, so that
/// freeing the old file's pages and blocks does not delay the save (in
/// place if no thread can be started). The new file is committed already:
/// this only decides who waits for the old one to go.
fn release_in_background(replaced: Option<File>) {
    let Some(file) = replaced else {
        return;
    };
    // If the thread cannot start, the closure is dropped here, and the
    // handle with it.
    let _ = std::thread::Builder::new()
        .name("fastst-release".to_owned())
        .spawn(move || drop(file));
}

/// An unnamed file in `dir` (`O_TMPFILE`), or `None` where the system or
/// the filesystem does not offer one.
#[cfg(target_os = "linux")]
fn open_unnamed(dir: &Path) -> Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    // Naming the file later links `/proc/self/fd/N`: without /proc, use a
    // named temporary file from the start.
    if !Path::new("/proc/self/fd").is_dir() {
        return Ok(None);
    }
    match File::options()
        .write(true)
        .mode(0o666)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
    {
        Ok(f) => Ok(Some(f)),
        // Kernels or filesystems without O_TMPFILE answer one of these.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL | libc::ENOSYS)
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(temp_error(e)),
    }
}

#[cfg(not(target_os = "linux"))]
fn open_unnamed(_dir: &Path) -> Result<Option<File>> {
    Ok(None)
}

/// Creates a new file under a short random name in `dir`, exclusively and
/// without following a symbolic link: `(file, its path)`.
fn open_named(dir: &Path) -> Result<(File, PathBuf)> {
    let mut last_err = None;
    for _ in 0..64 {
        let temp = dir.join(temp_name());
        let mut options = File::options();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options
                .mode(0o666)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        }
        match options.open(&temp) {
            Ok(file) => return Ok((file, temp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(temp_error(e)),
        }
    }
    Err(temp_error(last_err.unwrap_or_else(|| {
        io::Error::from(io::ErrorKind::AlreadyExists)
    })))
}

/// Gives the unnamed `file` a short random name in `dir` and returns it.
#[cfg(target_os = "linux")]
fn link_named(file: &File, dir: &Path) -> Result<PathBuf> {
    let mut last_err = None;
    for _ in 0..64 {
        let temp = dir.join(temp_name());
        match crate::io::link_unnamed(file, &temp) {
            Ok(()) => return Ok(temp),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(Error::io("giving the new file a name", e)),
        }
    }
    Err(Error::io(
        "giving the new file a name",
        last_err.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
    ))
}

#[cfg(not(target_os = "linux"))]
fn link_named(_file: &File, _dir: &Path) -> Result<PathBuf> {
    Err(Error::io(
        "giving the new file a name",
        io::Error::from(io::ErrorKind::Unsupported),
    ))
}

/// Why [`write_atomic`] failed: the core's own error, or the error the
/// caller's `feed` returned (left as it was, e.g. a Python exception).
#[derive(Debug)]
pub enum WriteFailure<E> {
    /// Creating, writing, flushing or renaming the file failed, or a tensor
    /// did not get exactly its bytes.
    Core(Error),
    /// The caller's `feed` failed.
    Feed(E),
}

impl WriteFailure<Error> {
    /// The error, whichever side it came from.
    pub fn into_inner(self) -> Error {
        match self {
            WriteFailure::Core(e) | WriteFailure::Feed(e) => e,
        }
    }
}

impl<E> From<Error> for WriteFailure<E> {
    fn from(e: Error) -> Self {
        WriteFailure::Core(e)
    }
}

/// Runs work that waits on the disk (create, flush, sync, rename). The
/// Python glue passes one that releases the GIL; `&|work| work()` runs it
/// in place.
pub type Blocking<'a> = &'a dyn Fn(&mut (dyn FnMut() + Send));

/// Runs `f` through `blocking`, handing its result back.
fn run<T: Send>(blocking: Blocking<'_>, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let mut f = Some(f);
    let mut out = None;
    blocking(&mut || {
        if let Some(f) = f.take() {
            out = Some(f());
        }
    });
    out.unwrap_or(Err(Error::WorkerFailed {
        task: "a blocking step of the write",
    }))
}

/// Writes `plan` to `path` atomically, the one commit sequence every writer
/// uses: a temporary file is created next to `path`, the header goes
/// through a buffered [`TensorStream`] to which `feed` writes every
/// tensor's bytes in file order, the buffer is flushed, and the file is
/// committed ([`AtomicFile::commit`]: `durable`, or the default policy when
/// `None`). A durable save writes through [`FileSink::durable`], which gets
/// the data to the device while the writer goes on (direct writes, else
/// writeback behind the writer), so the flush before the rename waits only
/// for the tail. On any failure the temporary file is removed and `path` is left
/// as it was. The steps that wait on the disk run through `blocking`.
pub fn write_atomic<E>(
    plan: &WritePlan,
    path: &Path,
    durable: Option<bool>,
    blocking: Blocking<'_>,
    feed: impl FnOnce(&mut TensorStream<'_, BufWriter<FileSink<'_>>>) -> std::result::Result<(), E>,
) -> std::result::Result<(), WriteFailure<E>> {
    let mut atomic = run(blocking, || AtomicFile::create(path))?;
    let durable = durable.unwrap_or_else(|| atomic.durable_by_default());
    {
        // A durable save has the data written to the device behind the
        // writer, so that the final flush finds little left to do.
        let file = atomic.file()?;
        let sink = if durable {
            // The file has its final length from the start, as the streaming
            // writer's has: the direct writes then fill it in place instead of
            // extending it, one size update each.
            file.set_len(plan.total_len())
                .map_err(|e| Error::io("setting the new file's length", e))?;
            FileSink::durable(file, DIRECT_CHUNK, DIRECT_BUFFERS)
        } else {
            FileSink::new(file, false)
        };
        let out = BufWriter::with_capacity(WRITE_BUFFER, sink);
        let mut stream = TensorStream::new(plan, out)?;
        feed(&mut stream).map_err(WriteFailure::Feed)?;
        let out = stream.finish()?;
        run(blocking, move || {
            let mut sink = out
                .into_inner()
                .map_err(|e| Error::io("writing the data", e.into_error()))?;
            sink.finish().map_err(|e| Error::io("writing the data", e))
        })?;
    }
    run(blocking, move || atomic.commit(Some(durable)))?;
    Ok(())
}

/// Replaces `target` with a file holding `data`, through the one commit
/// sequence ([`AtomicFile`]): small files that are not tensors (indexes,
/// signatures, reports) are committed exactly as checkpoints are. `durable`
/// flushes the file before the rename and the folder after it.
pub fn replace_with_bytes(target: &Path, data: &[u8], durable: bool) -> Result<()> {
    use std::io::Write;
    let mut atomic = AtomicFile::create(target)?;
    atomic
        .file()?
        .write_all(data)
        .map_err(|e| Error::io("writing the data", e))?;
    atomic.commit(Some(durable))
}

/// Gives the complete file `staged` a second name, `target`, replacing
/// whatever is there, in one step: `staged` is hard-linked under a new
/// temporary name beside `target` and that name renamed over `target`, so a
/// reader sees the old `target` or the new one and `staged` keeps its name
/// (a checkpoint's index may still name it). Where the filesystem has no
/// hard links, the bytes are copied into an [`AtomicFile`] and committed
/// instead. `durable` flushes the folder after the rename (a copy is
/// flushed before it too). Returns the replaced file, held (see
/// [`Replaced`]).
pub fn link_replace(staged: &Path, target: &Path, durable: bool) -> Result<Replaced> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut temp = None;
    for _ in 0..64 {
        let candidate = dir.join(temp_name());
        match fs::hard_link(staged, &candidate) {
            Ok(()) => {
                temp = Some(candidate);
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) if no_hard_links(&e) => {
                return copy_replace(staged, target, durable).map(|()| Replaced::default())
            }
            Err(e) => return Err(Error::io("linking the new file to its name", e)),
        }
    }
    let temp = temp.ok_or_else(|| {
        Error::io(
            "linking the new file to its name",
            io::Error::from(io::ErrorKind::AlreadyExists),
        )
    })?;
    // As in a commit: a large file replaced is let go of in the background,
    // here once the caller drops it.
    let replaced = Replaced(hold_replaced(target));
    if let Err(e) = fs::rename(&temp, target) {
        let _ = fs::remove_file(&temp);
        return Err(Error::io("renaming the new name over the target", e));
    }
    if durable {
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
    }
    Ok(replaced)
}

/// Whether a failed `link` means the filesystem has no hard links (rather
/// than a real failure such as a missing file or a full disk).
fn no_hard_links(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Unsupported
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::CrossesDevices
    ) || matches!(e.raw_os_error(), Some(libc::EMLINK | libc::ENOTSUP))
}

/// [`link_replace`] by copying, for filesystems without hard links.
fn copy_replace(staged: &Path, target: &Path, durable: bool) -> Result<()> {
    let mut atomic = AtomicFile::create(target)?;
    let mut from = File::open(staged).map_err(|e| Error::io("opening the new file", e))?;
    io::copy(&mut from, atomic.file()?).map_err(|e| Error::io("copying the new file", e))?;
    atomic.commit(Some(durable))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::super::{serialize, write_file, NewTensor};
    use super::*;
    use crate::dtype::Dtype;

    use super::super::plan_for_tests as plan;

    fn temp_dir(tag: &str) -> crate::testfs::TempDir {
        crate::testfs::TempDir::new(&format!("write-{tag}"))
    }

    use crate::testfs::entries;

    #[test]
    fn link_replace_gives_a_second_name_and_keeps_the_first() {
        let dir = temp_dir("link");
        let staged = dir.join(".0000000000000001.fastst-tmp.model-00001-of-00001.safetensors");
        let target = dir.join("model-00001-of-00001.safetensors");
        fs::write(&staged, b"new").expect("write");
        fs::write(&target, b"old").expect("write");
        let _ = link_replace(&staged, &target, true).expect("link");
        assert_eq!(fs::read(&target).expect("read"), b"new");
        assert_eq!(fs::read(&staged).expect("read"), b"new");
        assert_eq!(entries(&dir).len(), 2);
        // A missing staged file is an error and leaves the target alone.
        fs::write(&target, b"kept").expect("write");
        let missing = dir.join("absent.safetensors");
        assert!(link_replace(&missing, &target, false).is_err());
        assert_eq!(fs::read(&target).expect("read"), b"kept");
        assert_eq!(entries(&dir).len(), 2);
    }

    #[test]
    fn copy_replace_is_the_fallback_without_links() {
        let dir = temp_dir("copy");
        let staged = dir.join("staged.safetensors");
        let target = dir.join("final.safetensors");
        fs::write(&staged, b"bytes").expect("write");
        copy_replace(&staged, &target, false).expect("copy");
        assert_eq!(fs::read(&target).expect("read"), b"bytes");
        assert_eq!(entries(&dir), ["final.safetensors", "staged.safetensors"]);
    }

    #[test]
    fn bytes_replace_a_file_and_leave_no_temporary() {
        let dir = temp_dir("bytes");
        let path = dir.join("index.json");
        fs::write(&path, b"old").expect("write");
        replace_with_bytes(&path, b"new contents", true).expect("replace");
        assert_eq!(fs::read(&path).expect("read"), b"new contents");
        assert_eq!(entries(&dir), ["index.json"]);
        // A target inside a missing folder fails and creates nothing.
        let missing = dir.join("absent").join("x.json");
        assert!(replace_with_bytes(&missing, b"x", false).is_err());
        assert_eq!(entries(&dir), ["index.json"]);
    }

    #[test]
    fn file_write_replaces_atomically() {
        let dir = temp_dir("atomic");
        let path = dir.join("model.safetensors");
        fs::write(&path, b"old contents").expect("write old");
        let p = plan(vec![NewTensor::new("a", Dtype::U8, vec![4])], None).expect("plan");

        // A failing stream leaves the old file and no temporary file.
        let e = write_file(&p, &[&[1, 2, 3]], &path, false).expect_err("must fail");
        assert_eq!(e.rule(), "data-length");
        assert_eq!(fs::read(&path).expect("read"), b"old contents");
        assert_eq!(entries(&dir), vec!["model.safetensors"]);

        // Dropping an uncommitted file removes it (named or not).
        let mut a = AtomicFile::create(&path).expect("create");
        assert!(a.replaces_existing());
        assert!(!AtomicFile::create(&dir.join("new.safetensors"))
            .expect("create")
            .replaces_existing());
        a.file()
            .expect("file")
            .write_all(b"partial")
            .expect("write");
        if cfg!(target_os = "linux") {
            // Unnamed while being written: nothing in the folder yet.
            assert!(a.temp_path().is_none());
            assert_eq!(entries(&dir), vec!["model.safetensors"]);
        }
        let temp = a.temp_path().map(Path::to_path_buf);
        drop(a);
        assert!(temp.is_none_or(|t| !t.exists()));
        assert_eq!(entries(&dir), vec!["model.safetensors"]);

        write_file(&p, &[&[1, 2, 3, 4]], &path, true).expect("write");
        let bytes = fs::read(&path).expect("read");
        assert_eq!(&bytes[bytes.len() - 4..], &[1, 2, 3, 4]);
        assert_eq!(bytes, serialize(&p, &[&[1, 2, 3, 4]]).expect("ser"));
        assert_eq!(entries(&dir), vec!["model.safetensors"]);
    }

    #[cfg(unix)]
    #[test]
    fn permissions_follow_umask_or_the_replaced_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("perm");
        let p = plan(vec![], None).expect("plan");
        let fresh = dir.join("fresh.safetensors");
        write_file(&p, &[], &fresh, false).expect("write");
        let mode = fs::metadata(&fresh).expect("meta").permissions().mode() & 0o777;
        // Same mode as any file the process creates (0o666 less the umask).
        let probe = dir.join("probe");
        File::create(&probe).expect("probe");
        let probe_mode = fs::metadata(&probe).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, probe_mode);
        assert_ne!(mode, 0o600);

        let kept = dir.join("kept.safetensors");
        fs::write(&kept, b"x").expect("write");
        fs::set_permissions(&kept, fs::Permissions::from_mode(0o640)).expect("chmod");
        write_file(&p, &[], &kept, false).expect("write");
        assert_eq!(
            fs::metadata(&kept).expect("meta").permissions().mode() & 0o777,
            0o640
        );

        // setuid, setgid and sticky are dropped; the owner and group are kept
        // where the process may give them (root).
        use std::os::unix::fs::MetadataExt;
        fs::set_permissions(&kept, fs::Permissions::from_mode(0o7640)).expect("chmod");
        let given = std::os::unix::fs::chown(&kept, Some(1234), Some(1234)).is_ok();
        write_file(&p, &[], &kept, false).expect("write");
        let meta = fs::metadata(&kept).expect("meta");
        assert_eq!(meta.mode() & 0o7777, 0o640);
        if given {
            assert_eq!((meta.uid(), meta.gid()), (1234, 1234));
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_target_is_replaced_never_followed() {
        let dir = temp_dir("link");
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").expect("write");
        let link = dir.join("link.safetensors");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        let p = plan(vec![], None).expect("plan");
        write_file(&p, &[], &link, false).expect("write");
        // The link became the new file; what it pointed to is untouched.
        assert!(fs::symlink_metadata(&link)
            .expect("meta")
            .file_type()
            .is_file());
        assert_eq!(fs::read(&link).expect("read"), p.header());
        assert_eq!(fs::read(&victim).expect("read"), b"precious");
        // A dangling link is replaced too, and nothing is created where it
        // pointed.
        let dangling = dir.join("dangling.safetensors");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).expect("symlink");
        write_file(&p, &[], &dangling, false).expect("write");
        assert!(!dir.join("nowhere").exists());
        assert_eq!(fs::read(&dangling).expect("read"), p.header());
    }

    /// The name's word: splitmix64's known outputs (the first three of the
    /// generator seeded with 0), and a seed that every input bit changes.
    #[test]
    fn temporary_name_words_mix_every_input() {
        let golden = 0x9E37_79B9_7F4A_7C15u64;
        assert_eq!(mix(golden), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix(golden.wrapping_mul(2)), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(mix(golden.wrapping_mul(3)), 0x06c4_5d18_8009_454f);
        assert_eq!(seed(5, 7, 0), 5 ^ (7 << 32));
        assert_eq!(seed(0, 0, 3), golden.wrapping_mul(3));
        assert_eq!(
            seed(u64::MAX, u32::MAX, 1),
            !(u64::from(u32::MAX) << 32) ^ golden
        );
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..32 {
            x = mix(x.wrapping_add(golden));
            let (n, p, c) = (x, (x >> 17) as u32, x.rotate_left(29));
            let base = seed(n, p, c);
            for bit in 0..64 {
                assert_ne!(seed(n ^ (1 << bit), p, c), base, "clock bit {bit}");
                assert_ne!(seed(n, p, c ^ (1 << bit)), base, "counter bit {bit}");
            }
            for bit in 0..32 {
                assert_ne!(seed(n, p ^ (1 << bit), c), base, "pid bit {bit}");
            }
        }
    }

    /// The temporary file lives in the target's folder ("." for a bare
    /// name), and a failed rename leaves no temporary file behind.
    #[test]
    fn temporary_files_live_beside_the_target_and_never_outlive_a_failure() {
        let dir = temp_dir("beside");
        let a = AtomicFile::create(&dir.join("m.safetensors")).expect("create");
        assert_eq!(a.dir, dir.0);
        drop(a);
        let bare = AtomicFile::create(Path::new("fastst-bare-name.safetensors")).expect("create");
        assert_eq!(bare.dir, PathBuf::from("."));
        drop(bare);
        // The target is a folder that is not empty: the rename fails.
        let target = dir.join("taken");
        fs::create_dir(&target).expect("mkdir");
        fs::write(target.join("inside"), b"x").expect("write");
        let mut a = AtomicFile::create(&target).expect("create");
        a.file().expect("file").write_all(b"new").expect("write");
        let e = a.commit(Some(false)).expect_err("rename over a folder");
        assert_eq!(e.rule(), "io");
        assert_eq!(entries(&dir), vec!["taken"]);
        // A named temporary file dropped uncommitted is removed too.
        let (file, temp) = open_named(&dir).expect("named");
        let named = AtomicFile {
            target: dir.join("n.safetensors"),
            dir: dir.0.clone(),
            temp: temp.clone(),
            file: Some(file),
            replaces: false,
        };
        assert_eq!(named.temp_path(), Some(temp.as_path()));
        assert!(temp.exists());
        drop(named);
        assert_eq!(entries(&dir), vec!["taken"]);
    }

    /// Flags of an open descriptor as /proc/self/fdinfo shows them (octal).
    #[cfg(target_os = "linux")]
    fn fd_flags(file: &File) -> u32 {
        use std::os::unix::io::AsRawFd;
        let info =
            fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).expect("fdinfo");
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .expect("flags line");
        u32::from_str_radix(flags.trim(), 8).expect("octal flags")
    }

    /// Temporary files are never inherited by programs this process runs.
    #[test]
    #[cfg(target_os = "linux")]
    fn temporary_files_close_on_exec() {
        let dir = temp_dir("cloexec");
        let (named, path) = open_named(&dir).expect("named");
        assert_ne!(fd_flags(&named) & libc::O_CLOEXEC as u32, 0);
        drop(named);
        fs::remove_file(path).expect("rm");
        if let Some(unnamed) = open_unnamed(&dir).expect("unnamed") {
            assert_ne!(fd_flags(&unnamed) & libc::O_CLOEXEC as u32, 0);
        }
    }

    /// A file system without unnamed files (procfs answers EOPNOTSUPP)
    /// means a named temporary file, not a failed save; other errors fail.
    #[test]
    #[cfg(target_os = "linux")]
    fn unnamed_files_fall_back_where_the_file_system_has_none() {
        assert!(open_unnamed(Path::new("/proc"))
            .expect("no error")
            .is_none());
        let dir = temp_dir("unnamed");
        assert!(open_unnamed(&dir.join("gone")).is_err());
    }

    /// Only a large regular file with one name, reached without following
    /// a symbolic link, is held to be let go of in the background.
    #[test]
    #[cfg(target_os = "linux")]
    fn only_large_regular_files_are_held() {
        let dir = temp_dir("hold");
        let large = dir.join("large");
        let file = File::create(&large).expect("create");
        file.set_len(RELEASE_IN_BACKGROUND_AT).expect("sparse");
        drop(file);
        let small = dir.join("small");
        fs::write(&small, vec![1u8; 1 << 20]).expect("write");
        let held = hold_replaced(&large).expect("a large file is held");
        assert_ne!(
            fd_flags(&held) & libc::O_PATH as u32,
            0,
            "opened for nothing"
        );
        assert_eq!(
            held.metadata().expect("stat").len(),
            RELEASE_IN_BACKGROUND_AT
        );
        drop(held);
        assert!(hold_replaced(&small).is_none());
        let just_under = dir.join("under");
        File::create(&just_under)
            .and_then(|f| f.set_len(RELEASE_IN_BACKGROUND_AT - 1))
            .expect("sparse");
        assert!(hold_replaced(&just_under).is_none());
        let link = dir.join("link");
        std::os::unix::fs::symlink(&large, &link).expect("symlink");
        assert!(
            hold_replaced(&link).is_none(),
            "a symbolic link is not followed"
        );
        assert!(hold_replaced(&dir).is_none(), "a folder");
        assert!(hold_replaced(&dir.join("none")).is_none());
        fs::hard_link(&large, dir.join("second")).expect("link");
        assert!(
            hold_replaced(&large).is_none(),
            "a file with another name stays"
        );
    }

    /// This process's descriptors on `path` or on the deleted file once
    /// named so.
    #[cfg(target_os = "linux")]
    fn handles_on(path: &Path) -> usize {
        let deleted = format!("{} (deleted)", path.display());
        fs::read_dir("/proc/self/fd")
            .expect("/proc")
            .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l == path || l.as_os_str() == deleted.as_str())
            .count()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_linked_over_large_file_is_held_until_the_caller_lets_it_go() {
        let dir = temp_dir("held");
        let (staged, target) = (dir.join("staged"), dir.join("target"));
        fs::write(&staged, b"new").expect("write");
        File::create(&target)
            .and_then(|f| f.set_len(RELEASE_IN_BACKGROUND_AT))
            .expect("sparse");
        let replaced = link_replace(&staged, &target, true).expect("link");
        assert_eq!(fs::read(&target).expect("read"), b"new");
        assert_eq!(handles_on(&target), 1, "the old file is held");
        drop(replaced);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while handles_on(&target) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(handles_on(&target), 0, "and let go of once dropped");
    }

    #[test]
    fn temporary_names_are_short_and_exclusive() {
        let name = temp_name();
        assert_eq!(name.len(), 1 + 16 + TEMP_SUFFIX.len());
        assert_ne!(name, temp_name());
        // A name of 255 bytes, the usual limit, can be saved.
        let dir = temp_dir("long");
        let long = dir.join("x".repeat(255 - 12) + ".safetensors");
        let p = plan(vec![], None).expect("plan");
        write_file(&p, &[], &long, false).expect("write");
        write_file(&p, &[], &long, true).expect("replace");
        assert_eq!(fs::read(&long).expect("read"), p.header());
        // The named fallback refuses a planted name (O_EXCL, no following).
        let (f, path) = open_named(&dir).expect("named");
        drop(f);
        assert!(path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with(TEMP_SUFFIX)));
        fs::remove_file(&path).expect("rm");
    }

    thread_local! {
        /// Names [`temp_name`] hands out, in order, before random ones: lets
        /// a test plant the name the next attempt will use.
        pub(super) static NEXT_NAMES: std::cell::RefCell<std::collections::VecDeque<String>> =
            const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
    }

    fn queue_names(names: &[&str]) {
        NEXT_NAMES.with(|q| q.borrow_mut().extend(names.iter().map(|n| (*n).to_owned())));
    }

    #[test]
    fn temporary_name_collisions_are_retried() {
        let dir = temp_dir("collide");
        let taken = ".00000000000000aa.fastst-tmp";
        let free = ".00000000000000bb.fastst-tmp";
        fs::write(dir.join(taken), b"someone else's").expect("plant");
        // Two collisions, then a free name: the named fallback moves on.
        queue_names(&[taken, taken, free]);
        let (f, path) = open_named(&dir).expect("named after collisions");
        drop(f);
        assert_eq!(path, dir.join(free));
        assert_eq!(fs::read(dir.join(taken)).expect("read"), b"someone else's");
        fs::remove_file(&path).expect("rm");
        // Every attempt taken: the error says so, and nothing is clobbered.
        queue_names(&[taken; 64]);
        let err = open_named(&dir).expect_err("all names taken");
        assert!(format!("{err}").to_lowercase().contains("exists"), "{err}");
        assert_eq!(NEXT_NAMES.with(|q| q.borrow().len()), 0);
        assert_eq!(fs::read(dir.join(taken)).expect("read"), b"someone else's");
        #[cfg(target_os = "linux")]
        if let Some(file) = open_unnamed(&dir).expect("unnamed") {
            queue_names(&[taken, free]);
            let linked = link_named(&file, &dir).expect("linked after a collision");
            assert_eq!(linked, dir.join(free));
            fs::remove_file(&linked).expect("rm");
        }
    }

    #[test]
    fn missing_folder_is_an_io_error() {
        let dir = temp_dir("missing");
        let p = plan(vec![], None).expect("plan");
        let e = write_file(&p, &[], &dir.join("no/such/dir/x.safetensors"), false)
            .expect_err("must fail");
        assert_eq!(e.rule(), "io");
    }

    #[test]
    fn write_atomic_runs_blocking_steps_and_keeps_feed_errors() {
        let dir = temp_dir("with");
        let path = dir.join("m.safetensors");
        let p = plan(vec![NewTensor::new("a", Dtype::U8, vec![2])], None).expect("plan");
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let blocking = |work: &mut (dyn FnMut() + Send)| {
            calls.fetch_add(1, Ordering::Relaxed);
            work();
        };
        // create, flush, commit: three blocking steps.
        write_atomic(&p, &path, None, &blocking, |s| {
            s.write(&[7, 8])?;
            s.end_tensor()
        })
        .expect("write");
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        assert_eq!(
            fs::read(&path).expect("read"),
            serialize(&p, &[&[7, 8]]).expect("ser")
        );

        // The caller's error comes back as it was; the old file stays.
        let failed = write_atomic(&p, &path, Some(true), &|work| work(), |_| Err("stop"));
        assert!(matches!(failed, Err(WriteFailure::Feed("stop"))));
        assert_eq!(
            fs::read(&path).expect("read"),
            serialize(&p, &[&[7, 8]]).expect("ser")
        );
        assert_eq!(entries(&dir), vec!["m.safetensors"]);

        // A tensor short of bytes is the core's own error.
        let short = write_atomic(&p, &path, None, &|work| work(), |s| {
            s.write(&[1]).map_err(|e| e.rule().id())
        });
        match short {
            Err(WriteFailure::Core(e)) => assert_eq!(e.rule(), "data-length"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn durability_default_flushes_only_replacements() {
        let dir = temp_dir("durable");
        let fresh = AtomicFile::create(&dir.join("new.safetensors")).expect("create");
        assert!(!fresh.durable_by_default());
        let old = dir.join("old.safetensors");
        fs::write(&old, b"x").expect("write");
        let replacing = AtomicFile::create(&old).expect("create");
        assert!(replacing.durable_by_default());
        replacing.commit(None).expect("commit");
        drop(fresh);
        assert_eq!(entries(&dir), vec!["old.safetensors"]);
    }
}
