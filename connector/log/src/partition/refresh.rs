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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::recovery::list_bases;
use super::{Partition, SegmentMeta};
use crate::error::{LogError, Result};
use crate::index::SegmentIndex;
use crate::ledger::PartitionMark;
use crate::segment::{BatchScanner, ScanStop, SegmentFile};

/// Read-only refresh: scans `seg` from its durable size up to `limit` bytes, stopping at
/// the first batch at or past `stop_at`, extending its index and sizes. Returns the offset
/// after the last batch taken.
fn extend_scan(seg: &mut SegmentMeta, cur_end: u64, limit: u64, stop_at: u64) -> Result<u64> {
    let file = seg.file.clone();
    // Gapless from the current end: the writer's active segment may be a recycled file
    // whose stale batches lie past what it wrote.
    let mut sc = BatchScanner::contiguous_from(&file, seg.durable_size, limit, cur_end);
    let mut next = cur_end;
    let mut pos_end = seg.durable_size;
    loop {
        match sc.next_batch() {
            Ok(None) | Err(ScanStop::Bad { .. }) => break,
            Ok(Some((pos, h, _))) => {
                if h.base_offset >= stop_at || h.next_offset() > stop_at {
                    break;
                }
                seg.index.on_batch(
                    (h.base_offset - file.base_offset) as u32,
                    pos as u32,
                    h.total_len() as u64,
                    h.max_timestamp,
                    (h.last_offset() - file.base_offset) as u32,
                    h.records_count > 0,
                );
                next = h.next_offset();
                pos_end = pos + h.total_len() as u64;
            }
            // The writer cut the file under the read (a roll trims a recycled file's
            // stale tail): the scan ends here; falling short of the durable end is
            // `DurableDataLost`, which `Log::refresh` retries with the file as it is now.
            Err(ScanStop::Io(LogError::Io { source, .. }))
                if source.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                break
            }
            Err(ScanStop::Io(e)) => return Err(e),
        }
    }
    seg.size = pos_end;
    seg.synced_size = pos_end;
    seg.durable_size = pos_end;
    Ok(next)
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
    /// durable end; wakes this process's tailing readers.
    pub fn refresh_read_only(&self, mark: PartitionMark) -> Result<()> {
        let mut guard = self.lock();
        let st = &mut *guard;
        if mark.durable_end == st.hw && mark.log_start == st.log_start {
            return Ok(());
        }
        if mark.log_start > st.log_start {
            let k = st
                .segments
                .partition_point(|s| s.base() <= mark.log_start)
                .saturating_sub(1);
            if k > 0 {
                st.segments.drain(..k);
                st.epoch += 1;
            }
            st.log_start = mark.log_start;
        }
        let d = mark.durable_end;
        if d > st.hw {
            let last_base = st.segments.last().map_or(0, |s| s.base());
            let mut newer: Vec<u64> = list_bases(&self.dir, false)?
                .into_iter()
                .filter(|&b| b > last_base && b <= d)
                .collect();
            let mut cur_end = st.hw;
            // The writer's retention outran this view: every segment it holds lies below the
            // new log start (their files are deleted, or recycled and overwritten: never to
            // be scanned again). Restart the view at the newest segment at or below it.
            if let Some(&b0) = newer.iter().rev().find(|&&b| b <= mark.log_start) {
                st.segments.clear();
                st.segments.push(self.unscanned_read_only(b0)?);
                st.epoch += 1;
                newer.retain(|&b| b > b0);
                cur_end = b0;
            }
            let mut following = newer.into_iter();
            loop {
                let next_base = following.next();
                let stop_at = next_base.unwrap_or(d);
                let Some(seg) = st.segments.last_mut() else {
                    break;
                };
                let limit = seg.file.len()?;
                let end = extend_scan(seg, cur_end, limit, stop_at)?;
                if end < stop_at {
                    return Err(LogError::DurableDataLost {
                        topic: self.topic.clone(),
                        partition: self.id,
                        ledger_end: d,
                        found_end: end,
                        detail: format!(
                            "{} ends at offset {end} (read-only refresh)",
                            seg.file.path.display()
                        ),
                    });
                }
                let Some(nb) = next_base else { break };
                seg.index.seal();
                st.segments.push(self.unscanned_read_only(nb)?);
                cur_end = nb;
            }
            st.hw = d;
            st.leo = d;
            self.hw.store(d, Ordering::Release);
        }
        drop(guard);
        self.notifier.notify_all();
        Ok(())
    }
}
