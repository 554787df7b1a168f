//! One partition: its segments, its single writer's state, its high watermark, and the
//! live path that changes them (append, roll, flush plan and publish, and the hooks of
//! retention and maintenance). Owns the partition directory
//! `<dir>/topics/<topic>/<partition>/`. Two child modules build that state from disk:
//! `recovery` (`Partition::open`: the segments found checked and cut against the ledger)
//! and `refresh` (a read-only partition catching up with another process's writer).
//!
//! Invariants (all under `Partition::state`):
//! - `segments` is never empty and sorted by base offset; the last one is the active
//!   segment, the only one written to.
//! - `log_start <= hw <= leo`; `log_start` is in the first segment, `leo` is the offset the
//!   next appended record gets; `hw` (high watermark) is the durable end recorded in the
//!   ledger: readers never see records at or past it.
//! - every segment's `durable_size` is the byte length that holds exactly the records
//!   below `hw` (a batch boundary), so readers never see a half-written batch.
//! - `epoch` changes whenever segments are removed or replaced (retention, cleaning), so a
//!   reader holding a byte position re-locates its offset through the index.
//! - the active segment's file holds its first bytes, up to the stage's `written`; the
//!   rest, up to its `size`, is staged in memory (`stage.rs`) until a write-out. `plan_flush` writes
//!   the whole stage out before it captures the sizes to fsync, and a roll writes it out
//!   before the segment is closed, so every byte below `hw` and every closed segment is in
//!   its file; staged bytes are never visible to readers (they are past `hw`). A crash
//!   loses staged bytes exactly as it loses unflushed bytes in the page cache: both are past
//!   the ledger's durable end.
//! - the active segment may be a recycled file (`recycle.rs`): its bytes past the stage's
//!   `written` are stale, so nothing here bounds a segment by its file's length except
//!   recovery (which cuts) and the read-only refresh (which scans only gapless batches up
//!   to the ledger's durable end). `pool` holds the partition's recyclable files;
//!   `active_stale` is the length of the recycled file the active segment reuses (counted
//!   in the disk usage until the segment is closed and cut to its exact size).

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::batch::{encode_batch, Compression, EncodedBatch};
use crate::error::{LogError, Result};
use crate::index::SegmentIndex;
use crate::ledger::PartitionMark;
use crate::log::LogOptions;
use crate::notify::{HasNotifier, Notifier};
use crate::record::NewRecord;
use crate::recycle::{self, Pool};
use crate::sealed::SealedBatch;
use crate::segment::SegmentFile;
use crate::stage::{Stage, WriteOut, WRITE_CHUNK};

pub(crate) mod recovery;
mod refresh;

/// Tests only: a hook the read-only refresh and open call between their stat of a segment
/// file and their read of it, where another process's writer may roll, cut or recycle
/// that file; a test runs writer steps there to replay a race deterministically.
#[cfg(test)]
pub(crate) mod race {
    use std::cell::RefCell;

    type Hook = Box<dyn FnMut(u64)>;

    thread_local! {
        static BEFORE_SCAN: RefCell<Option<Hook>> = RefCell::new(None);
    }

    /// Calls `hook(segment base)` before each segment scan of this thread's refreshes and
    /// opens.
    pub fn set_before_scan(hook: Option<Hook>) {
        BEFORE_SCAN.with(|h| *h.borrow_mut() = hook);
    }

    pub(crate) fn before_scan(base: u64) {
        BEFORE_SCAN.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f(base)
            }
        })
    }
}

/// A segment as the partition tracks it.
#[derive(Debug)]
pub struct SegmentMeta {
    pub file: Arc<SegmentFile>,
    pub index: SegmentIndex,
    /// Bytes written.
    pub size: u64,
    /// Bytes known fsynced.
    pub synced_size: u64,
    /// Bytes readers may read (all records below the high watermark).
    pub durable_size: u64,
}

impl SegmentMeta {
    pub fn base(&self) -> u64 {
        self.file.base_offset
    }
    pub fn max_timestamp(&self) -> Option<i64> {
        self.index.max_timestamp.map(|(t, _)| t)
    }
}

