//! The cleaner: log compaction of closed segments (`cleanup.policy` includes `compact`).
//! Owns the rewrite-and-swap protocol; the files it writes use the segment and index
//! formats of `batch.rs` / `index.rs`.
//!
//! Rules: over the partition's closed, fully durable segments, a record survives iff it is
//! the newest record of its key among them, and, if it is a tombstone (null value), its
//! timestamp is newer than `now - delete.retention.ms`. The active segment is never
//! touched (so a key may keep an older value in a closed segment while a newer one sits in
//! the active segment; the reader sees both, in order, as in Kafka). Survivors keep their
//! offsets and order: a filtered batch keeps its base offset and `lastOffsetDelta`, its
//! records keep their offset deltas; an emptied batch is dropped, except a segment's last
//! batch, which stays as an empty batch so the segment still ends at the next segment's
//! base offset (the invariant recovery checks).
//!
//! Swap protocol per segment (crash-safe at every step; the crash point after each,
//! `failpoint.rs`, in brackets; `tests/compaction_crash.rs` crashes at every one):
//! 1. write `<base>.log.cleaned` [`compact.cleaned_partial` after its first batch reached
//!    the file], fsync it [`compact.cleaned_written`] (a crash leaves a `.cleaned` file,
//!    which the next open deletes: the old segment is untouched);
//! 2. delete the old `.index` / `.timeindex` [`compact.index_removed`] (a crash now
//!    leaves the old log without index files, rebuilt on open);
//! 3. rename `.log.cleaned` over `.log` [`compact.renamed`] (atomic: a crash leaves the
//!    old or new log, both valid, holding the same surviving records' offsets);
//! 4. write + fsync the new index files [`compact.index_written`]; fsync the directory;
//! 5. under the partition lock, swap the segment's metadata and bump the epoch
//!    [`compact.swapped`].
//!
//! After the last segment, the cleaner checkpoint is replaced (temp file + fsync
//! [`compact.checkpoint_tmp`] + rename + directory fsync; a leftover temp is deleted on
//! open). A crash before that leaves the old checkpoint: the next run cleans the swapped
//! segments again, which changes nothing (they are already clean).
//!
//! Readers holding the old file keep reading its (unlinked) inode consistently.
//!
//! Stopping: a pass checks between batches whether the log is closing (`Log::close`,
//! which waits for the partition's maintenance lock) or, on the maintenance thread,
//! whether every handle of the log was dropped. It then returns `Closed` at once:
//! in step 1 the `.cleaned` file is removed again; steps 2-5 are never interrupted (they
//! are short), and the checkpoint is not moved, as after a crash before it.
//!
//! Bounded work and memory, as Kafka's cleaner: a partition's closed segments are a
//! *clean* section (below the cleaner checkpoint: each key appears there at most once,
//! apart from the tombstone rule) and a *dirty* section (closed since). A run builds the
//! key map from the dirty section only — 128-bit hashes of the keys with their newest
//! offset, at most [`LogOptions::cleaner_dedupe_bytes`] of them, whole segments at a time
//! — then cleans every segment up to the end of what the map covers: a keyed record
//! survives iff the map has no newer offset for its key, and a tombstone also needs to be
//! younger than `delete.retention.ms`. The checkpoint (`cleaner-offset-checkpoint` in the
//! partition directory: the clean section's end and the oldest tombstone it kept) then
//! moves to that end, so the next run starts where this one stopped even when the map
//! could not hold the whole dirty section. With nothing dirty, a run only rewrites when a
//! kept tombstone has expired since. Segments are read and written one batch at a time;
//! a segment that loses nothing is not rewritten. A lost or unreadable checkpoint only
//! makes the next run treat everything as dirty.
//!
//! Why records beyond the map's range may decide: the map holds real offsets newer than
//! every record of the section being cleaned, and a record is only dropped when a newer
//! record of its key exists in the log, whichever segment holds it.

