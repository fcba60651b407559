//! The atomic commit: a new file is written to a temporary file next to its
//! target and renamed over it, with the durability policy, in one place.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::plan::WritePlan;
use super::stream::TensorStream;
use super::WRITE_BUFFER;
use crate::error::{Error, Result};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new file being written next to its target. [`AtomicFile::commit`]
/// renames it over the target; dropping it uncommitted removes it, so the
/// target is never seen half-written and no temporary file is left behind.
///
/// The temporary file is created with the default mode (0o666 less the
/// umask), or with the permissions of the file it replaces. When the target
/// is a symbolic link, the file it points to is replaced.
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    temp: PathBuf,
    file: Option<File>,
    replaces: bool,
}

impl AtomicFile {
    /// Creates the temporary file in the target's folder.
    pub fn create(target: &Path) -> Result<AtomicFile> {
        let target = resolve_target(target);
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base: OsString = target
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| {
                Error::io(
                    "choosing a temporary file",
                    io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"),
                )
            })?;
        let existing = fs::metadata(&target).ok().filter(|m| m.is_file());
        let pid = std::process::id();
        let mut last_err = None;
        for _ in 0..64 {
            let count = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let mut name = OsString::from(".");
            name.push(&base);
            name.push(format!(".{pid}-{count}-{nanos:08x}.fastst-tmp"));
            let temp = dir.join(name);
            match File::options().write(true).create_new(true).open(&temp) {
                Ok(file) => {
                    let atomic = AtomicFile {
                        target,
                        temp,
                        file: Some(file),
                        replaces: existing.is_some(),
                    };
                    if let Some(meta) = existing {
                        fs::set_permissions(&atomic.temp, meta.permissions()).map_err(|e| {
                            Error::io("copying the permissions of the file being replaced", e)
                        })?;
                    }
                    return Ok(atomic);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
                Err(e) => {
                    return Err(Error::io(
                        "creating a temporary file in the target's folder",
                        e,
                    ))
                }
            }
        }
        Err(Error::io(
            "creating a temporary file in the target's folder",
            last_err.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
        ))
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

    /// True when a file already exists at the target (it will be replaced).
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

    /// Path of the temporary file.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Path the file will have once committed.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Closes the file and renames it over the target. With `durable`, the
    /// data is flushed to the device before the rename and the folder after
    /// it, so a system crash leaves either the old file or the new one.
    /// `None` applies the default policy, [`AtomicFile::durable_by_default`].
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
        drop(file);
        fs::rename(&self.temp, &self.target)
            .map_err(|e| Error::io("renaming the temporary file over the target", e))?;
        // The temporary path no longer exists: nothing to clean up.
        self.temp = PathBuf::new();
        if durable {
            if let Some(dir) = self.target.parent() {
                let dir = if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                };
                // Folders cannot be opened for syncing everywhere; the file
                // itself is already safe, so a failure here is not an error.
                if let Ok(d) = File::open(dir) {
                    let _ = d.sync_all();
                }
            }
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        self.file.take();
        if !self.temp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

fn resolve_target(target: &Path) -> PathBuf {
    match fs::symlink_metadata(target) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf())
        }
        _ => target.to_path_buf(),
    }
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
/// `None`). On any failure the temporary file is removed and `path` is left
/// as it was. The steps that wait on the disk run through `blocking`.
pub fn write_atomic<E>(
    plan: &WritePlan,
    path: &Path,
    durable: Option<bool>,
    blocking: Blocking<'_>,
    feed: impl FnOnce(&mut TensorStream<'_, BufWriter<&mut File>>) -> std::result::Result<(), E>,
) -> std::result::Result<(), WriteFailure<E>> {
    let mut atomic = run(blocking, || AtomicFile::create(path))?;
    {
        let out = BufWriter::with_capacity(WRITE_BUFFER, atomic.file()?);
        let mut stream = TensorStream::new(plan, out)?;
        feed(&mut stream).map_err(WriteFailure::Feed)?;
        let out = stream.finish()?;
        run(blocking, move || {
            out.into_inner()
                .map(|_| ())
                .map_err(|e| Error::io("writing the data", e.into_error()))
        })?;
    }
    run(blocking, move || atomic.commit(durable))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::super::{serialize, write_file, NewTensor};
    use super::*;
    use crate::dtype::Dtype;
    use crate::header::DEFAULT_HEADER_CAP;

    fn plan(tensors: Vec<NewTensor>, meta: Option<Vec<(&str, &str)>>) -> Result<WritePlan> {
        let meta = meta.map(|m| {
            m.into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        });
        WritePlan::new(tensors, meta, DEFAULT_HEADER_CAP)
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "fastst-write-{tag}-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&d).expect("mkdir");
        d
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("read_dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
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

        // Dropping an uncommitted file removes it.
        let mut a = AtomicFile::create(&path).expect("create");
        assert!(a.replaces_existing());
        assert!(!AtomicFile::create(&dir.join("new.safetensors"))
            .expect("create")
            .replaces_existing());
        a.file()
            .expect("file")
            .write_all(b"partial")
            .expect("write");
        let temp = a.temp_path().to_path_buf();
        assert!(temp.exists());
        drop(a);
        assert!(!temp.exists());

        write_file(&p, &[&[1, 2, 3, 4]], &path, true).expect("write");
        let bytes = fs::read(&path).expect("read");
        assert_eq!(&bytes[bytes.len() - 4..], &[1, 2, 3, 4]);
        assert_eq!(bytes, serialize(&p, &[&[1, 2, 3, 4]]).expect("ser"));
        assert_eq!(entries(&dir), vec!["model.safetensors"]);
        fs::remove_dir_all(&dir).expect("cleanup");
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
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[cfg(unix)]
    #[test]
    fn symlinked_target_is_replaced_through_the_link() {
        let dir = temp_dir("link");
        let real = dir.join("real.safetensors");
        fs::write(&real, b"old").expect("write");
        let link = dir.join("link.safetensors");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let p = plan(vec![], None).expect("plan");
        write_file(&p, &[], &link, false).expect("write");
        assert!(fs::symlink_metadata(&link)
            .expect("meta")
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).expect("read"), p.header());
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn missing_folder_is_an_io_error() {
        let dir = temp_dir("missing");
        let p = plan(vec![], None).expect("plan");
        let e = write_file(&p, &[], &dir.join("no/such/dir/x.safetensors"), false)
            .expect_err("must fail");
        assert_eq!(e.rule(), "io");
        fs::remove_dir_all(&dir).expect("cleanup");
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
        fs::remove_dir_all(&dir).expect("cleanup");
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
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
