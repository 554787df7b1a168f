//! Small file-system helpers shared by the modules that own durable files: atomic
//! replace (temp file + fsync + rename + directory fsync), directory fsync, and the
//! exclusive lock on the log directory. Owns no format.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};

/// fsync of a directory, so that creates, renames and unlinks in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(|e| LogError::io("opening directory", dir, e))?;
    f.sync_all().map_err(|e| LogError::FsyncFailed {
        path: dir.to_path_buf(),
        source: e,
    })
}

/// Atomically replaces `path` with `bytes`: write `path.tmp`, fsync it, rename over
/// `path`, fsync the directory. A crash leaves either the old or the new file, never a mix
/// (a leftover `.tmp` is ignored and removed by the next write).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| LogError::io("creating", &tmp, e))?;
    f.write_all(bytes)
        .map_err(|e| LogError::io("writing", &tmp, e))?;
    f.sync_all().map_err(|e| LogError::FsyncFailed {
        path: tmp.clone(),
        source: e,
    })?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| LogError::io("renaming into place", path, e))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Reads a whole file; `Ok(None)` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LogError::io("reading", path, e)),
    }
}

/// An exclusive `flock` on `<dir>/.lock`, held for the life of the `Log`. The kernel
/// drops it when the process dies, so a crash never leaves a stale lock. The holder writes
/// its pid into the file (informational: the error message of a second opener names it).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        match try_flock(&dir.join(".lock"))? {
            Ok(file) => Ok(DirLock { _file: file }),
            Err(pid) => Err(LogError::Locked {
                dir: dir.to_path_buf(),
                pid,
            }),
        }
    }
}

/// Takes an exclusive `flock` on `path` (created if missing) without waiting and writes
/// this process's pid into it. `Ok(Err(pid))` when another holder has it: the pid it
/// wrote, if readable. The pid is informational only (messages, recognising oneself).
pub fn try_flock(path: &Path) -> Result<std::result::Result<File, Option<u32>>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| LogError::io("opening lock file", path, e))?;
    // SAFETY: flock on a valid, owned file descriptor has no memory-safety concerns.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let pid = fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            return Ok(Err(pid));
        }
        return Err(LogError::io("locking", path, err));
    }
    let _ = file.set_len(0);
    let _ = std::os::unix::fs::FileExt::write_all_at(
        &file,
        format!("{}\n", std::process::id()).as_bytes(),
        0,
    );
    Ok(Ok(file))
}

/// An inotify watch on a directory: modifications, creations, moves in and deletions of
/// its entries. Events queue up in the kernel between waits, so a change that lands
/// between the caller's check and [`DirWatcher::wait`] is not lost.
#[derive(Debug)]
pub struct DirWatcher {
    fd: libc::c_int,
    dir: PathBuf,
}

impl DirWatcher {
    pub fn new(dir: &Path) -> Result<DirWatcher> {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain syscalls; the path is NUL-terminated; the descriptor is owned by
        // the returned value (closed in Drop) or closed here on error.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK);
            if fd < 0 {
                return Err(LogError::io(
                    "inotify_init for",
                    dir,
                    std::io::Error::last_os_error(),
                ));
            }
            let mut c = dir.as_os_str().as_bytes().to_vec();
            c.push(0);
            let mask = libc::IN_MODIFY | libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_DELETE;
            if libc::inotify_add_watch(fd, c.as_ptr() as *const libc::c_char, mask) < 0 {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(LogError::io("watching", dir, e));
            }
            Ok(DirWatcher {
                fd,
                dir: dir.to_path_buf(),
            })
        }
    }

    /// Blocks until an event is queued or `timeout`; drains the queue. Returns whether
    /// there was an event.
    pub fn wait(&self, timeout: std::time::Duration) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: poll/read on our own descriptor into a local buffer of the given size.
        unsafe {
            let rc = libc::poll(&mut pfd, 1, ms);
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    return Ok(false);
                }
                return Err(LogError::io("waiting for changes in", &self.dir, e));
            }
            if rc == 0 {
                return Ok(false);
            }
            let mut buf = [0u8; 4096];
            while libc::read(self.fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) > 0 {}
        }
        Ok(true)
    }
}

impl Drop for DirWatcher {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor this value owns, once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Big-endian cursor over a byte slice for the small metadata formats; every read checks
/// bounds and reports a truncation instead of panicking.
pub struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }
    pub fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| format!("truncated at byte {} (need {n} more)", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> std::result::Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> std::result::Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> std::result::Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    pub fn string16(&mut self) -> std::result::Result<String, String> {
        let n = self.u16()? as usize;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| "string is not UTF-8".to_string())
    }
}

pub fn put_string16(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends the CRC-32C of `out` to it (the trailer of every small metadata file).
pub fn seal(out: &mut Vec<u8>) {
    let crc = crc32c::crc32c(out);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Checks and strips the CRC-32C trailer written by [`seal`].
pub fn unseal(buf: &[u8]) -> std::result::Result<&[u8], String> {
    if buf.len() < 4 {
        return Err(format!("file of {} bytes is too short", buf.len()));
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    Ok(body)
}