use std::collections::HashMap;
use std::fs;
use std::hash::BuildHasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{decode_into, encode_batch, with_new_records};
use crate::error::{LogError, Result};
use crate::index::SegmentIndex;
use crate::log::{Log, LogOptions, MaintenanceReport};
use crate::metrics::Metrics;
use crate::partition::{lock, write_index_files, Partition};
use crate::record::Record;
use crate::segment::{BatchScanner, ScanStop, SegmentFile};

pub fn compact_topic(log: &Log, topic: &str, now: i64) -> Result<MaintenanceReport> {
    let t = log.topic(topic)?;
    let cfg = t.config().clone();
    if !cfg.cleanup_policy.compact {
        return Err(LogError::InvalidArgument(format!(
            "topic {topic:?} has cleanup.policy={}; compaction needs compact",
            if cfg.cleanup_policy.delete {
                "delete"
            } else {
                "none"
            }
        )));
    }
    let mut r = MaintenanceReport::default();
    for p in 0..cfg.partitions {
        let part = log.partition(topic, p)?;
        let (removed, reclaimed) =
            compact_partition(log, &part, log.options(), now - cfg.delete_retention_ms)?;
        Metrics::add(&log.metrics_ref().compaction_runs, 1);
        if removed > 0 {
            r.compacted_partitions += 1;
            r.removed_records += removed;
            r.reclaimed_bytes += reclaimed;
        }
    }
    Ok(r)
}

/// Calls `f` for each batch of `[0, size)` with its position and decoded records until it
/// returns `false`.
fn for_each_batch(
    file: &SegmentFile,
    size: u64,
    mut f: impl FnMut(crate::batch::BatchHeader, &[u8], Vec<Record>) -> Result<bool>,
) -> Result<()> {
    let mut sc = BatchScanner::new(file, 0, size);
    loop {
        match sc.next_batch() {
            Ok(None) => return Ok(()),
            Ok(Some((pos, h, slice))) => {
                let bytes = Bytes::copy_from_slice(slice);
                let mut recs = Vec::with_capacity(h.records_count as usize);
                decode_into(&bytes, &h, 0, &mut recs)
                    .map_err(|e| file.corrupt(pos, h.base_offset, e))?;
                if !f(h, slice, recs)? {
                    return Ok(());
                }
            }
            Err(ScanStop::Io(e)) => return Err(e),
            Err(ScanStop::Bad { position, reason }) => {
                return Err(file.corrupt(
                    position,
                    sc.prev_next_offset.unwrap_or(file.base_offset),
                    reason,
                ))
            }
        }
    }
}

/// Bytes one key of the map costs (hash, offset, table slack).
const BYTES_PER_KEY: usize = 32;

/// Newest offset per key, keyed by a 128-bit hash of the key (two independently seeded
/// SipHash values; a collision would need ~2^64 keys), never more than `max` keys.
struct OffsetMap {
    map: HashMap<(u64, u64), u64>,
    max: usize,
    h1: std::collections::hash_map::RandomState,
    h2: std::collections::hash_map::RandomState,
}

impl OffsetMap {
    fn new(dedupe_bytes: usize) -> OffsetMap {
        OffsetMap {
            map: HashMap::new(),
            max: (dedupe_bytes / BYTES_PER_KEY).max(1),
            h1: Default::default(),
            h2: Default::default(),
        }
    }

    fn hash(&self, key: &[u8]) -> (u64, u64) {
        (self.h1.hash_one(key), self.h2.hash_one(key))
    }

    /// Records `offset` as the newest of `key`; `false` (nothing recorded) when the map is
    /// full and the key is new.
    fn put(&mut self, key: &[u8], offset: u64) -> bool {
        let h = self.hash(key);
        if self.map.len() >= self.max && !self.map.contains_key(&h) {
            return false;
        }
        self.map.insert(h, offset);
        true
    }

    fn get(&self, key: &[u8]) -> Option<u64> {
        self.map.get(&self.hash(key)).copied()
    }
}

/// File name of the per-partition cleaner checkpoint.
const CHECKPOINT: &str = "cleaner-offset-checkpoint";

