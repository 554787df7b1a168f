//! Write staging of a partition's active segment: appended batches are encoded straight
//! into an in-memory buffer and reach the segment file in large `O_DIRECT` writes (the
//! bytes go from this buffer to the device: no copy into the page cache, no page-cache
//! pages to allocate, and a flush's `fdatasync` finds no dirty page to write back). Owns
//! no file format: the segment's bytes are exactly those a `pwrite` per batch would give.
//! Memory: the buffer holds at most [`WRITE_CHUNK`] plus one batch (about 2 MiB of
//! capacity for a partition written at full speed, one block for a quiet one).
//!
//! # Invariants
//!
//! - The file holds the segment's bytes `[0, written)`. The stage holds `[file_pos, end)`,
//!   `file_pos <= written <= end`, where `end` is the partition's in-memory segment size;
//!   `[file_pos, written)` is at most the part of one block already in the file, kept so
//!   the whole block can be written again, with more data, by the next `O_DIRECT` write.
//!   Nothing past `written` is relied on by anyone: readers read below the high watermark,
//!   and `Partition::plan_flush` writes the whole stage out (under the partition lock)
//!   before it records the sizes a flush makes durable. So durability is exactly as
//!   before: `flush` fsyncs the file after every staged byte was written, then writes the
//!   ledger.
//! - With `O_DIRECT`, `file_pos` is a multiple of [`ALIGN`] and every write covers whole
//!   blocks. A flush writes the last, partial block padded with zeros, so the active
//!   segment's file may end with fewer than [`ALIGN`] zero bytes after its last batch
//!   (`file_len > written`). Recovery treats such a tail as padding, not as a torn write
//!   (`Partition::open`), and the next write replaces it with data. Writing a block again
//!   is safe against torn writes: bytes below the durable end are the same in the old and
//!   the new content of the block. A closed segment never keeps padding: the roll writes
//!   its last block through the page cache, truncates the file to its exact size and
//!   fsyncs it before the next segment is created.
//! - Byte `p` of the file sits at a buffer address congruent to `p` modulo [`ALIGN`], so
//!   blocks go to `O_DIRECT` in place.
//! - A write error leaves the stage as it was (its bytes are written again by the next
//!   write-out); the caller cuts the file back to `written` ([`Stage::cut_after_error`]).
//!
//! Page cache and direct writes: readers read segment files through the page cache. The
//! kernel invalidates cached pages of a range after a direct write to it, and readers only
//! ever read bytes below the durable end, which are identical in every version of a block.
//! A flush with fewer than [`SMALL_FLUSH`] new bytes writes them through the page cache
//! (one request either way, and a tailing reader then finds them cached); when a later
//! `O_DIRECT` write covers that block again, the kernel first writes back and drops the
//! cached page (clean by then: the flush fsynced it).
//!
//! Write-behind (`writer.rs`): a [`WriteOut::Chunk`] under `O_DIRECT` hands its whole
//! blocks to a background writer thread together with the buffer that holds them, and the
//! stage goes on in a fresh buffer from the partial block at its end. At most one such
//! write is in flight; every other operation first waits for it ([`Stage::settle`]). While
//! it is in flight the file positions `[written, file_pos)` are in that write, so
//! `written <= file_pos` then, instead of the reverse; `written` still means "in the
//! file", and only the wait advances it. A failed write-behind puts its bytes back in front
//! of the stage, as if it had never been handed off, and the error surfaces at the wait:
//! the next append, flush or close fails, and the bytes are written again by the next
//! write-out.
//!
//! Without `O_DIRECT` (file systems that refuse it at open, devices whose blocks are
//! larger than [`ALIGN`] and refuse the write with `EINVAL`), the same write-outs go
//! through the page cache: still one `pwrite` per [`WRITE_CHUNK`] instead of one per batch,
//! and no padding.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Arc;

use crate::error::{LogError, Result};
use crate::segment::SegmentFile;
use crate::writer::{self, Job, Pending};