#[derive(Debug)]
pub struct PartitionState {
    pub segments: Vec<SegmentMeta>,
    pub log_start: u64,
    pub leo: u64,
    pub hw: u64,
    pub epoch: u64,
    /// New files were created since the last flush: the directory needs an fsync.
    pub dir_dirty: bool,
    /// Set after a failed write whose partial bytes could not be cut off again, or a
    /// failed fsync of a segment being closed.
    pub poisoned: Option<String>,
    /// The active segment's bytes not yet written to its file (`stage.rs`): appends encode
    /// into it, a flush or a roll writes it out whole, `append` writes it out once it holds
    /// `WRITE_CHUNK` bytes. `stage.end()` is the active segment's `size`.
    stage: Stage,
    scratch: Vec<u8>,
    /// Timestamp of the active segment's first batch (its max timestamp, as Kafka's
    /// `segment.ms` uses), `None` while it is empty.
    pub roll_ts: Option<i64>,
    /// Recyclable files of dropped segments (`recycle.rs`).
    pub pool: Pool,
    /// Length of the recycled file under the active segment (0 if it was created empty).
    pub active_stale: u64,
    /// `leo` at the last [`Partition::trim_if_idle`]: unchanged means no append since.
    pub idle_mark: u64,
}

impl PartitionState {
    /// Index of the segment that holds `offset` (the last one with base <= offset).
    pub fn segment_for(&self, offset: u64) -> usize {
        self.segments
            .partition_point(|s| s.base() <= offset)
            .saturating_sub(1)
    }

    /// Offset after the last record of segment `i`.
    pub fn segment_end(&self, i: usize) -> u64 {
        self.segments.get(i + 1).map_or(self.leo, |s| s.base())
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// What this partition counts against the disk budget: its segments' bytes, its pool
    /// files and the stale length of a recycled active segment (`recycle.rs`).
    pub fn disk_bytes(&self) -> u64 {
        self.size_bytes() + self.pool.bytes() + self.active_stale
    }
}

/// Result of one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: u64,
    pub last_offset: u64,
    pub bytes: u64,
}

/// What a flush must fsync for this partition, captured under the lock.
pub struct FlushPlan {
    pub leo: u64,
    pub files: Vec<(Arc<SegmentFile>, u64)>,
    pub dir: Option<PathBuf>,
}

pub struct Partition {
    pub topic: String,
    pub id: u32,
    pub dir: PathBuf,
    pub state: Mutex<PartitionState>,
    /// Mirror of `state.hw` for lock-free checks by waiting readers.
    pub hw: AtomicU64,
    /// Appended since the last flush.
    pub dirty: AtomicBool,
    pub notifier: Notifier,
    /// Serialises retention and cleaning of this partition.
    pub maintenance: Mutex<()>,
    /// Bytes that left the disk usage inside the partition (a recycled segment closed and
    /// cut, a pool file that could not be reused), for the log to subtract from its
    /// `total_bytes` gauge (`Partition::take_released`).
    released_bytes: AtomicU64,
    /// Rolls that reused a pool file since the last `take_released`.
    recycled_rolls: AtomicU64,
    /// Set by [`Partition::close`] under the state lock, read under it: no append, roll or
    /// stage write-out after it.
    closed: AtomicBool,
}

impl HasNotifier for Partition {
    fn notifier(&self) -> &Notifier {
        &self.notifier
    }
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn remove_file_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("removing", path, e)),
    }
}

/// Removes a segment's three files.
pub fn remove_segment_files(file: &SegmentFile) -> Result<()> {
    remove_file_if_exists(&file.path)?;
    remove_file_if_exists(&file.index_path())?;
    remove_file_if_exists(&file.time_index_path())
}

/// Writes and fsyncs a closed segment's index files.
pub fn write_index_files(file: &SegmentFile, index: &SegmentIndex) -> Result<()> {
    for (path, bytes) in [
        (file.index_path(), index.encode_offsets()),
        (file.time_index_path(), index.encode_times()),
    ] {
        let f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| LogError::io("creating index", &path, e))?;
        f.write_all_at(&bytes, 0)
            .map_err(|e| LogError::io("writing index", &path, e))?;
        f.sync_data().map_err(|e| LogError::FsyncFailed {
            path: path.clone(),
            source: e,
        })?;
    }
    Ok(())
}

