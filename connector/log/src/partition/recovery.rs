//! Recovery of a partition on open (`Partition::open`), and the segment scans it is made
//! of.
//!
//! Given the ledger's `log_start` S and `durable_end` D, segments whose base is > D hold
//! only unflushed data and are deleted; segments wholly below S are leftovers of an
//! interrupted retention and are deleted; recycle-pool files are kept up to the bound, the
//! rest deleted; the last remaining segment is scanned batch by batch (CRC-checked, and
//! each batch must continue the previous one's offsets exactly: a recycled file's stale
//! batches have valid CRCs but other offsets) and cut at the first batch at or past D (the
//! ledger, not a valid-looking batch, says what is durable) or at the first
//! torn/corrupt/discontinuous batch (zeros from there up to the next 4 KiB boundary are the
//! padding of a flush's last `O_DIRECT` write, `stage.rs`: left in place for the stage to
//! write over, not cut or reported); if that leaves it short of D, fsynced data is gone and
//! open fails with `DurableDataLost` (unless `accept_damaged_tail`). Closed segments keep
//! their index files if those pass their checks (else are rebuilt by a full scan) and get a
//! cheap tail check: the bytes from the last index entry to the end of file must be whole
//! valid batches ending exactly at the next segment's base offset. A failure there is a
//! `CorruptSegment` error naming the file, byte and offset. Corruption deeper inside a
//! closed segment is found when it is read (or by `Log::verify`) and is the same error.
//!
//! A read-only open runs the same checks but changes nothing on disk: the partition ends at
//! the ledger's durable end, and files past it or below the log start are ignored (their
//! writer, in another process, may be changing them).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{remove_file_if_exists, remove_segment_files, write_index_files};
use super::{Partition, PartitionState, SegmentMeta};
use crate::error::{LogError, Result};
use crate::index::SegmentIndex;
use crate::ledger::PartitionMark;
use crate::log::LogOptions;
use crate::recycle;
use crate::segment::{parse_file_name, BatchScanner, ScanStop, SegmentFile};
use crate::stage::Stage;

/// What recovery cut or removed in one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub truncated_bytes: u64,
    pub removed_segments: u64,
    pub rebuilt_indexes: u64,
    /// Set when `accept_damaged_tail` let open cut the ledger's durable end back.
    pub durable_end_cut_to: Option<u64>,
    pub log_start_moved_to: Option<u64>,
    /// With `measure_cut`: the offset after the last record of the gapless valid batches
    /// found from the durable end on, before they were cut (`durable end..this` were on
    /// disk and went). Measured when the ledger fell back to its older slot, to say what
    /// that cost.
    pub valid_end_before_cut: Option<u64>,
}

/// The offset after the gapless valid batches that continue the partition from its
/// segments' start through `d` and beyond it (segments in `bases`, scanned whole and
/// read only). `d` itself when nothing valid follows it.
fn valid_end_past(dir: &Path, bases: &[u64], d: u64) -> Result<u64> {
    let Some(first) = bases.partition_point(|&b| b <= d).checked_sub(1) else {
        return Ok(d);
    };
    let mut next = None::<u64>;
    for &b in &bases[first..] {
        if next.is_some_and(|n| n != b) {
            break;
        }
        let f = SegmentFile::open_read_only(dir.join(crate::segment::log_file_name(b)), b)?;
        let size = f.len()?;
        let (_, _, end, stop) = scan_segment(&f, size, u64::MAX, true)?;
        next = Some(end);
        if stop.is_some() {
            break;
        }
    }
    Ok(next.unwrap_or(d).max(d))
}