/// Alignment (buffer address, file offset, length) of `O_DIRECT` writes.
pub const ALIGN: usize = 4096;
/// `append` writes the stage out once it holds this many bytes.
pub const WRITE_CHUNK: usize = 1 << 20;
/// A flush with fewer new bytes than this writes them through the page cache.
const SMALL_FLUSH: u64 = 64 << 10;
/// A stage whose buffer grew past this (a huge batch) gives the memory back when it empties.
const KEEP_CAPACITY: usize = 4 * WRITE_CHUNK;
/// A chunk write-out smaller than this is written by the appending thread itself.
const MIN_BEHIND: u64 = 256 << 10;

#[derive(Debug)]
enum Direct {
    /// Not opened yet for the current segment.
    Untried,
    Open(Arc<File>),
    /// Refused (at open or by a write): buffered writes for the rest of this segment.
    Off,
}

/// What a write-out is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOut {
    /// The stage grew large: write whole blocks, keep the partial one staged.
    Chunk,
    /// A flush: write everything (the last block padded with zeros under `O_DIRECT`).
    Flush,
    /// The segment is being closed at `upto`: write everything below it and make the file
    /// exactly `upto` bytes long; staged bytes past `upto` stay (they go to the next
    /// segment, see [`Stage::restart_at_new_file`]).
    Close,
}

/// A write-behind in flight: file bytes `[from, to)` of the buffer it took.
struct InFlight {
    pending: Pending,
    from: u64,
    to: u64,
    /// Where the taken buffer's first byte (file position `from`) is.
    lead: usize,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InFlight({}..{})", self.from, self.to)
    }
}

/// The unwritten tail of the active segment (see the module docs).
#[derive(Debug)]
pub struct Stage {
    /// `buf[lead..]` holds file bytes `[file_pos, end)`; `buf[..lead]` is unused.
    buf: Vec<u8>,
    lead: usize,
    file_pos: u64,
    written: u64,
    /// Length of the file (>= `written`; beyond it the zero padding of a flush, or the
    /// stale bytes of a recycled file).
    file_len: u64,
    direct: Direct,
    /// Never use `O_DIRECT` (tests of the buffered path).
    buffered_only: bool,
    /// Hand large chunk write-outs to a writer thread (`LogOptions::write_behind`).
    behind: bool,
    in_flight: Option<InFlight>,
    /// The buffer of the last finished write-behind, for the next one.
    spare: Vec<u8>,
    /// Set when a write-behind's bytes were lost with its thread: every later write-out
    /// fails (the file would have a hole).
    broken: Option<String>,
}

impl Drop for Stage {
    fn drop(&mut self) {
        // No write may outlive its stage (`writer.rs`); its result no longer matters: what
        // was not flushed is not durable.
        if let Some(f) = self.in_flight.take() {
            let _ = f.pending.wait();
        }
    }
}

fn round_up(p: u64) -> u64 {
    p.div_ceil(ALIGN as u64) * ALIGN as u64
}

fn round_down(p: u64) -> u64 {
    p / ALIGN as u64 * ALIGN as u64
}

/// True if the file's bytes `[valid, len)` are zero padding a flush may have left: fewer
/// than a block, not crossing a block boundary, all zero.
pub fn is_padding(seg: &SegmentFile, valid: u64, len: u64) -> Result<bool> {
    if len <= valid || len > round_up(valid) {
        return Ok(false);
    }
    let mut b = vec![0u8; (len - valid) as usize];
    seg.read_exact_at(&mut b, valid)?;
    Ok(b.iter().all(|&x| x == 0))
}

impl Stage {
    /// An empty stage for an empty segment file.
    pub fn new() -> Stage {
        let mut s = Stage {
            buf: Vec::new(),
            lead: 0,
            file_pos: 0,
            written: 0,
            file_len: 0,
            direct: Direct::Untried,
            buffered_only: false,
            behind: false,
            in_flight: None,
            spare: Vec::new(),
            broken: None,
        };
        s.realign();
        s
    }

    /// Turns write-behind on or off (see the module docs).
    pub fn set_write_behind(&mut self, on: bool) {
        self.behind = on;
    }