fn roll_due(roll_ts: Option<i64>, segment_ms: Option<i64>, now: i64) -> bool {
    match (roll_ts, segment_ms) {
        (Some(t), Some(ms)) => now.saturating_sub(t) > ms,
        _ => false,
    }
}

impl Partition {
    pub fn new_empty(
        topic: &str,
        id: u32,
        dir: PathBuf,
        options: &LogOptions,
    ) -> Result<Partition> {
        fs::create_dir_all(&dir)
            .map_err(|e| LogError::io("creating partition directory", &dir, e))?;
        let file = SegmentFile::create(&dir, 0)?;
        Ok(Partition::from_state(
            topic,
            id,
            dir,
            PartitionState {
                segments: vec![SegmentMeta {
                    file: Arc::new(file),
                    index: SegmentIndex::default(),
                    size: 0,
                    synced_size: 0,
                    durable_size: 0,
                }],
                log_start: 0,
                leo: 0,
                hw: 0,
                epoch: 0,
                dir_dirty: true,
                poisoned: None,
                stage: {
                    let mut st = Stage::new();
                    st.set_write_behind(options.write_behind);
                    st
                },
                scratch: Vec::new(),
                roll_ts: None,
                pool: Pool::new(options.recycle_segments),
                active_stale: 0,
                idle_mark: 0,
            },
        ))
    }

    fn from_state(topic: &str, id: u32, dir: PathBuf, st: PartitionState) -> Partition {
        Partition {
            topic: topic.to_string(),
            id,
            dir,
            hw: AtomicU64::new(st.hw),
            state: Mutex::new(st),
            dirty: AtomicBool::new(false),
            notifier: Notifier::default(),
            maintenance: Mutex::new(()),
            released_bytes: AtomicU64::new(0),
            recycled_rolls: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Bytes that left the disk usage since the last call (see `released_bytes`) and the
    /// number of rolls that reused a pool file.
    pub fn take_released(&self) -> (u64, u64) {
        (
            self.released_bytes.swap(0, Ordering::Relaxed),
            self.recycled_rolls.swap(0, Ordering::Relaxed),
        )
    }

    /// Maintenance: a partition with no append since the last call gives its write
    /// stage's spare memory back (`Stage::shrink`), so a table that was loaded once (a
    /// snapshot) does not keep megabytes of buffers.
    pub fn trim_if_idle(&self) -> Result<()> {
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.leo != st.idle_mark {
            st.idle_mark = st.leo;
            return Ok(());
        }
        match st.segments.last() {
            Some(active) => st.stage.shrink(&active.file),
            None => Ok(()),
        }
    }

    /// `Err(Closed)` once [`Partition::close`] ran; call under the state lock.
    fn check_not_closed(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            // <log dir>/topics/<topic>/<partition>
            let log_dir = self.dir.ancestors().nth(3).unwrap_or(&self.dir);
            return Err(LogError::Closed(log_dir.to_path_buf()));
        }
        Ok(())
    }

    /// [`crate::Log::close`]: the partition takes no more appends, rolls or write-outs,
    /// and its write-behind write in flight, if any, is waited for, so nothing writes its
    /// files after this returns. With `cut_tail`, a recycled active segment's file is cut
    /// to its flushed bytes, so the next open finds no stale tail to cut and report (the
    /// same cut recovery would make, without a "recovery cut" alarm after every clean
    /// restart). Bytes appended but not flushed go too, as a crash would lose them;
    /// nothing fsynced is cut. A segment in a file created for it is left alone (recovery
    /// has nothing stale to cut there).
    pub fn close(&self, cut_tail: bool) -> Result<()> {
        let mut guard = self.lock();
        let st = &mut *guard;
        self.closed.store(true, Ordering::Release);
        let Some(active) = st.segments.last() else {
            return Ok(());
        };
        // A write-behind landing after the cut would put stale-looking bytes back.
        st.stage.settle(&active.file)?;
        if !cut_tail || st.active_stale == 0 {
            return Ok(());
        }
        let keep = active.synced_size.max(active.durable_size);
        let f = &active.file;
        f.file
            .set_len(keep)
            .map_err(|e| LogError::io("cutting the stale tail of", &f.path, e))?;
        f.file.sync_all().map_err(|e| LogError::FsyncFailed {
            path: f.path.clone(),
            source: e,
        })
    }

    /// Disk-budget relief: deletes every pool file. Returns the bytes freed.
    pub fn drop_pool(&self) -> Result<u64> {
        let files = self.lock().pool.drain();
        if files.is_empty() {
            return Ok(0);
        }
        let mut freed = 0;
        for f in &files {
            recycle::delete(f)?;
            freed += f.len;
        }
        crate::fsutil::sync_dir(&self.dir)?;
        Ok(freed)
    }

    /// Retention: a dropped closed segment leaves the partition. Its `.log` file goes to
    /// the pool if there is room and nobody else holds it (`recycle.rs`), else it is
    /// unlinked; its index files are always deleted. The caller fsyncs the directory.
    /// Returns the bytes that left the disk usage (0 when pooled: a pool file counts).
    pub fn retire_segment(&self, seg: SegmentMeta, recycle: bool) -> Result<u64> {
        let room = recycle && self.lock().pool.has_room();
        // Only a file nobody can read any more may be overwritten later: a reader or a
        // flush plan still holding it keeps reading this segment's bytes through it.
        if room && Arc::strong_count(&seg.file) == 1 {
            match recycle::retire(&seg.file, &self.dir) {
                Ok(Some(pf)) => {
                    remove_file_if_exists(&seg.file.index_path())?;
                    remove_file_if_exists(&seg.file.time_index_path())?;
                    let counted = pf.len;
                    self.lock().pool.push(pf);
                    // The pool counts the file's length; the log counted `size` (equal for a
                    // closed segment, cut to its exact size at its roll).
                    return Ok(seg.size.saturating_sub(counted));
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(file = %seg.file.path.display(), error = %e, "could not move a dropped segment into the recycle pool; deleting it");
                }
            }
        }
        remove_segment_files(&seg.file)?;
        Ok(seg.size)
    }

    pub fn lock(&self) -> MutexGuard<'_, PartitionState> {
        lock(&self.state)
    }

