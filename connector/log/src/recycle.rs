//! Segment file recycling, the way Postgres recycles WAL segment files: when retention or
//! disk-budget relief drops whole closed segments, up to a bounded number of their `.log`
//! files per partition are kept in a pool instead of being unlinked, and the next roll
//! renames one into place as the new active segment and writes over it from position 0.
//! Owns the pool's file naming and its bound; the partition owns the pool itself (under
//! its state lock).
//!
//! # Why
//!
//! On ext4 (and most file systems) an `O_DIRECT` write past the end of a file, or into a
//! fallocated/sparse range, must persist new block allocations or convert unwritten
//! extents, and the flush's `fdatasync` pays for that metadata on every flush; an
//! overwrite of blocks that are already written and allocated needs no metadata at all
//! (BENCHMARKS.md, "Write stage with O_DIRECT": 0.56-0.75 ms against 0.35-0.41 ms per MiB
//! written + fdatasync on the reference disk). Recycling makes the steady state of a
//! topic with retention an overwrite.
//!
//! # Files
//!
//! `<partition dir>/NNNNNNNNNNNNNNNNNNNN.log.recycle`, N the 20-digit base offset of the
//! segment the file last held. The extension is `log.recycle`, so the segment lister
//! (`segment::parse_file_name`) never takes it for a segment, the cleaner's `*.cleaned`
//! and the `*.tmp` cleanup never match it, and a read-only process never opens it. Its
//! contents are meaningless. Index files of a pooled segment are deleted.
//!
//! # Invariants and crash safety
//!
//! - A segment file enters the pool only when nothing but the retention pass holds it
//!   (`Arc::strong_count == 1` after it left the partition's segment list: no reader, no
//!   flush plan, no cleaner can still read it through its open descriptor, and none can
//!   get it again). Its rename follows the ledger's new log start, exactly where the
//!   unlink used to be, and the directory fsync that followed the unlinks follows the
//!   renames.
//! - A recycled active segment's file holds stale bytes (even whole batches with valid
//!   CRCs) past the partition's written position. Nobody reads them: readers, the high
//!   watermark and sizes go by the partition's tracked sizes, never the file length; a
//!   roll cuts the file to the segment's exact size (`stage.rs`, `close_at`); recovery
//!   accepts only batches that continue the expected offsets gaplessly and stop at the
//!   ledger's durable end, and cuts the rest off (reported like any torn tail).
//! - A crash after a pool rename leaves either the segment file below the log start
//!   (deleted on open as a leftover of retention) or the pool file (kept). A crash after
//!   the rename into place but before the next flush leaves a segment whose base is at or
//!   past the ledger's durable end: deleted on open, or, at exactly the durable end,
//!   scanned and cut to empty. Pool files found on open are kept up to the bound; extra
//!   ones are deleted.
//! - A clean stop ([`crate::Log::close`], which `cdc run` and `cdc log produce` call) cuts
//!   a recycled active segment to its flushed bytes under the flush lock, so the next open
//!   has nothing stale to cut or report; a log dropped without it is recovered like a
//!   crashed one (the stale tail is cut and reported as a recovery cut).
//! - Disk accounting (the disk budget's `total_bytes`): pool files count with their
//!   length; a recycled active segment counts with its full (stale) length on top of its
//!   data until it is closed, so the count over-states the disk used by at most one
//!   segment per partition and never under-states it. When the budget is short, pool
//!   files are deleted before any segment, and the segments budget relief then drops are
//!   unlinked, not pooled (a pooled file would still count against the budget).
//!
//! What it cannot guard: a read-only process (`Log::open_read_only`) holding a segment
//! open while the writer's retention drops and recycles it sees the new segment's bytes
//! through its descriptor; its reader checks that every batch lies in the segment's
//! offset range and re-reads the ledger on a mismatch (`reader.rs`), so it reports the
//! offset as out of range (as when a plain delete outran it), not wrong records. A
//! read-only refresh that scans a file retention dropped meanwhile retries with the
//! ledger as it is now (`Log::refresh`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::segment::SegmentFile;

/// Default bound on pooled files per partition ([`crate::LogOptions::recycle_segments`]).
pub const DEFAULT_RECYCLE_SEGMENTS: usize = 2;

const POOL_EXT: &str = "log.recycle";

/// `00000000000000000042.log.recycle` for a file that held segment 42.
pub fn pool_file_name(old_base: u64) -> String {
    format!("{old_base:020}.{POOL_EXT}")
}

fn is_pool_file_name(name: &str) -> bool {
    matches!(crate::segment::parse_file_name(name), Some((_, POOL_EXT)))
}

/// One pooled file.
#[derive(Debug)]
pub struct PoolFile {
    pub path: PathBuf,
    /// Its length (counted in the disk usage while it is pooled).
    pub len: u64,
}

