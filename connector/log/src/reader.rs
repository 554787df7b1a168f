//! Readers: sequential consumption of one partition from an offset, a time, the start or
//! the end, with blocking and async waits for new durable records. Owns no file; reads
//! segments through positional I/O and the partition's indexes.
//!
//! Invariants: a reader returns only records below the high watermark (it reads a
//! segment only up to its `durable_size`), in offset order, each once. It remembers its
//! byte position between polls and re-locates through the index whenever the partition's
//! `epoch` changed (retention or the cleaner replaced segments). A corrupt batch is a
//! `CorruptSegment` error naming file, byte and offset; it is never skipped.
//!
//! Every batch read must lie in its segment's offset range (base offset at or after the
//! segment's base, before the next segment's base or the log end). In this process a
//! segment file is never reused while a reader holds it (`recycle.rs`), but a read-only
//! process can hold a segment the writer has since dropped and recycled: its bytes are
//! then another segment's, whose offsets lie past this one's range. On such a batch (or
//! any read error) a read-only reader re-reads the ledger
//! ([`Log::refresh`]) and, if the log start moved past its position, handles that as an
//! out-of-range offset (its reset policy), like a delete that outran it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::batch::{decode_into, records_section, BatchHeader, RecordIter, RecordRef, HEADER_LEN};
use crate::error::{LogError, Result};
use crate::log::Log;
use crate::notify::Notified;
use crate::partition::Partition;
use crate::record::Record;
use crate::segment::{BatchScanner, ScanStop, SegmentFile};

/// Where a reader starts (or a group is reset to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// This offset exactly.
    Offset(u64),
    /// The first offset whose record timestamp is >= this (ms); the end if none.
    Timestamp(i64),
    /// The log start offset.
    Earliest,
    /// The high watermark: only records appended (and flushed) from now on.
    Latest,
}

/// What a reader does when its offset is out of range (Kafka's `auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResetPolicy {
    Earliest,
    Latest,
    /// Surface `OffsetOutOfRange` to the caller.
    #[default]
    None,
}

struct Cursor {
    epoch: u64,
    file: Arc<SegmentFile>,
    pos: u64,
}

/// Reads one partition. `Send`; one reader per consumer thread/task.
pub struct Reader {
    log: Log,
    part: Arc<Partition>,
    next: u64,
    reset: ResetPolicy,
    group: Option<String>,
    cursor: Option<Cursor>,
    min_chunk: usize,
    /// Read buffer of the borrowing path, reused across polls.
    buf: Vec<u8>,
}

enum Located {
    Data {
        file: Arc<SegmentFile>,
        pos: u64,
        limit: u64,
        epoch: u64,
        following_base: Option<u64>,
        /// Base offset the batch at `pos` must have (when located through the index).
        expect_base: Option<u64>,
        /// Offset after the segment's last record: no batch in it may start there or later.
        seg_end: u64,
    },
    AtEnd,
}

impl Reader {
    pub(crate) fn new(
        log: Log,
        part: Arc<Partition>,
        start: StartAt,
        reset: ResetPolicy,
        group: Option<String>,
    ) -> Result<Reader> {
        let next = log.resolve(&part, start)?;
        Ok(Reader {
            log,
            part,
            next,
            reset,
            group,
            cursor: None,
            min_chunk: 256 << 10,
            buf: Vec::new(),
        })
    }

    pub fn topic(&self) -> &str {
        &self.part.topic
    }

    pub fn partition(&self) -> u32 {
        self.part.id
    }

    /// Offset of the next record this reader returns.
    pub fn position(&self) -> u64 {
        self.next
    }

    pub fn high_watermark(&self) -> u64 {
        self.part.high_watermark()
    }

    pub fn log_start_offset(&self) -> u64 {
        self.part.lock().log_start
    }

    /// Durable records not yet read.
    pub fn lag(&self) -> u64 {
        self.high_watermark().saturating_sub(self.next)
    }

    pub fn set_reset_policy(&mut self, reset: ResetPolicy) {
        self.reset = reset;
    }

    /// Moves the reader.
    pub fn seek(&mut self, to: StartAt) -> Result<()> {
        self.next = self.log.resolve(&self.part, to)?;
        self.cursor = None;
        Ok(())
    }