    /// The stage of a segment file that holds `size` bytes of data and is `file_len` bytes
    /// long (recovery may have left padding): stages the partial last block from the file.
    pub fn resume(seg: &SegmentFile, size: u64, file_len: u64) -> Result<Stage> {
        let mut s = Stage::new();
        s.file_pos = round_down(size);
        s.written = size;
        s.file_len = file_len.max(size);
        s.realign();
        let n = (size - s.file_pos) as usize;
        let at = s.buf.len();
        s.buf.resize(at + n, 0);
        seg.read_exact_at(&mut s.buf[at..], s.file_pos)?;
        Ok(s)
    }

    #[cfg(test)]
    fn new_buffered_only() -> Stage {
        let mut s = Stage::new();
        s.buffered_only = true;
        s
    }

    /// Bytes not yet known to be in the file (staged or in flight): a flush must write out
    /// when this is not 0.
    pub fn unwritten(&self) -> u64 {
        self.end() - self.written
    }

    /// Bytes staged and not handed to a write yet: what makes a chunk write-out due.
    pub fn staged(&self) -> u64 {
        self.end() - self.written.max(self.file_pos)
    }

    /// The file holds the segment's bytes below this position.
    #[cfg(test)]
    fn written(&self) -> u64 {
        self.written
    }