    pub fn high_watermark(&self) -> u64 {
        self.hw.load(Ordering::Acquire)
    }

    /// Appends one batch. The single-writer rule is enforced by the state mutex.
    pub fn append(
        &self,
        records: &[NewRecord<'_>],
        compression: Compression,
        segment_bytes: u64,
        segment_ms: Option<i64>,
    ) -> Result<AppendInfo> {
        self.append_with(segment_bytes, segment_ms, |st, base| {
            encode_batch(
                st.stage.buf_mut(),
                base,
                records,
                None,
                None,
                compression,
                &mut st.scratch,
            )
        })
    }

    /// Appends a batch built elsewhere (`sealed.rs`): its bytes are copied into the stage
    /// with this partition's next offset as their base offset; nothing is re-encoded.
    pub fn append_sealed(
        &self,
        batch: &SealedBatch,
        segment_bytes: u64,
        segment_ms: Option<i64>,
    ) -> Result<AppendInfo> {
        self.append_with(segment_bytes, segment_ms, |st, base| {
            Ok(batch.place(st.stage.buf_mut(), base))
        })
    }

    /// The append: `encode` puts one batch with base offset `leo` at the end of the
    /// stage's buffer; then the roll, the index and `leo` follow.
    fn append_with(
        &self,
        segment_bytes: u64,
        segment_ms: Option<i64>,
        encode: impl FnOnce(&mut PartitionState, u64) -> Result<EncodedBatch>,
    ) -> Result<AppendInfo> {
        let mut guard = self.lock();
        let st = &mut *guard;
        self.check_not_closed()?;
        if let Some(p) = &st.poisoned {
            return Err(LogError::Poisoned(p.clone()));
        }
        // A full stage is written out first, so that a write error fails this append
        // before it changes anything (the stage keeps its bytes for the next attempt).
        if st.stage.staged() >= WRITE_CHUNK as u64 {
            let end = st.stage.end();
            Self::write_stage(st, WriteOut::Chunk, end)?;
        }
        let base = st.leo;
        let active_size = st.segments.last().map_or(0, |s| s.size);
        let active_base = st.segments.last().map_or(0, |s| s.base());
        debug_assert_eq!(st.stage.end(), active_size);
        let enc = encode(st, base);
        st.stage.realign();
        let enc = match enc {
            Ok(enc) => enc,
            Err(e) => {
                st.stage.truncate_end(active_size);
                return Err(e);
            }
        };
        let len = enc.len as u64;
        // Roll when the batch would overflow the segment, or relative offsets / positions
        // would overflow the index's 32-bit fields.
        // Also roll when the active segment's first batch is older than segment.ms.
        if active_size > 0
            && (active_size + len > segment_bytes
                || enc.last_offset - active_base > i32::MAX as u64
                || active_size + len > i32::MAX as u64
                || roll_due(st.roll_ts, segment_ms, crate::record::now_ms()))
        {
            if let Err(e) = self.roll(st) {
                st.stage.truncate_end(active_size);
                return Err(e);
            }
        }
        let Some(active) = st.segments.last_mut() else {
            return Err(LogError::Poisoned("partition has no segment".into()));
        };
        let pos = active.size;
        let rel = (base - active.base()) as u32;
        active.index.on_batch(
            rel,
            pos as u32,
            len,
            enc.max_timestamp,
            (enc.offset_of_max_timestamp - active.base()) as u32,
            true,
        );
        if active.size == 0 {
            st.roll_ts = Some(enc.max_timestamp);
        }
        active.size += len;
        st.leo = enc.last_offset + 1;
        self.dirty.store(true, Ordering::Release);
        Ok(AppendInfo {
            base_offset: base,
            last_offset: enc.last_offset,
            bytes: len,
        })
    }

    /// Writes the stage out to the active segment (see `Stage::write_out`). After a failed
    /// write the file is cut back to what was written before, so it never holds a partial
    /// batch past that point.
    fn write_stage(st: &mut PartitionState, mode: WriteOut, upto: u64) -> Result<()> {
        let Some(active) = st.segments.last() else {
            return Ok(());
        };
        if let Err(e) = st.stage.write_out(&active.file, mode, upto) {
            if let Err(e2) = st.stage.cut_after_error(&active.file) {
                st.poisoned = Some(format!(
                    "could not cut a failed append off {}: {e2}",
                    active.file.path.display()
                ));
            }
            if matches!(e, LogError::FsyncFailed { .. } | LogError::Poisoned(_)) {
                // A failed fsync may have dropped dirty pages: a later, successful one
                // would not bring them back. A poisoned stage lost bytes (`stage.rs`).
                st.poisoned = Some(e.to_string());
            }
            return Err(e);
        }
        Ok(())
    }

    /// Closes the active segment (stage written out, index files written and fsynced) and
    /// starts a new one. Staged bytes past the active segment's size (the batch that made
    /// it roll) move to the new segment's stage.
    fn roll(&self, st: &mut PartitionState) -> Result<()> {
        let leo = st.leo;
        let old_size = st.segments.last().map_or(0, |s| s.size);
        Self::write_stage(st, WriteOut::Close, old_size)?;
        if let Some(active) = st.segments.last_mut() {
            active.index.seal();
            write_index_files(&active.file, &active.index)?;
        }
        // The new segment: a recycled file if the pool has one (`recycle.rs`), else a new
        // empty file. Either way the directory is dirty: the next flush fsyncs it before
        // its ledger write can name anything in the new segment.
        let (file, stale) = match st.pool.take() {
            Some(pf) => match SegmentFile::reuse(&self.dir, &pf.path, leo) {
                Ok(f) => {
                    self.recycled_rolls.fetch_add(1, Ordering::Relaxed);
                    (f, pf.len)
                }
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = self.id, error = %e, "could not reuse a recycle-pool file; creating the segment");
                    let _ = recycle::delete(&pf);
                    self.released_bytes.fetch_add(pf.len, Ordering::Relaxed);
                    (SegmentFile::create(&self.dir, leo)?, 0)
                }
            },
            None => (SegmentFile::create(&self.dir, leo)?, 0),
        };
        // The closed segment was cut to its exact size (counted in `size`): its stale
        // length leaves the disk usage.
        let closed_stale = std::mem::replace(&mut st.active_stale, stale);
        self.released_bytes
            .fetch_add(closed_stale, Ordering::Relaxed);
        st.stage.restart_at_new_file(stale);
        st.segments.push(SegmentMeta {
            file: Arc::new(file),
            index: SegmentIndex::default(),
            size: 0,
            synced_size: 0,
            durable_size: 0,
        });
        st.dir_dirty = true;
        st.roll_ts = None;
        tracing::debug!(topic = %self.topic, partition = self.id, base_offset = leo, recycled = stale > 0, "rolled segment");
        Ok(())
    }

    /// Maintenance: rolls the active segment if `segment.ms` says it is due, so time
    /// retention can delete a quiet partition's data. Returns whether it rolled.
    pub fn roll_if_due(&self, segment_ms: Option<i64>, now: i64) -> Result<bool> {
        let mut guard = self.lock();
        let st = &mut *guard;
        self.check_not_closed()?;
        if st.poisoned.is_some() || st.segments.last().is_none_or(|s| s.size == 0) {
            return Ok(false);
        }
        if !roll_due(st.roll_ts, segment_ms, now) {
            return Ok(false);
        }
        self.roll(st)?;
        // The new (empty) segment file must be durable before retention relies on it: the
        // next flush syncs the directory (dir_dirty), and retention only deletes segments
        // below the high watermark anyway.
        Ok(true)
    }

    /// Writes the stage out and captures what must be fsynced to make everything appended
    /// so far durable. On a write error the partition stays dirty (its stage keeps the
    /// bytes) and nothing was planned.
    pub fn plan_flush(&self) -> Result<FlushPlan> {
        self.dirty.store(false, Ordering::Release);
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Err(e) = self.check_not_closed() {
            self.dirty.store(true, Ordering::Release);
            return Err(e);
        }
        if st.stage.unwritten() > 0 {
            let end = st.stage.end();
            if let Err(e) = Self::write_stage(st, WriteOut::Flush, end) {
                self.dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        let files = st
            .segments
            .iter()
            .filter(|s| s.synced_size < s.size)
            .map(|s| (s.file.clone(), s.size))
            .collect();
        let dir = std::mem::take(&mut st.dir_dirty).then(|| self.dir.clone());
        Ok(FlushPlan {
            leo: st.leo,
            files,
            dir,
        })
    }

    /// After the ledger recorded `plan.leo` as durable: expose it to readers and wake them.
    pub fn publish(&self, plan: &FlushPlan) {
        {
            let mut st = self.lock();
            for (f, size) in &plan.files {
                if let Some(seg) = st
                    .segments
                    .iter_mut()
                    .find(|s| Arc::ptr_eq(&s.file, f) || s.base() == f.base_offset)
                {
                    seg.synced_size = seg.synced_size.max(*size);
                }
            }
            if plan.leo > st.hw {
                st.hw = plan.leo;
                // Every segment whose records are all below hw is readable in full; the
                // one containing hw up to the planned size.
                let hw = st.hw;
                let n = st.segments.len();
                for i in 0..n {
                    let end = st.segment_end(i);
                    let seg = &mut st.segments[i];
                    if end <= hw {
                        seg.durable_size = seg.size;
                    } else if seg.base() < hw {
                        if let Some((_, sz)) =
                            plan.files.iter().find(|(f, _)| f.base_offset == seg.base())
                        {
                            seg.durable_size = seg.durable_size.max(*sz);
                        }
                    }
                }
                self.hw.store(hw, Ordering::Release);
            }
        }
        self.notifier.notify_all();
    }

    pub fn mark(&self) -> PartitionMark {
        let st = self.lock();
        PartitionMark {
            log_start: st.log_start,
            durable_end: st.hw,
        }
    }
}