    /// For a group reader: durably commits the current position (the next offset to read).
    pub fn commit(&self) -> Result<()> {
        match &self.group {
            Some(g) => self
                .log
                .commit(g, &self.part.topic, self.part.id, self.next),
            None => Err(LogError::InvalidArgument(
                "this reader has no consumer group; use Log::consumer".into(),
            )),
        }
    }

    /// Blocks until records past the current position are durable, or `timeout`.
    pub fn wait(&self, timeout: Duration) -> bool {
        let part = &self.part;
        let next = self.next;
        part.notifier
            .wait_until(timeout, || part.high_watermark() > next)
    }

    /// A future that completes when records past the current position are durable.
    /// Runtime-agnostic: use it from tokio (`reader.ready().await`) or any executor.
    pub fn ready(&self) -> Notified<impl FnMut() -> bool + Unpin> {
        let part = self.part.clone();
        let next = self.next;
        Notified {
            notifier: self.part.clone(),
            ready: move || part.high_watermark() > next,
        }
    }

    /// Waits up to `timeout` for durable records, then returns up to about `max_bytes` of
    /// them (at least one batch's worth if any). Empty on timeout.
    pub fn next_batch(&mut self, max_bytes: usize, timeout: Duration) -> Result<Vec<Record>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            if self.poll_into(&mut out, max_bytes)? > 0 {
                return Ok(out);
            }
            let now = Instant::now();
            if now >= deadline || !self.wait(deadline - now) {
                // One last non-blocking look (the wait may have raced with a flush).
                self.poll_into(&mut out, max_bytes)?;
                return Ok(out);
            }
        }
    }

    /// Returns durable records available now, without waiting.
    pub fn poll(&mut self, max_bytes: usize) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        self.poll_into(&mut out, max_bytes)?;
        Ok(out)
    }

    fn out_of_range(&mut self, log_start: u64, hw: u64) -> Result<()> {
        match self.reset {
            ResetPolicy::Earliest => {
                tracing::info!(topic = %self.part.topic, partition = self.part.id, from = self.next, to = log_start, "offset out of range; resetting to earliest");
                self.next = log_start;
            }
            ResetPolicy::Latest => {
                tracing::info!(topic = %self.part.topic, partition = self.part.id, from = self.next, to = hw, "offset out of range; resetting to latest");
                self.next = hw;
            }
            ResetPolicy::None => {
                return Err(LogError::OffsetOutOfRange {
                    topic: self.part.topic.clone(),
                    partition: self.part.id,
                    offset: self.next,
                    log_start,
                    high_watermark: hw,
                })
            }
        }
        self.cursor = None;
        Ok(())
    }

    fn locate(&mut self) -> Result<Located> {
        loop {
            let st = self.part.lock();
            if self.next < st.log_start || self.next > st.leo {
                let (s, h) = (st.log_start, st.hw);
                drop(st);
                self.out_of_range(s, h)?;
                continue;
            }
            if self.next >= st.hw {
                return Ok(Located::AtEnd);
            }
            let cached = self
                .cursor
                .as_ref()
                .filter(|c| c.epoch == st.epoch)
                .and_then(|c| {
                    let i = st
                        .segments
                        .iter()
                        .position(|s| Arc::ptr_eq(&s.file, &c.file))?;
                    Some((i, c.pos))
                });
            let (i, pos, expect_base) = match cached {
                Some((i, pos)) => (i, pos, None),
                None => {
                    let mut i = st.segment_for(self.next);
                    if self.next >= st.segment_end(i) && i + 1 < st.segments.len() {
                        i += 1;
                    }
                    let seg = &st.segments[i];
                    let rel = self.next.saturating_sub(seg.base()).min(u32::MAX as u64) as u32;
                    match seg.index.lookup_entry(rel) {
                        Some((o, p)) => (i, p as u64, Some(seg.base() + o as u64)),
                        None => (i, 0, None),
                    }
                }
            };
            let seg = &st.segments[i];
            return Ok(Located::Data {
                file: seg.file.clone(),
                pos,
                limit: seg.durable_size,
                epoch: st.epoch,
                following_base: st.segments.get(i + 1).map(|s| s.base()),
                expect_base,
                seg_end: st.segment_end(i),
            });
        }
    }

    /// Appends available durable records to `out` (about `max_bytes`); returns how many.
    pub fn poll_into(&mut self, out: &mut Vec<Record>, max_bytes: usize) -> Result<usize> {
        self.poll_generic(&mut Out::Owned(out), max_bytes)
    }

    /// The zero-allocation read path: calls `f` with each durable record available now
    /// (about `max_bytes` of them, at least one batch's worth if any), without waiting,
    /// and returns how many. Each [`RecordView`] borrows key, value and headers from the
    /// reader's read buffer (reused across calls; uncompressed batches are not copied
    /// again), so nothing is allocated per record or per batch. Copy what you keep.
    pub fn poll_with(
        &mut self,
        max_bytes: usize,
        mut f: impl FnMut(RecordView<'_>),
    ) -> Result<usize> {
        self.poll_generic(&mut Out::Visit(&mut f), max_bytes)
    }

    /// [`Reader::poll_with`] after waiting up to `timeout` for durable records, like
    /// [`Reader::next_batch`]. Returns 0 on timeout.
    pub fn next_with(
        &mut self,
        max_bytes: usize,
        timeout: Duration,
        mut f: impl FnMut(RecordView<'_>),
    ) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.poll_generic(&mut Out::Visit(&mut f), max_bytes)?;
            if n > 0 {
                return Ok(n);
            }
            let now = Instant::now();
            if now >= deadline || !self.wait(deadline - now) {
                return self.poll_generic(&mut Out::Visit(&mut f), max_bytes);
            }
        }
    }

    fn poll_generic(&mut self, out: &mut Out<'_, '_>, max_bytes: usize) -> Result<usize> {
        let mut count = 0usize;
        let mut budget = max_bytes.max(1);
        // Each round yields records, moves past an empty batch or into a later segment, or
        // stops; compaction can leave any number of segments holding one empty batch, so
        // the rounds are not counted, only rounds that change nothing (a safeguard).
        let mut prev = None;
        let mut stalled = 0;
        loop {
            let state = (self.next, self.cursor.as_ref().map(|c| c.pos));
            if prev == Some(state) {
                stalled += 1;
                if stalled > 2 {
                    break;
                }
            } else {
                stalled = 0;
            }
            prev = Some(state);
            let Located::Data {
                file,
                pos,
                limit,
                epoch,
                following_base: following,
                expect_base: expect,
                seg_end,
            } = self.locate()?
            else {
                break;
            };
            if pos >= limit {
                // Segment exhausted: continue in the next one (an offset gap can only be
                // the cleaner's, and holds no records).
                self.cursor = None;
                match following {
                    Some(b) if b > self.next => self.next = b,
                    Some(_) => {}
                    None => break,
                }
                continue;
            }
            let read = self.read_chunk(&file, pos, limit, budget, (expect, seg_end), out);
            let (new_pos, got, n) = match read {
                Ok(r) => r,
                Err(e) if self.log.is_read_only() => {
                    // The writer (another process) may have dropped this segment and
                    // recycled (overwritten, cut) its file under us: if the ledger's log
                    // start moved past our position, that is an out-of-range offset, not
                    // corruption or a short read.
                    self.log.refresh()?;
                    if self.next < self.part.lock().log_start {
                        self.cursor = None;
                        continue;
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            count += n;
            self.cursor = Some(Cursor {
                epoch,
                file,
                pos: new_pos,
            });
            budget = budget.saturating_sub(got);
            if count > 0 && budget == 0 {
                break;
            }
            if count > 0 && new_pos < limit {
                break;
            }
        }
        Ok(count)
    }

    /// Reads whole batches from `[pos, limit)`: about `budget` bytes, at least one batch.
    /// `(expect_base, seg_end)`: the base offset the batch at `pos` must have, if known, and
    /// the offset no batch of this segment may start at or after. Returns (new position,
    /// payload bytes, records).
    fn read_chunk(
        &mut self,
        file: &SegmentFile,
        pos: u64,
        limit: u64,
        budget: usize,
        (expect_base, seg_end): (Option<u64>, u64),
        out: &mut Out<'_, '_>,
    ) -> Result<(u64, usize, usize)> {
        let foreign =
            |h: &BatchHeader| h.base_offset < file.base_offset || h.base_offset >= seg_end;
        let foreign_err = |at: u64, h: &BatchHeader| {
            file.corrupt(
                at,
                h.base_offset,
                format!(
                    "batch {}..={} lies outside the segment's offsets {}..{seg_end} (the file was replaced or recycled under the reader)",
                    h.base_offset,
                    h.last_offset(),
                    file.base_offset
                ),
            )
        };
        let avail = (limit - pos) as usize;
        let mut want = budget.max(self.min_chunk).min(avail);
        if want < HEADER_LEN {
            return Err(file.corrupt(pos, self.next, "torn batch header inside the durable range"));
        }
        let mut head = [0u8; HEADER_LEN];
        file.read_exact_at(&mut head, pos)?;
        let h = BatchHeader::parse(&head).map_err(|e| file.corrupt(pos, self.next, e))?;
        if expect_base.is_some_and(|b| b != h.base_offset) {
            return Err(LogError::corrupt_file(
                "offset index",
                file.index_path(),
                format!(
                    "entry for offset {} points at byte {pos}, where the batch has base offset {}",
                    expect_base.unwrap_or_default(),
                    h.base_offset
                ),
                "delete the .index and .timeindex files of this segment; they are rebuilt on open",
            ));
        }
        if h.total_len() > avail {
            return Err(file.corrupt(
                pos,
                self.next,
                "batch runs past the durable end of the segment",
            ));
        }
        want = want.max(h.total_len());
        match out {
            Out::Owned(out) => {
                let mut buf = vec![0u8; want];
                file.read_exact_at(&mut buf, pos)?;
                let buf = Bytes::from(buf);
                let start_len = out.len();
                let mut off = 0usize;
                let mut got = 0usize;
                while off + HEADER_LEN <= buf.len() {
                    let h = BatchHeader::parse(&buf[off..])
                        .map_err(|e| file.corrupt(pos + off as u64, self.next, e))?;
                    let total = h.total_len();
                    if off + total > buf.len() {
                        break;
                    }
                    let batch = buf.slice(off..off + total);
                    let h = crate::batch::verify_batch(&batch)
                        .map_err(|e| file.corrupt(pos + off as u64, h.base_offset, e))?;
                    if foreign(&h) {
                        return Err(foreign_err(pos + off as u64, &h));
                    }
                    if h.next_offset() > self.next {
                        got += decode_into(&batch, &h, self.next, out)
                            .map_err(|e| file.corrupt(pos + off as u64, h.base_offset, e))?;
                        self.next = h.next_offset();
                    }
                    off += total;
                    if got >= budget {
                        break;
                    }
                }
                Ok((pos + off as u64, got, out.len() - start_len))
            }
            Out::Visit(f) => {
                let mut buf = std::mem::take(&mut self.buf);
                if buf.len() < want {
                    buf.resize(want, 0);
                }
                let res = (|| {
                    let buf = &mut buf[..want];
                    file.read_exact_at(buf, pos)?;
                    let mut off = 0usize;
                    let mut got = 0usize;
                    let mut n = 0usize;
                    while off + HEADER_LEN <= buf.len() {
                        let at = pos + off as u64;
                        let h = BatchHeader::parse(&buf[off..])
                            .map_err(|e| file.corrupt(at, self.next, e))?;
                        let total = h.total_len();
                        if off + total > buf.len() {
                            break;
                        }
                        let batch = &buf[off..off + total];
                        let h = crate::batch::verify_batch(batch)
                            .map_err(|e| file.corrupt(at, h.base_offset, e))?;
                        if foreign(&h) {
                            return Err(foreign_err(at, &h));
                        }
                        if h.next_offset() > self.next && !h.is_control() && h.records_count > 0 {
                            let section = records_section(batch, &h)
                                .map_err(|e| file.corrupt(at, h.base_offset, e))?;
                            for r in RecordIter::new(&section, &h) {
                                let r = r.map_err(|e| file.corrupt(at, h.base_offset, e))?;
                                let offset = h.base_offset + r.offset_delta as u64;
                                if offset < self.next {
                                    continue;
                                }
                                got += r.key.map_or(0, |k| k.len())
                                    + r.value.map_or(0, |v| v.len())
                                    + 16;
                                n += 1;
                                f(RecordView {
                                    offset,
                                    timestamp: h.base_timestamp.wrapping_add(r.timestamp_delta),
                                    key: r.key,
                                    value: r.value,
                                    raw: r,
                                });
                            }
                        }
                        if h.next_offset() > self.next {
                            self.next = h.next_offset();
                        }
                        off += total;
                        if got >= budget {
                            break;
                        }
                    }
                    Ok((pos + off as u64, got, n))
                })();
                self.buf = buf;
                res
            }
        }
    }
}

/// Where `read_chunk` puts records.
enum Out<'o, 'f> {
    Owned(&'o mut Vec<Record>),
    Visit(&'f mut dyn FnMut(RecordView<'_>)),
}

/// A record borrowed from a [`Reader`]'s read buffer (see [`Reader::poll_with`]).
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    raw: RecordRef<'a>,
}

impl<'a> RecordView<'a> {
    /// The record's headers: (key, value), in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
        self.raw.headers()
    }

    /// An owned copy (allocates).
    pub fn to_record(&self) -> Record {
        Record {
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.map(Bytes::copy_from_slice),
            value: self.value.map(Bytes::copy_from_slice),
            headers: self
                .headers()
                .map(|(k, v)| crate::record::Header {
                    key: k.to_string(),
                    value: v.map(Bytes::copy_from_slice),
                })
                .collect(),
        }
    }
}

