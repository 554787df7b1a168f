//! The read-only refresh of a partition (`Partition::refresh_read_only`): a partition
//! opened read-only catching up with the writer of another process, to the mark the
//! writer's ledger now records (`Log::refresh` reads it).
//!
//! Invariants: nothing on disk changes, and the view never goes past the ledger's durable
//! end. Only the new bytes of the last segment are scanned, from its durable size, and only
//! as batches that continue the offsets gaplessly (the writer's active segment may be a
//! recycled file whose stale batches lie past what it wrote), up to the durable end or the
//! next segment's base; a segment that falls short of that is `DurableDataLost` (which
//! `Log::refresh` retries when it raced with the writer's retention). Segments that leave
//! the view below the new log start bump `epoch`, so readers re-locate their position.
//!
//! A refresh is all or nothing: it scans into a plan (the last segment's new batches, the
//! segments to add) without touching the partition's state, and applies the plan only
//! once every scan succeeded. A failed refresh (a race with the writer, which its caller
//! retries, or real damage) leaves the view exactly as it was, still consistent: its
//! segments end at its high watermark, so a retry scans from there again. (Applying scans
//! as they went once left a failed refresh with new segments but the old high watermark;
//! every retry then scanned the new last segment for the old end and failed, reporting
//! data loss that was not there.)
//!
//! The writer may cut a segment file while the view reads it: a roll cuts a recycled
//! file's stale tail (or a flush's padding) off the segment it closes. A scan bounded by
//! the length it statted before then reads past the new end (a short read); it stats the
//! file again and scans on to the new length, which is past every durable byte.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::recovery::list_bases;
use super::{Partition, PartitionState, SegmentMeta};
use crate::error::{LogError, Result};
use crate::index::SegmentIndex;
use crate::ledger::PartitionMark;
use crate::segment::{BatchScanner, ScanStop, SegmentFile};

/// One batch a scan found, as `SegmentIndex::on_batch` takes it.
struct Found {
    rel_base: u32,
    position: u32,
    len: u64,
    max_timestamp: i64,
    rel_of_max_ts: u32,
    has_records: bool,
}

impl Found {
    fn index(&self, index: &mut SegmentIndex) {
        index.on_batch(
            self.rel_base,
            self.position,
            self.len,
            self.max_timestamp,
            self.rel_of_max_ts,
            self.has_records,
        );
    }
}

/// What one scan of a segment found past its durable size.
struct Extension {
    batches: Vec<Found>,
    /// The segment's new durable size.
    size: u64,
    /// The offset after the last batch taken.
    end: u64,
}

/// Read-only refresh: scans `file` from byte `from`, where offset `cur_end` must start,
/// up to its current length, stopping at the first batch at or past `stop_at`. Reads
/// nothing into the partition: the caller applies the result.
fn extend_scan(file: &SegmentFile, from: u64, cur_end: u64, stop_at: u64) -> Result<Extension> {
    let mut ext = Extension {
        batches: Vec::new(),
        size: from,
        end: cur_end,
    };
    let mut limit = file.len()?;
    #[cfg(test)]
    super::race::before_scan(file.base_offset);
    'rescan: loop {
        // Gapless from the current end: the writer's active segment may be a recycled
        // file whose stale batches lie past what it wrote.
        let mut sc = BatchScanner::contiguous_from(file, ext.size, limit, ext.end);
        loop {
            match sc.next_batch() {
                Ok(None) | Err(ScanStop::Bad { .. }) => break 'rescan,
                Ok(Some((pos, h, _))) => {
                    if h.base_offset >= stop_at || h.next_offset() > stop_at {
                        break 'rescan;
                    }
                    ext.batches.push(Found {
                        rel_base: (h.base_offset - file.base_offset) as u32,
                        position: pos as u32,
                        len: h.total_len() as u64,
                        max_timestamp: h.max_timestamp,
                        rel_of_max_ts: (h.last_offset() - file.base_offset) as u32,
                        has_records: h.records_count > 0,
                    });
                    ext.end = h.next_offset();
                    ext.size = pos + h.total_len() as u64;
                }
                // The file is shorter than it was when statted: the writer cut it (see the
                // module docs). Scan on to its length now; each round only shortens the
                // limit, so this ends. A file that did not shrink ends the scan, and
                // falling short of the durable end is `DurableDataLost`.
                Err(ScanStop::Io(LogError::Io { source, .. }))
                    if source.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    let now = file.len()?;
                    if now >= limit {
                        break 'rescan;
                    }
                    limit = now;
                    continue 'rescan;
                }
                Err(ScanStop::Io(e)) => return Err(e),
            }
        }
    }
    Ok(ext)
}

