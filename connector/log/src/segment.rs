//! One segment: a `.log` file of record batches (format in `batch.rs`) plus its indexes
//! (format in `index.rs`). Owns file naming, positional I/O on the segment file and the
//! batch scanner used by recovery, reads and the cleaner.
//!
//! # Naming
//!
//! `<partition dir>/NNNNNNNNNNNNNNNNNNNN.log` where N is the segment's base offset in 20
//! decimal digits (Kafka's convention), with `.index` and `.timeindex` beside it.
//! Transient files: `*.cleaned` (the cleaner's output before its atomic swap) and `*.tmp`;
//! both are deleted on open. Recycle-pool files, `NNNNNNNNNNNNNNNNNNNN.log.recycle`
//! (`recycle.rs`), are former segments kept for reuse: their extension is `log.recycle`,
//! never `log`, so they are never listed, opened or read as segments.
//!
//! Invariants: a segment file is only ever appended to while it is the partition's active
//! (last) segment; once closed it is immutable until the cleaner replaces it whole by
//! rename. Its batches have strictly increasing offsets, all >= the base offset; a closed
//! segment's last batch ends exactly at the next segment's base offset (the cleaner keeps
//! an empty batch to preserve that). An active segment may live in a recycled file
//! ([`SegmentFile::reuse`]): its bytes past what the partition wrote are stale and never
//! part of the segment; the roll that closes it cuts the file to the segment's exact size.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::batch::{verify_batch, BatchHeader, HEADER_LEN};
use crate::error::{DecodeError, LogError, Result};

/// `00000000000000000042.log` for base offset 42.
pub fn log_file_name(base: u64) -> String {
    format!("{base:020}.log")
}

/// Parses a segment file name into its base offset and extension.
pub fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, ext))
}

/// An open segment file. Shared (`Arc`) between the writer and readers: reads use
/// positional I/O, so no seek position is shared.
#[derive(Debug)]
pub struct SegmentFile {
    pub base_offset: u64,
    pub path: PathBuf,
    pub file: File,
}

impl SegmentFile {
    pub fn create(dir: &Path, base_offset: u64) -> Result<SegmentFile> {
        let path = dir.join(log_file_name(base_offset));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| LogError::io("creating segment", &path, e))?;
        Ok(SegmentFile {
            base_offset,
            path,
            file,
        })
    }

    /// Turns the recycle-pool file `pool_path` into the (new, empty) segment `base_offset`:
    /// renames it into place and opens it WITHOUT truncating, so writes overwrite blocks
    /// that are already allocated and written (`recycle.rs` says why). Everything in it is
    /// stale: the caller writes from position 0 and bounds every read by what it wrote.
    /// The rename is made durable by the directory fsync of the next flush (the caller
    /// marks the directory dirty), before the ledger can name anything in this segment.
    pub fn reuse(dir: &Path, pool_path: &Path, base_offset: u64) -> Result<SegmentFile> {
        let path = dir.join(log_file_name(base_offset));
        std::fs::rename(pool_path, &path)
            .map_err(|e| LogError::io("renaming a recycled file into place as", &path, e))?;
        SegmentFile::open(path, base_offset)
    }

    pub fn open(path: PathBuf, base_offset: u64) -> Result<SegmentFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| LogError::io("opening segment", &path, e))?;
        Ok(SegmentFile {
            base_offset,
            path,
            file,
        })
    }

    /// Opens for reading only (read-only logs).
    pub fn open_read_only(path: PathBuf, base_offset: u64) -> Result<SegmentFile> {
        let file = OpenOptions::new()
            .read(true)
            .open(&path)
            .map_err(|e| LogError::io("opening segment", &path, e))?;
        Ok(SegmentFile {
            base_offset,
            path,
            file,
        })
    }

    /// Length of the file. For the active segment this is NOT the segment's size: a
    /// recycled file holds stale bytes past what was written (and a flush may have left
    /// padding). Only recovery (which cuts the file to its valid batches) and the
    /// read-only refresh (which scans contiguous batches up to the ledger's durable end)
    /// may use it as a scan limit; everyone else goes by the partition's sizes.
    pub fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| LogError::io("stat of segment", &self.path, e))
    }

    pub fn index_path(&self) -> PathBuf {
        self.path.with_extension("index")
    }

    pub fn time_index_path(&self) -> PathBuf {
        self.path.with_extension("timeindex")
    }

    /// Reads exactly `buf.len()` bytes at `pos`.
    pub fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        self.file
            .read_exact_at(buf, pos)
            .map_err(|e| LogError::io("reading segment", &self.path, e))
    }

    pub fn corrupt(&self, position: u64, offset: u64, reason: impl ToString) -> LogError {
        LogError::CorruptSegment {
            file: self.path.clone(),
            position,
            offset,
            reason: reason.to_string(),
        }
    }
}

