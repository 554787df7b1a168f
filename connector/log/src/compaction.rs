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
//! Swap protocol per segment (crash-safe at every step):
//! 1. write `<base>.log.cleaned`, fsync it;
//! 2. delete the old `.index` / `.timeindex` (a crash now leaves the old log without
//!    index files, rebuilt on open);
//! 3. rename `.log.cleaned` over `.log` (atomic: a crash leaves the old or new log, both
//!    valid, holding the same surviving records' offsets);
//! 4. write + fsync the new index files; fsync the directory;
//! 5. under the partition lock, swap the segment's metadata and bump the epoch.
//!
//! Readers holding the old file keep reading its (unlinked) inode consistently.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{decode_into, encode_batch, with_new_records};
use crate::error::{LogError, Result};
use crate::index::SegmentIndex;
use crate::log::{Log, MaintenanceReport};
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
                "?"
            }
        )));
    }
    let mut r = MaintenanceReport::default();
    for p in 0..cfg.partitions {
        let part = log.partition(topic, p)?;
        let (removed, reclaimed) = compact_partition(log, &part, now - cfg.delete_retention_ms)?;
        Metrics::add(&log.metrics_ref().compaction_runs, 1);
        if removed > 0 {
            r.compacted_partitions += 1;
            r.removed_records += removed;
            r.reclaimed_bytes += reclaimed;
        }
    }
    Ok(r)
}

/// Calls `f` for each batch of `[0, size)` with its decoded records.
fn for_each_batch(
    file: &SegmentFile,
    size: u64,
    mut f: impl FnMut(crate::batch::BatchHeader, &[u8], Vec<Record>) -> Result<()>,
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
                f(h, slice, recs)?;
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

/// Returns (records removed, bytes reclaimed).
fn compact_partition(log: &Log, part: &Partition, tombstone_horizon: i64) -> Result<(u64, u64)> {
    let _m = lock(&part.maintenance);
    let segs: Vec<(Arc<SegmentFile>, u64)> = {
        let st = part.lock();
        (0..st.segments.len().saturating_sub(1))
            .take_while(|&i| st.segment_end(i) <= st.hw)
            .map(|i| (st.segments[i].file.clone(), st.segments[i].size))
            .collect()
    };
    if segs.is_empty() {
        return Ok((0, 0));
    }
    // Pass 1: newest offset of every key.
    let mut latest: HashMap<Bytes, u64> = HashMap::new();
    for (file, size) in &segs {
        for_each_batch(file, *size, |_, _, recs| {
            for r in recs {
                if let Some(k) = r.key {
                    latest.insert(k, r.offset);
                }
            }
            Ok(())
        })?;
    }
    // Pass 2: rewrite each segment that loses records.
    let keep = |r: &Record| match &r.key {
        None => true,
        Some(k) => {
            latest.get(k) == Some(&r.offset)
                && (r.value.is_some() || r.timestamp > tombstone_horizon)
        }
    };
    let mut total_removed = 0u64;
    let mut reclaimed = 0u64;
    let mut out = Vec::new();
    let mut scratch = Vec::new();
    for (file, size) in &segs {
        let mut removed = 0u64;
        let mut batches: Vec<(crate::batch::BatchHeader, bool, Vec<u8>)> = Vec::new();
        let mut any = false;
        for_each_batch(file, *size, |h, slice, recs| {
            let kept: Vec<&Record> = recs.iter().filter(|r| keep(r)).collect();
            removed += (recs.len() - kept.len()) as u64;
            if kept.len() == recs.len() {
                batches.push((h, !recs.is_empty(), slice.to_vec()));
                return Ok(());
            }
            any = true;
            let mut buf = Vec::new();
            let comp = h.compression().unwrap_or_default();
            with_new_records(&kept, h.base_offset, |records, deltas| {
                if records.is_empty() {
                    encode_batch(
                        &mut buf,
                        h.base_offset,
                        &[],
                        None,
                        Some(h.last_offset_delta),
                        comp,
                        &mut scratch,
                    )
                } else {
                    encode_batch(
                        &mut buf,
                        h.base_offset,
                        records,
                        Some(deltas),
                        Some(h.last_offset_delta),
                        comp,
                        &mut scratch,
                    )
                }
            })?;
            let has = !kept.is_empty();
            batches.push((h, has, buf));
            Ok(())
        })?;
        if !any {
            continue;
        }
        // Drop emptied batches except the last one.
        let n = batches.len();
        let mut index = SegmentIndex::default();
        out.clear();
        for (i, (h, has_records, bytes)) in batches.into_iter().enumerate() {
            if !has_records && i + 1 < n {
                continue;
            }
            let hh = crate::batch::BatchHeader::parse(&bytes)
                .map_err(|e| file.corrupt(0, h.base_offset, e))?;
            index.on_batch(
                (hh.base_offset - file.base_offset) as u32,
                out.len() as u32,
                bytes.len() as u64,
                hh.max_timestamp,
                (hh.last_offset() - file.base_offset) as u32,
                hh.records_count > 0,
            );
            out.extend_from_slice(&bytes);
        }
        index.seal();
        swap_segment(part, file, &out, index)?;
        total_removed += removed;
        reclaimed += size.saturating_sub(out.len() as u64);
        let m = log.metrics_ref();
        m.total_bytes.fetch_sub(
            size.saturating_sub(out.len() as u64),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    let m = log.metrics_ref();
    Metrics::add(&m.compaction_removed_records, total_removed);
    Metrics::add(&m.compaction_reclaimed_bytes, reclaimed);
    if total_removed > 0 {
        tracing::info!(topic = %part.topic, partition = part.id, removed = total_removed, reclaimed, "compacted partition");
    }
    Ok((total_removed, reclaimed))
}

fn swap_segment(
    part: &Partition,
    old: &Arc<SegmentFile>,
    bytes: &[u8],
    index: SegmentIndex,
) -> Result<()> {
    let mut cleaned = old.path.clone().into_os_string();
    cleaned.push(".cleaned");
    let cleaned = std::path::PathBuf::from(cleaned);
    let f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&cleaned)
        .map_err(|e| LogError::io("creating", &cleaned, e))?;
    f.write_all_at(bytes, 0)
        .map_err(|e| LogError::io("writing", &cleaned, e))?;
    f.sync_all().map_err(|e| LogError::FsyncFailed {
        path: cleaned.clone(),
        source: e,
    })?;
    drop(f);
    for p in [old.index_path(), old.time_index_path()] {
        match fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io("removing", &p, e)),
        }
    }
    fs::rename(&cleaned, &old.path)
        .map_err(|e| LogError::io("renaming cleaned segment over", &old.path, e))?;
    let new_file = SegmentFile::open(old.path.clone(), old.base_offset)?;
    write_index_files(&new_file, &index)?;
    crate::fsutil::sync_dir(&part.dir)?;
    let size = bytes.len() as u64;
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