/// A refresh's changes to a partition, applied only once all of it was read.
struct Plan {
    /// The view's segments all lie below the new log start: they are replaced.
    restart: bool,
    /// New batches of the view's last segment (unless `restart`).
    last: Option<Extension>,
    /// Segments to add after it, scanned, the last one still open.
    added: Vec<SegmentMeta>,
}

impl Partition {
    /// Segment `base` of a read-only view, opened but not scanned yet (size 0).
    fn unscanned_read_only(&self, base: u64) -> Result<SegmentMeta> {
        let file =
            SegmentFile::open_read_only(self.dir.join(crate::segment::log_file_name(base)), base)?;
        Ok(SegmentMeta {
            file: Arc::new(file),
            index: SegmentIndex::default(),
            size: 0,
            synced_size: 0,
            durable_size: 0,
        })
    }

    /// Read-only partitions: catches up with a writer in another process whose ledger
    /// now says `mark`. Drops segments below the new log start, extends the last segment
    /// (scanning only the new bytes) and adds segments the writer rolled, up to the new
    /// durable end; wakes this process's tailing readers. On error nothing changed.
    pub fn refresh_read_only(&self, mark: PartitionMark) -> Result<()> {
        let mut guard = self.lock();
        let st = &mut *guard;
        if mark.durable_end == st.hw && mark.log_start == st.log_start {
            return Ok(());
        }
        let d = mark.durable_end;
        let plan = if d > st.hw {
            Some(self.plan_extension(st, mark)?)
        } else {
            None
        };
        // Everything was read: apply it.
        if mark.log_start > st.log_start {
            let k = st.segment_for(mark.log_start);
            if k > 0 {
                st.segments.drain(..k);
                st.epoch += 1;
            }
            st.log_start = mark.log_start;
        }
        if let Some(plan) = plan {
            if plan.restart {
                st.segments.clear();
                st.epoch += 1;
            }
            if let (Some(ext), Some(seg)) = (plan.last, st.segments.last_mut()) {
                for b in &ext.batches {
                    b.index(&mut seg.index);
                }
                seg.size = ext.size;
                seg.synced_size = ext.size;
                seg.durable_size = ext.size;
                if !plan.added.is_empty() {
                    seg.index.seal();
                }
            }
            st.segments.extend(plan.added);
            st.hw = d;
            st.leo = d;
            self.hw.store(d, Ordering::Release);
        }
        drop(guard);
        self.notifier.notify_all();
        Ok(())
    }

    /// Reads what extending the view to `mark` (whose durable end is past the view's high
    /// watermark) takes, changing nothing in `st`.
    fn plan_extension(&self, st: &PartitionState, mark: PartitionMark) -> Result<Plan> {
        let d = mark.durable_end;
        let last_base = st.segments.last().map_or(0, |s| s.base());
        let mut newer: Vec<u64> = list_bases(&self.dir, false)?
            .into_iter()
            .filter(|&b| b > last_base && b <= d)
            .collect();
        let mut plan = Plan {
            restart: false,
            last: None,
            added: Vec::new(),
        };
        // The writer's retention outran this view: every segment it holds lies below the
        // new log start (their files are deleted, or recycled and overwritten: never to
        // be scanned again). Restart the view at the newest segment at or below it.
        if let Some(&b0) = newer.iter().rev().find(|&&b| b <= mark.log_start) {
            plan.restart = true;
            plan.added.push(self.unscanned_read_only(b0)?);
            newer.retain(|&b| b > b0);
        }
        let mut following = newer.into_iter();
        loop {
            let next_base = following.next();
            let stop_at = next_base.unwrap_or(d);
            let (file, ext) = match plan.added.last_mut() {
                Some(seg) => {
                    let ext = extend_scan(&seg.file, 0, seg.base(), stop_at)?;
                    for b in &ext.batches {
                        b.index(&mut seg.index);
                    }
                    seg.size = ext.size;
                    seg.synced_size = ext.size;
                    seg.durable_size = ext.size;
                    if next_base.is_some() {
                        seg.index.seal();
                    }
                    (seg.file.clone(), ext.end)
                }
                None => {
                    let Some(seg) = st.segments.last() else {
                        break;
                    };
                    let ext = extend_scan(&seg.file, seg.durable_size, st.hw, stop_at)?;
                    let end = ext.end;
                    plan.last = Some(ext);
                    (seg.file.clone(), end)
                }
            };
            if ext < stop_at {
                return Err(LogError::DurableDataLost {
                    topic: self.topic.clone(),
                    partition: self.id,
                    ledger_end: d,
                    found_end: ext,
                    detail: format!(
                        "{} ends at offset {ext} (read-only refresh)",
                        file.path.display()
                    ),
                });
            }
            let Some(nb) = next_base else { break };
            plan.added.push(self.unscanned_read_only(nb)?);
        }
        Ok(plan)
    }
}