/// A partition's pool of recyclable files.
#[derive(Debug, Default)]
pub struct Pool {
    limit: usize,
    files: Vec<PoolFile>,
}

impl Pool {
    pub fn new(limit: usize) -> Pool {
        Pool {
            limit,
            files: Vec::new(),
        }
    }

    pub fn has_room(&self) -> bool {
        self.files.len() < self.limit
    }

    pub fn push(&mut self, f: PoolFile) {
        self.files.push(f);
    }

    /// The file to reuse next: the one pooled first, so every pooled file is reused in
    /// turn (none sits in the pool for ever).
    pub fn take(&mut self) -> Option<PoolFile> {
        (!self.files.is_empty()).then(|| self.files.remove(0))
    }

    /// Empties the pool (the caller deletes the files).
    pub fn drain(&mut self) -> Vec<PoolFile> {
        std::mem::take(&mut self.files)
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len).sum()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.files.len()
    }
}

/// Moves a dropped segment's `.log` file into the pool by rename (the caller deletes its
/// index files and fsyncs the directory). `Ok(None)` if a pool file of that name exists
/// already (offsets reused after `accept_damaged_tail`): the caller unlinks instead.
pub fn retire(seg: &SegmentFile, dir: &Path) -> Result<Option<PoolFile>> {
    let path = dir.join(pool_file_name(seg.base_offset));
    if path.exists() {
        return Ok(None);
    }
    let len = seg.len()?;
    fs::rename(&seg.path, &path).map_err(|e| {
        LogError::io(
            "renaming a dropped segment into the recycle pool as",
            &path,
            e,
        )
    })?;
    Ok(Some(PoolFile { path, len }))
}

/// Deletes a pooled file.
pub fn delete(f: &PoolFile) -> Result<()> {
    match fs::remove_file(&f.path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("removing recycle-pool file", &f.path, e)),
    }
}

/// On open: the pool files in `dir`, up to `limit` of them kept (by name), the rest
/// deleted. Returns the pool and whether a file was deleted (the directory then needs an
/// fsync). Read-only: an empty pool, nothing touched.
pub fn load(dir: &Path, limit: usize, read_only: bool) -> Result<(Pool, bool)> {
    let mut pool = Pool::new(limit);
    if read_only {
        return Ok((pool, false));
    }
    let mut found = Vec::new();
    let rd = fs::read_dir(dir).map_err(|e| LogError::io("listing", dir, e))?;
    for ent in rd {
        let ent = ent.map_err(|e| LogError::io("listing", dir, e))?;
        let name = ent.file_name();
        if name.to_str().is_some_and(is_pool_file_name) {
            let path = ent.path();
            let len = ent
                .metadata()
                .map_err(|e| LogError::io("stat of recycle-pool file", &path, e))?
                .len();
            found.push(PoolFile { path, len });
        }
    }
    // By name: the files of the oldest segments first, as retention pooled them.
    found.sort_by(|a, b| a.path.cmp(&b.path));
    let mut deleted = false;
    for f in found {
        if pool.has_room() {
            pool.push(f);
        } else {
            delete(&f)?;
            deleted = true;
        }
    }
    Ok((pool, deleted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names_are_never_segments() {
        let n = pool_file_name(42);
        assert_eq!(n, "00000000000000000042.log.recycle");
        assert!(is_pool_file_name(&n));
        assert_ne!(
            crate::segment::parse_file_name(&n).map(|p| p.1),
            Some("log")
        );
        assert!(!is_pool_file_name("00000000000000000042.log"));
        assert!(!is_pool_file_name("00000000000000000042.log.cleaned"));
        assert!(!is_pool_file_name("42.log.recycle"));
    }

    #[test]
    fn load_keeps_up_to_the_bound_and_reuses_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for (b, len) in [(3u64, 10usize), (1, 30), (2, 20)] {
            fs::write(dir.path().join(pool_file_name(b)), vec![7u8; len]).unwrap();
        }
        fs::write(dir.path().join("00000000000000000009.log"), b"x").unwrap();
        let (mut pool, deleted) = load(dir.path(), 2, false).unwrap();
        assert!(deleted);
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.bytes(), 50);
        assert!(!dir.path().join(pool_file_name(3)).exists());
        assert_eq!(pool.take().unwrap().len, 30);
        assert_eq!(pool.take().unwrap().len, 20);
        assert!(dir.path().join("00000000000000000009.log").exists());
        let (pool0, deleted) = load(dir.path(), 0, false).unwrap();
        assert!(deleted && pool0.len() == 0);
        assert!(!dir.path().join(pool_file_name(1)).exists());
    }
}