/// Segment base offsets in a partition directory, sorted; with `clean`, removes leftover
/// `*.tmp` / `*.cleaned` files.
pub(super) fn list_bases(dir: &Path, clean: bool) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    let rd = fs::read_dir(dir).map_err(|e| LogError::io("listing", dir, e))?;
    for ent in rd {
        let ent = ent.map_err(|e| LogError::io("listing", dir, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        match parse_file_name(name) {
            Some((base, "log")) => bases.push(base),
            Some((_, "index" | "timeindex")) => {}
            _ if clean && (name.ends_with(".tmp") || name.ends_with(".cleaned")) => {
                remove_file_if_exists(&ent.path())?;
            }
            _ => {}
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// (index, valid bytes, next offset, where and why the scan stopped early if it did)
pub type ScanOutcome = (SegmentIndex, u64, u64, Option<(u64, String)>);

/// Scans `[0, limit)` of a segment building its index; stops at `stop_at` (first batch
/// whose base offset is >= it) or at the first bad batch. Returns (index, valid bytes,
/// next offset, why it stopped early if it did).
/// With `contiguous`, a batch that does not continue the previous one's offsets exactly is
/// a bad batch (the active segment: see `BatchScanner::contiguous`).
pub fn scan_segment(
    file: &SegmentFile,
    limit: u64,
    stop_at: u64,
    contiguous: bool,
) -> Result<ScanOutcome> {
    let mut idx = SegmentIndex::default();
    let mut sc = if contiguous {
        BatchScanner::contiguous_from(file, 0, limit, file.base_offset)
    } else {
        BatchScanner::new(file, 0, limit)
    };
    let mut next = file.base_offset;
    loop {
        match sc.next_batch() {
            Ok(None) => return Ok((idx, limit, next, None)),
            Ok(Some((pos, h, _))) => {
                if h.base_offset >= stop_at {
                    return Ok((idx, pos, next, None));
                }
                if h.next_offset() > stop_at {
                    return Ok((
                        idx,
                        pos,
                        next,
                        Some((
                            pos,
                            format!(
                                "batch {}..={} straddles the durable end {stop_at}",
                                h.base_offset,
                                h.last_offset()
                            ),
                        )),
                    ));
                }
                let rel = (h.base_offset - file.base_offset) as u32;
                let rel_max = (h.last_offset() - file.base_offset) as u32;
                idx.on_batch(
                    rel,
                    pos as u32,
                    h.total_len() as u64,
                    h.max_timestamp,
                    rel_max,
                    h.records_count > 0,
                );
                next = h.next_offset();
            }
            Err(ScanStop::Io(e)) => return Err(e),
            Err(ScanStop::Bad { position, reason }) => {
                return Ok((idx, position, next, Some((position, reason.to_string()))))
            }
        }
    }
}

impl Partition {
    /// Opens and recovers a partition directory against its ledger mark (see module docs).
    /// `read_only`: changes nothing on disk (no cut, no delete, no index written); the
    /// partition ends at the ledger's durable end; files past it or below the log start are
    /// ignored (another process may be writing them).
    /// `measure_cut`: also measure what the cut past the durable end removes
    /// (`RecoveryReport::valid_end_before_cut`; reads the whole active segment).
    pub fn open(
        topic: &str,
        id: u32,
        dir: PathBuf,
        mark: PartitionMark,
        options: &LogOptions,
        measure_cut: bool,
    ) -> Result<(Partition, RecoveryReport)> {
        let LogOptions {
            accept_damaged_tail,
            read_only,
            recycle_segments: recycle_limit,
            write_behind,
            ..
        } = *options;
        let mut report = RecoveryReport::default();
        let (mut s, mut d) = (mark.log_start, mark.durable_end);
        if !read_only {
            fs::create_dir_all(&dir)
                .map_err(|e| LogError::io("creating partition directory", &dir, e))?;
        }
        let open_seg = |path: PathBuf, base: u64| {
            if read_only {
                SegmentFile::open_read_only(path, base)
            } else {
                SegmentFile::open(path, base)
            }
        };
        let mut bases = list_bases(&dir, !read_only)?;
        let (pool, mut changed_dir) = recycle::load(&dir, recycle_limit, read_only)?;
        if measure_cut {
            report.valid_end_before_cut = Some(valid_end_past(&dir, &bases, d)?);
        }
        // Segments created after the last flush.
        while bases.last().is_some_and(|&b| b > d) {
            let b = bases.pop().unwrap_or_default();
            if read_only {
                continue;
            }
            let f = SegmentFile::open(dir.join(crate::segment::log_file_name(b)), b)?;
            report.truncated_bytes += f.len()?;
            report.removed_segments += 1;
            remove_segment_files(&f)?;
            changed_dir = true;
        }
        // Leftovers of an interrupted retention.
        while bases.len() >= 2 && bases[1] <= s {
            let b = bases.remove(0);
            if read_only {
                continue;
            }
            let f = SegmentFile::open(dir.join(crate::segment::log_file_name(b)), b)?;
            remove_segment_files(&f)?;
            changed_dir = true;
        }
        if bases.first().is_some_and(|&b| b > s) || (bases.is_empty() && d > s) {
            let found = bases.first().copied().unwrap_or(s);
            if !accept_damaged_tail && !read_only {
                return Err(LogError::DurableDataLost {
                    topic: topic.into(),
                    partition: id,
                    ledger_end: d,
                    found_end: s,
                    detail: format!(
                        "the segments before offset {found} are missing (log start is {s})"
                    ),
                });
            }
            // Read-only: the writer's retention deleted them after we read the ledger.
            s = found;
            d = d.max(s);
            report.log_start_moved_to = Some(s);
        }
        if bases.is_empty() {
            if read_only {
                return Err(LogError::DurableDataLost {
                    topic: topic.into(),
                    partition: id,
                    ledger_end: d,
                    found_end: s,
                    detail: format!("{} holds no segment", dir.display()),
                });
            }
            bases.push(s);
            SegmentFile::create(&dir, s)?;
            changed_dir = true;
        }

        let mut segments = Vec::with_capacity(bases.len());
        let mut active_file_len = 0;
        let n = bases.len();
        for (i, &base) in bases.iter().enumerate() {
            let file = open_seg(dir.join(crate::segment::log_file_name(base)), base)?;
            let size = file.len()?;
            #[cfg(test)]
            super::race::before_scan(base);
            if i + 1 < n {
                let next_base = bases[i + 1];
                let (index, rebuilt) = load_closed_index(&file, size, next_base, !read_only)?;
                report.rebuilt_indexes += rebuilt as u64;
                segments.push(SegmentMeta {
                    file: Arc::new(file),
                    index,
                    size,
                    synced_size: size,
                    durable_size: size,
                });
                continue;
            }
            // The last segment: scan, cut at the durable end or the first bad batch. The
            // batches must be gapless: the file may be a recycled one (stale batches).
            let (index, valid, next, stop) = scan_segment(&file, size, d, true)?;
            if next < d {
                let detail = match &stop {
                    Some((pos, why)) => format!("{} at byte {pos}: {why}", file.path.display()),
                    None => format!("{} ends at byte {size}", file.path.display()),
                };
                if !accept_damaged_tail {
                    return Err(LogError::DurableDataLost {
                        topic: topic.into(),
                        partition: id,
                        ledger_end: d,
                        found_end: next,
                        detail,
                    });
                }
                tracing::error!(topic, partition = id, ledger_end = d, found_end = next, %detail,
                    "durable data lost; cutting the ledger back as accept_damaged_tail allows");
                d = next;
                report.durable_end_cut_to = Some(next);
            }
            // Zeros after the last batch, up to the next block boundary, are the padding of
            // the flush's last O_DIRECT write (`stage.rs`): the end of the data, not damage.
            // The stage writes over them; they are neither cut nor reported.
            let padding = crate::stage::is_padding(&file, valid, size)?;
            if let (Some((pos, why)), false) = (&stop, padding) {
                // Bad bytes past the durable end: an unflushed, torn tail. Expected after a crash.
                tracing::debug!(topic, partition = id, position = pos, reason = %why, "torn tail past durable end");
            }
            active_file_len = if padding { size } else { valid };
            if valid < size && !padding && !read_only {
                report.truncated_bytes += size - valid;
                file.file
                    .set_len(valid)
                    .map_err(|e| LogError::io("truncating torn tail of", &file.path, e))?;
                file.file.sync_all().map_err(|e| LogError::FsyncFailed {
                    path: file.path.clone(),
                    source: e,
                })?;
            }
            if !read_only {
                // The active segment's index lives in memory; stale files must not survive.
                remove_file_if_exists(&file.index_path())?;
                remove_file_if_exists(&file.time_index_path())?;
            }
            segments.push(SegmentMeta {
                file: Arc::new(file),
                index,
                size: valid,
                synced_size: valid,
                durable_size: valid,
            });
        }
        if changed_dir {
            crate::fsutil::sync_dir(&dir)?;
        }
        let roll_ts = match segments.last() {
            Some(seg) if seg.size > 0 => {
                let mut head = [0u8; crate::batch::HEADER_LEN];
                seg.file.read_exact_at(&mut head, 0)?;
                crate::batch::BatchHeader::parse(&head)
                    .ok()
                    .map(|h| h.max_timestamp)
            }
            _ => None,
        };
        let leo = d;
        let mut stage = match segments.last() {
            Some(seg) if !read_only => Stage::resume(&seg.file, seg.size, active_file_len)?,
            _ => Stage::new(),
        };
        stage.set_write_behind(write_behind);
        let st = PartitionState {
            segments,
            log_start: s,
            leo,
            hw: leo,
            epoch: 0,
            dir_dirty: false,
            poisoned: None,
            stage,
            scratch: Vec::new(),
            roll_ts,
            pool,
            // Recovery cut the active segment's file to its valid bytes.
            active_stale: 0,
            idle_mark: leo,
        };
        Ok((Partition::from_state(topic, id, dir, st), report))
    }
}

/// Loads (or rebuilds) a closed segment's index, then checks its tail: the batches from
/// the last index entry must run exactly to the end of the file and end at `next_base`.
fn load_closed_index(
    file: &SegmentFile,
    size: u64,
    next_base: u64,
    write: bool,
) -> Result<(SegmentIndex, bool)> {
    if size == 0 {
        return Err(file.corrupt(0, file.base_offset, "closed segment is empty"));
    }
    let offs = crate::fsutil::read_optional(&file.index_path())?;
    let times = crate::fsutil::read_optional(&file.time_index_path())?;
    let loaded = match (offs, times) {
        (Some(o), Some(t)) => SegmentIndex::decode(&o, &t, size).ok(),
        _ => None,
    };
    let (index, rebuilt) = match loaded {
        Some(i) => (i, false),
        None => return rebuild_closed_index(file, size, next_base, write),
    };
    let start = index.offsets.last().map_or(0, |&(_, p)| p as u64);
    let mut sc = BatchScanner::new(file, start, size);
    let mut last_next = None;
    let mut tail_max_ts: Option<i64> = None;
    let mut first = true;
    loop {
        match sc.next_batch() {
            Ok(None) => break,
            Ok(Some((_, h, _))) => {
                if first {
                    first = false;
                    let want = index
                        .offsets
                        .last()
                        .map_or(file.base_offset, |&(o, _)| file.base_offset + o as u64);
                    if h.base_offset != want {
                        // The index does not match the file: rebuild it.
                        return rebuild_closed_index(file, size, next_base, write);
                    }
                }
                if h.records_count > 0 {
                    tail_max_ts =
                        Some(tail_max_ts.map_or(h.max_timestamp, |t| t.max(h.max_timestamp)));
                }
                last_next = Some(h.next_offset());
            }
            Err(ScanStop::Io(e)) => return Err(e),
            Err(ScanStop::Bad { position, reason }) => {
                return Err(file.corrupt(position, last_next.unwrap_or(file.base_offset), reason));
            }
        }
    }
    if last_next != Some(next_base) {
        return Err(file.corrupt(
            size,
            last_next.unwrap_or(file.base_offset),
            format!(
                "closed segment ends at offset {} but the next segment starts at {next_base}",
                last_next.map_or("?".to_string(), |o| o.to_string())
            ),
        ));
    }
    // A time index cut short would understate the segment's newest timestamp (and let
    // time retention delete it early): its last entry must cover the tail's timestamps.
    if tail_max_ts.is_some_and(|t| index.max_timestamp.is_none_or(|(m, _)| m < t)) {
        return rebuild_closed_index(file, size, next_base, write);
    }
    Ok((index, rebuilt))
}

fn rebuild_closed_index(
    file: &SegmentFile,
    size: u64,
    next_base: u64,
    write: bool,
) -> Result<(SegmentIndex, bool)> {
    let (mut idx, _, next, stop) = scan_segment(file, size, u64::MAX, false)?;
    if let Some((pos, why)) = stop {
        return Err(file.corrupt(pos, guess_offset(file, &idx), why));
    }
    if next != next_base {
        return Err(file.corrupt(
            size,
            next,
            format!(
                "closed segment ends at offset {next} but the next segment starts at {next_base}"
            ),
        ));
    }
    idx.seal();
    if write {
        tracing::warn!(file = %file.path.display(), "rebuilt missing or invalid index of closed segment");
        write_index_files(file, &idx)?;
    }
    Ok((idx, true))
}

fn guess_offset(file: &SegmentFile, idx: &SegmentIndex) -> u64 {
    idx.offsets
        .last()
        .map_or(file.base_offset, |&(o, _)| file.base_offset + o as u64)
}