/// First durable offset whose timestamp is >= `ts`, or the high watermark if none.
pub(crate) fn offset_for_time(part: &Partition, ts: i64) -> Result<u64> {
    let candidates: Vec<(Arc<SegmentFile>, u64, u64)> = {
        let st = part.lock();
        st.segments
            .iter()
            .filter(|s| s.durable_size > 0 && s.max_timestamp().is_some_and(|m| m >= ts))
            .map(|s| {
                let rel = s.index.lookup_time(ts);
                (s.file.clone(), s.index.lookup(rel) as u64, s.durable_size)
            })
            .collect()
    };
    let hw = part.high_watermark();
    for (file, pos, limit) in candidates {
        let mut sc = BatchScanner::new(&file, pos, limit);
        loop {
            match sc.next_batch() {
                Ok(None) => break,
                Ok(Some((p, h, slice))) => {
                    if h.max_timestamp < ts || h.records_count == 0 {
                        continue;
                    }
                    let bytes = Bytes::copy_from_slice(slice);
                    let mut recs = Vec::new();
                    decode_into(&bytes, &h, 0, &mut recs)
                        .map_err(|e| file.corrupt(p, h.base_offset, e))?;
                    if let Some(r) = recs.iter().find(|r| r.timestamp >= ts) {
                        return Ok(r.offset.max(part.lock().log_start));
                    }
                }
                Err(ScanStop::Io(e)) => return Err(e),
                Err(ScanStop::Bad { position, reason }) => {
                    return Err(file.corrupt(position, file.base_offset, reason))
                }
            }
        }
    }
    Ok(hw)
}

/// Fully validates every durable batch of a partition; returns the record count.
pub(crate) fn verify_partition(part: &Partition) -> Result<u64> {
    let segs: Vec<(Arc<SegmentFile>, u64)> = {
        let st = part.lock();
        st.segments
            .iter()
            .map(|s| (s.file.clone(), s.durable_size))
            .collect()
    };
    let mut n = 0u64;
    for (file, limit) in segs {
        let mut sc = BatchScanner::new(&file, 0, limit);
        loop {
            match sc.next_batch() {
                Ok(None) => break,
                Ok(Some((p, h, slice))) => {
                    crate::batch::validate_batch(slice)
                        .map_err(|e| file.corrupt(p, h.base_offset, e))?;
                    n += h.records_count as u64;
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
    Ok(n)
}