    /// Waits for the write-behind in flight, if any: on success its bytes count as
    /// written; on failure they are staged again (in front of the rest) and the error is
    /// returned. `O_DIRECT` refused by the kernel is not an error: the bytes are staged
    /// again and written through the page cache from then on.
    pub fn settle(&mut self, seg: &SegmentFile) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(LogError::Poisoned(why.clone()));
        }
        let Some(f) = self.in_flight.take() else {
            return Ok(());
        };
        let Some(done) = f.pending.wait() else {
            // The buffer is gone with the thread: the bytes cannot be written again.
            let why = format!(
                "the background writer of {} stopped with bytes {}..{} unwritten; restart the process (nothing unflushed was acknowledged)",
                seg.path.display(),
                f.from,
                f.to
            );
            self.broken = Some(why.clone());
            return Err(LogError::Poisoned(why));
        };
        match done.result {
            Ok(()) => {
                self.written = self.written.max(f.to);
                self.file_len = self.file_len.max(f.to);
                let mut buf = done.buf;
                if buf.capacity() <= KEEP_CAPACITY {
                    buf.clear();
                    self.spare = buf;
                }
                Ok(())
            }
            Err(e) => {
                self.restage(f.from, f.to, f.lead, done.buf);
                if e.raw_os_error() == Some(libc::EINVAL) {
                    tracing::debug!(file = %seg.path.display(), error = %e, "O_DIRECT write refused; buffered writes");
                    self.direct = Direct::Off;
                    Ok(())
                } else {
                    Err(LogError::io("appending to", &seg.path, e))
                }
            }
        }
    }

    /// Gives memory back while the partition is quiet: drops the spare buffer and moves the
    /// staged bytes (at most a block after a flush) into a buffer of their own size. Waits
    /// for the write-behind in flight first.
    pub fn shrink(&mut self, seg: &SegmentFile) -> Result<()> {
        self.settle(seg)?;
        self.spare = Vec::new();
        let n = self.len();
        if self.buf.capacity() <= n + 2 * ALIGN {
            return Ok(());
        }
        // Room for `realign`'s reserve: it must not reallocate again.
        let mut small = Vec::with_capacity(n + 2 * ALIGN);
        small.extend_from_slice(&self.buf[self.lead..self.lead + n]);
        self.buf = small;
        self.lead = 0;
        self.realign();
        Ok(())
    }

    /// Stages again the bytes `[from, to)` of a failed write-behind (in `buf` from `lead`),
    /// in front of what was staged since.
    fn restage(&mut self, from: u64, to: u64, lead: usize, mut buf: Vec<u8>) {
        debug_assert_eq!(to, self.file_pos);
        buf.truncate(lead + (to - from) as usize);
        let n = self.len();
        buf.extend_from_slice(&self.buf[self.lead..self.lead + n]);
        self.buf = buf;
        self.lead = lead;
        self.file_pos = from;
        self.realign();
    }

    /// Hands staged bytes `[file_pos, to)` (whole blocks) to a writer thread and goes on
    /// in a fresh buffer with the rest. `false` (nothing changed) if no writer thread
    /// takes it.
    fn write_behind(&mut self, to: u64) -> bool {
        let Direct::Open(file) = &self.direct else {
            return false;
        };
        let file = file.clone();
        let from = self.file_pos;
        let n = (to - from) as usize;
        let rest = self.len() - n;
        let mut fresh = std::mem::take(&mut self.spare);
        fresh.clear();
        // Room for the lead, the rest and the next chunk: no reallocation below.
        fresh.reserve(ALIGN + rest + WRITE_CHUNK);
        // `to` is block-aligned, so its bytes start at an aligned address.
        let lead = (ALIGN - fresh.as_ptr() as usize % ALIGN) % ALIGN;
        fresh.resize(lead, 0);
        fresh.extend_from_slice(&self.buf[self.lead + n..self.lead + n + rest]);
        let old = std::mem::replace(&mut self.buf, fresh);
        let old_lead = std::mem::replace(&mut self.lead, lead);
        self.file_pos = to;
        let job = Job {
            file,
            buf: old,
            range: old_lead..old_lead + n,
            at: from,
        };
        match writer::submit(job) {
            Ok(pending) => {
                self.in_flight = Some(InFlight {
                    pending,
                    from,
                    to,
                    lead: old_lead,
                });
                true
            }
            Err(job) => {
                self.spare = std::mem::replace(&mut self.buf, job.buf);
                self.lead = old_lead;
                self.file_pos = from;
                false
            }
        }
    }

    fn len(&self) -> usize {
        self.buf.len() - self.lead
    }

    /// File position after the last staged byte.
    pub fn end(&self) -> u64 {
        self.file_pos + self.len() as u64
    }

    /// The buffer to encode into: append to it, then call [`Stage::realign`] (or
    /// [`Stage::truncate_end`] to undo). Bytes before the current end must not change.
    pub fn buf_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Where `lead` must be for the current buffer address and `file_pos`.
    fn wanted_lead(&self) -> usize {
        let addr = self.buf.as_ptr() as usize % ALIGN;
        let pos = (self.file_pos % ALIGN as u64) as usize;
        (pos + ALIGN - addr) % ALIGN
    }

    /// Restores the address invariant after the buffer was reallocated (it grew while a
    /// batch was encoded into it) or `file_pos` changed: moves the staged bytes.
    pub fn realign(&mut self) {
        if self.wanted_lead() == self.lead {
            return;
        }
        // With ALIGN spare bytes the resize below cannot reallocate (and move) again.
        self.buf.reserve(ALIGN);
        let want = self.wanted_lead();
        let n = self.len();
        if want > self.lead {
            self.buf.resize(want + n, 0);
        }
        self.buf.copy_within(self.lead..self.lead + n, want);
        self.buf.truncate(want + n);
        self.lead = want;
    }

    /// Drops staged bytes at and after file position `pos` (undoes an append; `pos` is at
    /// or after `written`).
    pub fn truncate_end(&mut self, pos: u64) {
        debug_assert!(pos >= self.written);
        let keep = pos.saturating_sub(self.file_pos).min(self.len() as u64) as usize;
        self.buf.truncate(self.lead + keep);
    }

    /// Drops the first `n` staged bytes (they are in the file) and moves the rest to where
    /// the address invariant wants them.
    fn consume(&mut self, n: usize) {
        let rest = self.len() - n;
        self.file_pos += n as u64;
        if rest == 0 {
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf = Vec::new();
            }
            self.buf.clear();
            self.lead = 0;
            self.realign();
            return;
        }
        let from = self.lead + n;
        let want = self.wanted_lead();
        if want + rest > self.buf.len() {
            self.buf.resize(want + rest, 0);
        }
        self.buf.copy_within(from..from + rest, want);
        self.buf.truncate(want + rest);
        self.lead = want;
    }

    /// After a [`WriteOut::Close`] at `upto`: the staged bytes (those past `upto`) are the
    /// start of a new segment whose file is `file_len` bytes long: 0 for a new file, the
    /// recycled file's length for a recycled one (`recycle.rs`; all stale, written over
    /// from position 0, and cut off by the segment's [`WriteOut::Close`]).
    pub fn restart_at_new_file(&mut self, file_len: u64) {
        debug_assert!(self.in_flight.is_none());
        debug_assert_eq!(self.written, self.file_pos);
        self.file_pos = 0;
        self.written = 0;
        self.file_len = file_len;
        self.direct = Direct::Untried;
        self.realign();
    }

    fn slice(&self, from: u64, to: u64) -> &[u8] {
        let a = self.lead + (from - self.file_pos) as usize;
        let b = self.lead + (to - self.file_pos) as usize;
        &self.buf[a..b]
    }

    fn direct_file(&mut self, seg: &SegmentFile) -> Option<&File> {
        if self.buffered_only || self.file_pos % ALIGN as u64 != 0 {
            return None;
        }
        if let Direct::Untried = self.direct {
            self.direct = match OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&seg.path)
            {
                Ok(f) => Direct::Open(Arc::new(f)),
                Err(e) => {
                    tracing::debug!(file = %seg.path.display(), error = %e, "O_DIRECT refused; buffered writes");
                    Direct::Off
                }
            };
        }
        match &self.direct {
            Direct::Open(f) => Some(f.as_ref()),
            _ => None,
        }
    }

    /// One `O_DIRECT` write of staged bytes `[from, to)` (whole blocks; `to` may pass the
    /// end of the stage by less than a block: zeros are written there). `Ok(false)` if the
    /// kernel refused `O_DIRECT` for it (`EINVAL`): the stage then uses buffered writes.
    fn write_direct(&mut self, seg: &SegmentFile, from: u64, to: u64) -> Result<bool> {
        let end = self.end();
        if to > end {
            let extra = (to - end) as usize;
            if self.buf.capacity() - self.buf.len() < extra {
                // Grow (and move the bytes back into alignment) first: the zeros must not
                // make the buffer reallocate under the aligned slice.
                self.buf.reserve(2 * ALIGN);
                self.realign();
            }
            self.buf.resize(self.buf.len() + extra, 0);
        }
        let n = self.len() - (to.saturating_sub(end)) as usize;
        let r = match &self.direct {
            Direct::Open(f) => f.write_all_at(self.slice(from, to), from),
            _ => Ok(()),
        };
        self.buf.truncate(self.lead + n);
        match r {
            Ok(()) => {
                self.file_len = self.file_len.max(to);
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(file = %seg.path.display(), error = %e, "O_DIRECT write refused; buffered writes");
                self.direct = Direct::Off;
                Ok(false)
            }
            Err(e) => Err(LogError::io("appending to", &seg.path, e)),
        }
    }

    fn write_buffered(&mut self, seg: &SegmentFile, from: u64, to: u64) -> Result<()> {
        if to > from {
            seg.file
                .write_all_at(self.slice(from, to), from)
                .map_err(|e| LogError::io("appending to", &seg.path, e))?;
            self.file_len = self.file_len.max(to);
        }
        Ok(())
    }

    /// Writes staged bytes to `seg` as `mode` says (`upto` is the end of the stage except
    /// for [`WriteOut::Close`]). Written bytes leave the stage, except the partial block a
    /// later `O_DIRECT` write will write again. On error nothing leaves the stage. Waits
    /// for the write-behind in flight first; a large chunk under `O_DIRECT` becomes the
    /// next one (see the module docs).
    pub fn write_out(&mut self, seg: &SegmentFile, mode: WriteOut, upto: u64) -> Result<()> {
        self.settle(seg)?;
        debug_assert!(self.written <= upto && upto <= self.end());
        debug_assert!(mode == WriteOut::Close || upto == self.end());
        debug_assert!(self.len() == 0 || self.wanted_lead() == self.lead);
        let start = self.file_pos;
        // A small flush goes through the page cache: one request either way, and tailing
        // readers then find the new bytes cached.
        let small_flush = mode == WriteOut::Flush && upto - self.written < SMALL_FLUSH;
        if !small_flush && self.direct_file(seg).is_some() {
            let to = match mode {
                WriteOut::Flush => round_up(upto),
                WriteOut::Chunk | WriteOut::Close => round_down(upto),
            };
            if mode == WriteOut::Chunk
                && self.behind
                && to >= start + MIN_BEHIND
                && to > self.written
                && self.write_behind(to)
            {
                return Ok(());
            }
            let direct_ok = if to > start && upto > self.written {
                self.write_direct(seg, start, to)?
            } else {
                true
            };
            if direct_ok {
                self.written = self.written.max(upto.min(to));
                if mode == WriteOut::Close {
                    let from = self.written;
                    self.write_buffered(seg, from, upto)?;
                    self.written = upto;
                    self.close_at(seg, upto)?;
                    self.consume((upto - start) as usize);
                } else {
                    self.consume((round_down(upto) - start) as usize);
                }
                return Ok(());
            }
        }
        let from = self.written;
        self.write_buffered(seg, from, upto)?;
        self.written = upto;
        if mode == WriteOut::Close {
            self.close_at(seg, upto)?;
        }
        // Keep the partial block staged while O_DIRECT may still write it whole.
        let direct_possible =
            !self.buffered_only && start % ALIGN as u64 == 0 && !matches!(self.direct, Direct::Off);
        let keep_from = if mode == WriteOut::Close || !direct_possible {
            upto
        } else {
            round_down(upto)
        };
        self.consume((keep_from - start) as usize);
        Ok(())
    }

    /// Closing the file at `upto`: cuts the padding of an earlier flush off and makes that
    /// durable before the caller creates the next segment.
    fn close_at(&mut self, seg: &SegmentFile, upto: u64) -> Result<()> {
        if self.file_len > upto {
            seg.file
                .set_len(upto)
                .map_err(|e| LogError::io("cutting the padding off", &seg.path, e))?;
            seg.file.sync_all().map_err(|e| LogError::FsyncFailed {
                path: seg.path.clone(),
                source: e,
            })?;
            self.file_len = upto;
        }
        Ok(())
    }

    /// After a failed write-out: cuts the file back to `written`, so it holds no partial
    /// batch (or padding) past it.
    pub fn cut_after_error(&mut self, seg: &SegmentFile) -> std::io::Result<()> {
        // A write-behind still in flight would land after the cut.
        if let Err(e) = self.settle(seg) {
            tracing::debug!(file = %seg.path.display(), error = %e, "write-behind failed too");
        }
        seg.file.set_len(self.written)?;
        self.file_len = self.written;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct_supported(dir: &std::path::Path) -> bool {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(dir.join("probe"))
            .is_ok()
    }

    /// Random appends, undos, chunk and flush write-outs, reopen (resume) and closes; the
    /// file must always hold exactly the bytes below `written`, followed by nothing but
    /// padding. With `recycle`, every new segment after a close is a file full of stale
    /// garbage (a recycled segment): the bytes below `written` must still be exact, and a
    /// close must cut the file to exactly the segment's bytes.
    /// With `behind`, chunk write-outs go to the writer threads and the checks run with
    /// and without waiting for them.
    fn exercise(buffered_only: bool, recycle: bool, behind: bool) {
        let dir = tempfile::tempdir().unwrap();
        let direct = !buffered_only && direct_supported(dir.path());
        let mut base = 0u64;
        let mut seg = SegmentFile::create(dir.path(), base).unwrap();
        let mut stage = if buffered_only {
            Stage::new_buffered_only()
        } else {
            Stage::new()
        };
        stage.set_write_behind(behind);
        let mut truth: Vec<u8> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut used_direct = false;
        let mut used_behind = false;
        for round in 0..600 {
            let n = match next() % 10 {
                0 => (next() % (3 * WRITE_CHUNK as u64)) as usize,
                1..=3 => (next() % 20_000) as usize,
                _ => (next() % 700) as usize,
            };
            let fill = (round % 251 + 1) as u8;
            stage.buf_mut().extend(std::iter::repeat_n(fill, n));
            stage.realign();
            truth.extend(std::iter::repeat_n(fill, n));
            assert_eq!(stage.end(), truth.len() as u64);
            let addr = stage.buf.as_ptr() as usize + stage.lead;
            assert_eq!(addr % ALIGN, (stage.file_pos % ALIGN as u64) as usize);
            match next() % 8 {
                0 | 1 => stage.write_out(&seg, WriteOut::Flush, stage.end()).unwrap(),
                2 if stage.unwritten() >= WRITE_CHUNK as u64 => {
                    stage.write_out(&seg, WriteOut::Chunk, stage.end()).unwrap()
                }
                3 => {
                    // Undo part of the last append.
                    let keep = (truth.len() - n / 2) as u64;
                    if keep >= stage.written().max(stage.file_pos) {
                        stage.truncate_end(keep);
                        truth.truncate(keep as usize);
                    }
                }
                4 => {
                    // Reopen: the file as recovery leaves it (padding kept, stale bytes of
                    // a recycled file cut).
                    stage.write_out(&seg, WriteOut::Flush, stage.end()).unwrap();
                    let mut len = seg.len().unwrap();
                    let size = truth.len() as u64;
                    if recycle && !(len == size || is_padding(&seg, size, len).unwrap()) {
                        seg.file.set_len(size).unwrap();
                        len = size;
                    }
                    assert!(len == size || is_padding(&seg, size, len).unwrap());
                    drop(stage);
                    seg = SegmentFile::open(seg.path.clone(), base).unwrap();
                    stage = Stage::resume(&seg, size, len).unwrap();
                    stage.buffered_only = buffered_only;
                    stage.set_write_behind(behind);
                }
                5 if truth.len() > 1 => {
                    // Roll in the middle of the last append: the rest starts a new file.
                    let at = truth.len() as u64
                        - (next() % (n as u64 + 1)).min(truth.len() as u64 - stage.written());
                    stage.write_out(&seg, WriteOut::Close, at).unwrap();
                    assert_eq!(std::fs::read(&seg.path).unwrap(), &truth[..at as usize]);
                    truth.drain(..at as usize);
                    base += 1;
                    if recycle {
                        // A former segment full of (non-zero) garbage, renamed into place.
                        let pool = dir.path().join("pool");
                        let stale = (next() % (3 * WRITE_CHUNK as u64)) as usize;
                        std::fs::write(&pool, vec![0xA5u8; stale]).unwrap();
                        seg = SegmentFile::reuse(dir.path(), &pool, base).unwrap();
                        stage.restart_at_new_file(stale as u64);
                    } else {
                        seg = SegmentFile::create(dir.path(), base).unwrap();
                        stage.restart_at_new_file(0);
                    }
                }
                _ => {}
            }
            used_direct |= matches!(stage.direct, Direct::Open(_));
            used_behind |= stage.in_flight.is_some();
            assert_eq!(stage.end(), truth.len() as u64);
            // Bytes below `written` are in the file even while a write-behind runs; what
            // follows them is only checked once it finished.
            let settled = next() % 2 == 0;
            if settled {
                stage.settle(&seg).unwrap();
            }
            let w = stage.written() as usize;
            let len = seg.len().unwrap();
            assert!(len >= w as u64);
            let mut got = vec![0u8; len as usize];
            seg.read_exact_at(&mut got, 0).unwrap();
            assert!(got[..w] == truth[..w], "file differs at round {round}");
            // A recycled file may hold stale bytes past the data (never read: readers go
            // by the partition's sizes; the close cuts them, checked above).
            assert!(
                recycle
                    || !settled
                    || (got[w..].iter().all(|&b| b == 0)
                        && len <= round_up(w as u64).max(w as u64)),
                "more than padding after the data at round {round}"
            );
        }
        stage.write_out(&seg, WriteOut::Flush, stage.end()).unwrap();
        let got = std::fs::read(&seg.path).unwrap();
        assert_eq!(&got[..truth.len()], &truth[..]);
        assert_eq!(used_direct, direct);
        assert_eq!(used_behind, direct && behind);
    }

    #[test]
    fn stage_writes_exactly_the_appended_bytes_direct() {
        // ext4/xfs accept O_DIRECT; tmpfs refuses it and the stage falls back.
        exercise(false, false, false);
        exercise(false, false, true);
    }

    #[test]
    fn stage_writes_exactly_the_appended_bytes_over_recycled_files() {
        exercise(false, true, false);
        exercise(false, true, true);
        exercise(true, true, true);
    }

    #[test]
    fn shrink_keeps_the_bytes_and_gives_the_buffers_back() {
        let dir = tempfile::tempdir().unwrap();
        let seg = SegmentFile::create(dir.path(), 0).unwrap();
        let mut stage = Stage::new();
        stage.set_write_behind(true);
        let data: Vec<u8> = (0..3 * WRITE_CHUNK + 3000)
            .map(|i| (i % 241) as u8)
            .collect();
        for part in data.chunks(WRITE_CHUNK / 2 + 17) {
            if stage.staged() >= WRITE_CHUNK as u64 {
                stage.write_out(&seg, WriteOut::Chunk, stage.end()).unwrap();
            }
            stage.buf_mut().extend_from_slice(part);
            stage.realign();
        }
        stage.shrink(&seg).unwrap();
        assert!(stage.in_flight.is_none());
        assert_eq!(stage.spare.capacity(), 0);
        assert!(stage.buf.capacity() <= stage.len() + 2 * ALIGN);
        assert_eq!(stage.wanted_lead(), stage.lead);
        assert_eq!(
            stage.slice(stage.file_pos, stage.end()),
            &data[stage.file_pos as usize..]
        );
        stage.write_out(&seg, WriteOut::Flush, stage.end()).unwrap();
        stage.shrink(&seg).unwrap();
        assert!(stage.buf.capacity() <= 3 * ALIGN);
        let got = std::fs::read(&seg.path).unwrap();
        assert_eq!(&got[..data.len()], &data[..]);
    }

    #[test]
    fn a_failed_write_behind_is_staged_again() {
        let dir = tempfile::tempdir().unwrap();
        if !direct_supported(dir.path()) {
            return;
        }
        let seg = SegmentFile::create(dir.path(), 0).unwrap();
        let mut stage = Stage::new();
        stage.set_write_behind(true);
        let data: Vec<u8> = (0..3 * WRITE_CHUNK + 5000)
            .map(|i| (i % 251) as u8)
            .collect();
        let (first, second) = data.split_at(2 * WRITE_CHUNK + 777);
        stage.buf_mut().extend_from_slice(first);
        stage.realign();
        stage.write_out(&seg, WriteOut::Chunk, stage.end()).unwrap();
        let f = stage.in_flight.take().expect("a write-behind");
        assert_eq!((f.from, f.to), (0, round_down(first.len() as u64)));
        // More appends while it is in flight.
        stage.buf_mut().extend_from_slice(second);
        stage.realign();
        assert_eq!(stage.written(), 0);
        assert_eq!(stage.staged(), data.len() as u64 - f.to);
        assert_eq!(stage.unwritten(), data.len() as u64);
        // The write went through; treat it as failed: everything must be staged again,
        // in order, at an aligned address.
        let done = f.pending.wait().unwrap();
        assert!(done.result.is_ok());
        stage.restage(f.from, f.to, f.lead, done.buf);
        assert_eq!(stage.file_pos, 0);
        assert_eq!(stage.wanted_lead(), stage.lead);
        assert_eq!(stage.slice(0, stage.end()), &data[..]);
        // A flush writes it all (again) and the file holds exactly the data.
        stage.write_out(&seg, WriteOut::Flush, stage.end()).unwrap();
        assert!(stage.in_flight.is_none());
        assert_eq!(stage.written(), data.len() as u64);
        let got = std::fs::read(&seg.path).unwrap();
        assert_eq!(&got[..data.len()], &data[..]);
        assert!(got[data.len()..].iter().all(|&b| b == 0));
    }

    #[test]
    fn stage_writes_exactly_the_appended_bytes_buffered() {
        exercise(true, false, true);
    }
}