/// What stopped a scan before its end.
#[derive(Debug)]
pub enum ScanStop {
    /// I/O failed.
    Io(LogError),
    /// The bytes at `position` are not a whole valid batch (torn, corrupt, out of order).
    Bad { position: u64, reason: DecodeError },
}

/// One step of a [`BatchScanner`]: (position, header, the batch's bytes), `None` at the end.
pub type ScanItem<'a> = std::result::Result<Option<(u64, BatchHeader, &'a [u8])>, ScanStop>;

/// Sequential reader of batches in `[pos, end)` of a segment through a large buffer.
pub struct BatchScanner<'a> {
    seg: &'a SegmentFile,
    pos: u64,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
    chunk: usize,
    /// Offset after the previous batch (to check offsets increase).
    pub prev_next_offset: Option<u64>,
    /// Require each batch to start exactly at the previous batch's next offset (the
    /// first one at `prev_next_offset`, or at the segment's base if that is unset): true
    /// of everything the writer appends, and what tells a recycled file's stale batches
    /// (valid CRCs, older offsets) from the data. Off for closed segments, where the
    /// cleaner leaves offset gaps.
    pub contiguous: bool,
}

impl<'a> BatchScanner<'a> {
    pub fn new(seg: &'a SegmentFile, pos: u64, end: u64) -> Self {
        BatchScanner {
            seg,
            pos,
            end,
            buf: Vec::new(),
            buf_start: pos,
            chunk: 1 << 20,
            prev_next_offset: None,
            contiguous: false,
        }
    }

    /// A scanner that requires gapless batches (see [`BatchScanner::contiguous`]), the
    /// first one starting at offset `first`.
    pub fn contiguous_from(seg: &'a SegmentFile, pos: u64, end: u64, first: u64) -> Self {
        let mut s = BatchScanner::new(seg, pos, end);
        s.prev_next_offset = Some(first);
        s.contiguous = true;
        s
    }

    fn ensure(&mut self, from: u64, to: u64) -> Result<bool> {
        if to > self.end {
            return Ok(false);
        }
        let have_end = self.buf_start + self.buf.len() as u64;
        if from >= self.buf_start && to <= have_end {
            return Ok(true);
        }
        let want = ((to - from) as usize).max(self.chunk);
        let n = want.min((self.end - from) as usize);
        self.buf.resize(n, 0);
        self.buf_start = from;
        self.seg.read_exact_at(&mut self.buf, from)?;
        Ok(true)
    }

    /// The next batch (CRC-checked) and its position, `Ok(None)` at exactly `end`.
    pub fn next_batch(&mut self) -> ScanItem<'_> {
        if self.pos == self.end {
            return Ok(None);
        }
        let pos = self.pos;
        let bad = |reason| ScanStop::Bad {
            position: pos,
            reason,
        };
        if !self
            .ensure(pos, pos + HEADER_LEN as u64)
            .map_err(ScanStop::Io)?
        {
            return Err(bad(DecodeError::Truncated {
                need: HEADER_LEN,
                have: (self.end - pos) as usize,
            }));
        }
        let off = (pos - self.buf_start) as usize;
        let h = BatchHeader::parse(&self.buf[off..]).map_err(bad)?;
        let total = h.total_len() as u64;
        if !self.ensure(pos, pos + total).map_err(ScanStop::Io)? {
            return Err(bad(DecodeError::Truncated {
                need: total as usize,
                have: (self.end - pos) as usize,
            }));
        }
        let off = (pos - self.buf_start) as usize;
        let slice = &self.buf[off..off + total as usize];
        let h = verify_batch(slice).map_err(bad)?;
        if h.base_offset < self.seg.base_offset
            || self.prev_next_offset.is_some_and(|p| h.base_offset < p)
        {
            return Err(bad(DecodeError::Malformed(
                "batch offset below the previous batch or the segment base",
            )));
        }
        if self.contiguous && h.base_offset != self.prev_next_offset.unwrap_or(self.seg.base_offset)
        {
            return Err(bad(DecodeError::Malformed(
                "batch does not continue the previous batch's offsets (stale or foreign data)",
            )));
        }
        self.prev_next_offset = Some(h.next_offset());
        self.pos = pos + total;
        Ok(Some((pos, h, slice)))
    }
}