/// Where the clean section ends, and the oldest tombstone timestamp it kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CleanerCheckpoint {
    clean_end: u64,
    oldest_tombstone: i64,
}

impl Default for CleanerCheckpoint {
    fn default() -> Self {
        CleanerCheckpoint {
            clean_end: 0,
            oldest_tombstone: i64::MAX,
        }
    }
}

fn read_checkpoint(dir: &Path) -> CleanerCheckpoint {
    let path = dir.join(CHECKPOINT);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Default::default(),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the cleaner checkpoint; the next compaction reads the whole partition");
            return Default::default();
        }
    };
    let mut it = text.split_whitespace();
    match (
        it.next().and_then(|v| v.parse().ok()),
        it.next().and_then(|v| v.parse().ok()),
    ) {
        (Some(clean_end), Some(oldest_tombstone)) => CleanerCheckpoint {
            clean_end,
            oldest_tombstone,
        },
        _ => {
            tracing::warn!(file = %path.display(), "malformed cleaner checkpoint; the next compaction reads the whole partition");
            Default::default()
        }
    }
}

fn write_checkpoint(dir: &Path, cp: CleanerCheckpoint) -> Result<()> {
    let path = dir.join(CHECKPOINT);
    let tmp = dir.join(format!("{CHECKPOINT}.tmp"));
    let text = format!("{} {}\n", cp.clean_end, cp.oldest_tombstone);
    let mut f = fs::File::create(&tmp).map_err(|e| LogError::io("creating", &tmp, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| LogError::io("writing", &tmp, e))?;
    f.sync_all().map_err(|e| LogError::FsyncFailed {
        path: tmp.clone(),
        source: e,
    })?;
    crate::failpoint::hit("compact.checkpoint_tmp");
    fs::rename(&tmp, &path).map_err(|e| LogError::io("renaming", &tmp, e))?;
    crate::fsutil::sync_dir(dir)
}

/// A closed, fully durable segment: file, size in bytes, end offset.
struct Closed {
    file: Arc<SegmentFile>,
    size: u64,
    end: u64,
}

/// Returns (records removed, bytes reclaimed).
fn compact_partition(
    log: &Log,
    part: &Partition,
    options: &LogOptions,
    tombstone_horizon: i64,
) -> Result<(u64, u64)> {
    let _m = lock(&part.maintenance);
    // `Log::close` waits for this lock after marking the log closed; from here on, the
    // pass checks between batches and stops (`Err(Closed)`) with every file as a
    // completed step left it.
    log.check_not_closed()?;
    let closed = || log.should_stop();
    let stop_here = || -> Result<()> {
        if closed() {
            return Err(LogError::Closed(log.dir().to_path_buf()));
        }
        Ok(())
    };
    let segs: Vec<Closed> = {
        let st = part.lock();
        (0..st.segments.len().saturating_sub(1))
            .take_while(|&i| st.segment_end(i) <= st.hw)
            .map(|i| Closed {
                file: st.segments[i].file.clone(),
                size: st.segments[i].size,
                end: st.segment_end(i),
            })
            .collect()
    };
    let Some(last) = segs.last() else {
        return Ok((0, 0));
    };
    let mut cp = read_checkpoint(&part.dir);
    if cp.clean_end > last.end {
        // Not this log's (a restored or replaced directory): start over.
        cp = CleanerCheckpoint::default();
    }
    let first_dirty = segs
        .iter()
        .position(|s| s.end > cp.clean_end)
        .unwrap_or(segs.len());
    if first_dirty == segs.len() && cp.oldest_tombstone > tombstone_horizon {
        return Ok((0, 0));
    }
    // Pass 1: the key map over the dirty section, whole segments while they fit.
    let mut map = OffsetMap::new(options.cleaner_dedupe_bytes);
    let mut covered = first_dirty;
    for s in &segs[first_dirty..] {
        let mut fits = true;
        for_each_batch(&s.file, s.size, |_, _, recs| {
            if closed() {
                return Ok(false);
            }
            for r in &recs {
                if let Some(k) = &r.key {
                    if !map.put(k, r.offset) {
                        fits = false;
                        return Ok(false);
                    }
                }
            }
            Ok(true)
        })?;
        stop_here()?;
        if !fits {
            break;
        }
        covered += 1;
    }
    if covered == first_dirty && first_dirty < segs.len() {
        tracing::warn!(
            topic = %part.topic,
            partition = part.id,
            segment = %segs[first_dirty].file.path.display(),
            max_keys = map.max,
            "the cleaner's key map cannot hold the keys of one segment; this partition is not compacted until log.cleaner_dedupe_bytes (LogOptions::cleaner_dedupe_bytes) is raised"
        );
        if cp.oldest_tombstone > tombstone_horizon {
            return Ok((0, 0));
        }
    }
    // Pass 2: clean every segment up to the end of what the map covers.
    let keep = |r: &Record| match &r.key {
        None => true,
        Some(k) => {
            map.get(k).is_none_or(|newest| newest == r.offset)
                && (r.value.is_some() || r.timestamp > tombstone_horizon)
        }
    };
    let mut total_removed = 0u64;
    let mut reclaimed = 0u64;
    let mut oldest_tombstone = i64::MAX;
    let mut scratch = Vec::new();
    for s in &segs[..covered] {
        let mut removed = 0u64;
        for_each_batch(&s.file, s.size, |_, _, recs| {
            if closed() {
                return Ok(false);
            }
            for r in &recs {
                if !keep(r) {
                    removed += 1;
                } else if r.key.is_some() && r.value.is_none() {
                    oldest_tombstone = oldest_tombstone.min(r.timestamp);
                }
            }
            Ok(true)
        })?;
        stop_here()?;
        if removed == 0 {
            continue;
        }
        let Some((size, index)) = write_cleaned(&s.file, s.size, &keep, &mut scratch, &closed)?
        else {
            return Err(LogError::Closed(log.dir().to_path_buf()));
        };
        swap_segment(part, &s.file, size, index)?;
        crate::failpoint::hit("compact.swapped");
        total_removed += removed;
        let freed = s.size.saturating_sub(size);
        reclaimed += freed;
        log.metrics_ref()
            .total_bytes
            .fetch_sub(freed, std::sync::atomic::Ordering::Relaxed);
    }
    let clean_end = if covered > 0 {
        segs[covered - 1].end
    } else {
        cp.clean_end
    };
    write_checkpoint(
        &part.dir,
        CleanerCheckpoint {
            clean_end,
            oldest_tombstone,
        },
    )?;
    let m = log.metrics_ref();
    Metrics::add(&m.compaction_removed_records, total_removed);
    Metrics::add(&m.compaction_reclaimed_bytes, reclaimed);
    if total_removed > 0 {
        tracing::info!(topic = %part.topic, partition = part.id, removed = total_removed, reclaimed, "compacted partition");
    }
    Ok((total_removed, reclaimed))
}

fn cleaned_path(old: &SegmentFile) -> PathBuf {
    let mut cleaned = old.path.clone().into_os_string();
    cleaned.push(".cleaned");
    PathBuf::from(cleaned)
}

/// Step 1 of the swap: writes the survivors of `file` to `<base>.log.cleaned` one batch at
/// a time and fsyncs it; returns its size and index. A filtered batch keeps its base offset
/// and `lastOffsetDelta`; emptied batches are dropped except the segment's last one.
/// `None` when `stop` turned true between two batches: the `.cleaned` file is removed
/// again and the segment stays as it was.
fn write_cleaned(
    file: &SegmentFile,
    size: u64,
    keep: &dyn Fn(&Record) -> bool,
    scratch: &mut Vec<u8>,
    stop: &dyn Fn() -> bool,
) -> Result<Option<(u64, SegmentIndex)>> {
    let path = cleaned_path(file);
    let f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| LogError::io("creating", &path, e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, f);
    let mut index = SegmentIndex::default();
    let mut written = 0u64;
    let mut buf = Vec::new();
    // An emptied batch, written only if no later batch follows.
    let mut pending_empty: Option<Vec<u8>> = None;
    let put = |bytes: &[u8],
               out: &mut std::io::BufWriter<fs::File>,
               index: &mut SegmentIndex,
               written: &mut u64|
     -> Result<()> {
        let hh = crate::batch::BatchHeader::parse(bytes).map_err(|e| file.corrupt(0, 0, e))?;
        index.on_batch(
            (hh.base_offset - file.base_offset) as u32,
            *written as u32,
            bytes.len() as u64,
            hh.max_timestamp,
            (hh.last_offset() - file.base_offset) as u32,
            hh.records_count > 0,
        );
        out.write_all(bytes)
            .map_err(|e| LogError::io("writing", &path, e))?;
        *written += bytes.len() as u64;
        if crate::failpoint::is_armed("compact.cleaned_partial") {
            // The crash must find part of the file written, not only in this buffer.
            let _ = out.flush();
            crate::failpoint::hit("compact.cleaned_partial");
        }
        Ok(())
    };
    let mut stopped = false;
    for_each_batch(file, size, |h, slice, recs| {
        if stop() {
            stopped = true;
            return Ok(false);
        }
        let kept: Vec<&Record> = recs.iter().filter(|r| keep(r)).collect();
        let bytes: &[u8] = if kept.len() == recs.len() {
            slice
        } else {
            buf.clear();
            let comp = h.compression().unwrap_or_default();
            with_new_records(&kept, h.base_offset, |records, deltas| {
                encode_batch(
                    &mut buf,
                    h.base_offset,
                    records,
                    (!records.is_empty()).then_some(deltas),
                    Some(h.last_offset_delta),
                    comp,
                    scratch,
                )
            })?;
            &buf
        };
        if kept.is_empty() {
            pending_empty = Some(bytes.to_vec());
            return Ok(true);
        }
        pending_empty = None;
        put(bytes, &mut out, &mut index, &mut written)?;
        Ok(true)
    })?;
    if stopped {
        drop(out);
        remove_cleaned(&path)?;
        return Ok(None);
    }
    if let Some(last) = pending_empty.take() {
        put(&last, &mut out, &mut index, &mut written)?;
    }
    let f = out
        .into_inner()
        .map_err(|e| LogError::io("writing", &path, e.into_error()))?;
    f.sync_all().map_err(|e| LogError::FsyncFailed {
        path: path.clone(),
        source: e,
    })?;
    index.seal();
    crate::failpoint::hit("compact.cleaned_written");
    Ok(Some((written, index)))
}

fn remove_cleaned(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("removing", path, e)),
    }
}

/// Steps 2-5 of the swap (module docs): the cleaned file (`size` bytes, fsynced) replaces
/// `old`.
fn swap_segment(
    part: &Partition,
    old: &Arc<SegmentFile>,
    size: u64,
    index: SegmentIndex,
) -> Result<()> {
    let cleaned = cleaned_path(old);
    for p in [old.index_path(), old.time_index_path()] {
        match fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io("removing", &p, e)),
        }
    }
    crate::failpoint::hit("compact.index_removed");
    fs::rename(&cleaned, &old.path)
        .map_err(|e| LogError::io("renaming cleaned segment over", &old.path, e))?;
    crate::failpoint::hit("compact.renamed");
    let new_file = SegmentFile::open(old.path.clone(), old.base_offset)?;
    write_index_files(&new_file, &index)?;
    crate::failpoint::hit("compact.index_written");
    crate::fsutil::sync_dir(&part.dir)?;
    let mut st = part.lock();
    if let Some(seg) = st.segments.iter_mut().find(|s| Arc::ptr_eq(&s.file, old)) {
        seg.file = Arc::new(new_file);
        seg.index = index;
        seg.size = size;
        seg.synced_size = size;
        seg.durable_size = size;
    }
    st.epoch += 1;
    Ok(())
}
