//! Bounded memory for `cdc verify --log` (`--memory-mb`): while the log view's map of
//! hashes fits the budget it stays in memory; past it, the log's changes of the table and
//! the source's rows are partitioned by key hash into K bucket files in a temporary
//! directory and compared bucket by bucket, each bucket's map within the budget.
//!
//! What it owns: the [`Budget`] (when a map has no room for one more key), the rebuild of
//! the table from its changes ([`Rebuild`], used in memory and per bucket alike, so both
//! ways give one answer), the temporary directory ([`SpillDir`]: created when spilling
//! starts, removed when dropped — at the end, and on an error too), the bucket files, and
//! the per-bucket comparison ([`Spill::compare`]).
//!
//! Files (all integers little-endian, fixed-size records, no header):
//! - `log-<i>`: the log's changes of the keys of bucket `i`, in the order the log view's
//!   scan met them, 25 bytes each: byte 0 the kind (0 upsert, 1 delete, 2 truncate),
//!   bytes 1..9 the key hash, 9..17 the row hash (0 for a delete or a truncate), 17..25 the
//!   record's log time (ms, i64). A truncate has no key and is written to every bucket.
//!   The map as it was when spilling started comes first, as upserts.
//! - `src-<i>`: the source's rows of the keys of bucket `i`, in source order, 24 bytes
//!   each: key hash, row hash, the byte offset of the row in `rows`.
//! - `rows`: every source row, in source order, one line each: the JSON `[key, after]`
//!   (what a difference prints; only the differing rows are read back).
//! - a bucket whose map would not fit is split again (by other bits of the key hash) into
//!   `log-<i>.<j>` / `src-<i>.<j>`, recursively.
//!
//! Invariants: all the records of a key are in one bucket, in log order, and every
//! truncate is in every bucket in log order relative to them; the rebuild of one key
//! depends only on its own records, the truncates and the largest truncate time of the
//! whole log — so a bucket's rebuild gives, for its keys, exactly what the in-memory
//! rebuild gives. The differences kept when more than `--max-report` differ are the same
//! either way: those first in source order, then the view's extra keys of smallest hash.

use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::compare::JsonRow;
use super::VerifyError;

/// Bytes of one slot of the rebuilt map's table: the entry and its control byte.
const SLOT_BYTES: usize = std::mem::size_of::<(u64, (u64, i64))>() + 1;
/// Buckets at most on the first split (open files; more are made by splitting again).
pub const MAX_BUCKETS: usize = 256;
/// Splits of one bucket at most before giving up (each divides its keys by 2 or more).
const MAX_LEVEL: u32 = 8;
const LOG_RECORD: usize = 25;
const SRC_RECORD: usize = 24;

/// How much the rebuilt map may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The bytes of `--memory-mb`.
    pub bytes: usize,
    /// Keys a map may hold (the capacity of the largest table that fits `bytes`).
    pub max_keys: usize,
}

impl Budget {
    pub fn from_mb(mb: usize) -> Budget {
        let bytes = mb.max(1) << 20;
        // A table of `slots` slots (a power of two) holds 7/8 of them.
        let mut slots = 16usize;
        while slots * 2 * SLOT_BYTES <= bytes {
            slots *= 2;
        }
        Budget {
            bytes,
            max_keys: slots / 8 * 7,
        }
    }

    /// The same budget, but at most `keys` keys in a map (tests force spilling with it).
    pub fn with_keys(self, keys: usize) -> Budget {
        Budget {
            max_keys: keys.max(1),
            ..self
        }
    }

    /// Whether one more insert keeps `map` within the budget: fewer than `max_keys` keys,
    /// and no reallocation past them (an insert into a full table — `capacity() ==
    /// len()`, counting removed slots — may double it).
    pub fn room_for_one<V>(&self, map: &HashMap<u64, V>) -> bool {
        let (len, cap) = (map.len(), map.capacity());
        len < self.max_keys && (cap > len || cap < self.max_keys)
    }

    /// The memory one chunk of source rows may take (their decoded maps): a quarter of
    /// the budget, within 256 KiB and 8 MiB (rows beside the in-memory map of the log, or
    /// the spill's buffers; past 8 MiB larger chunks save nothing).
    pub fn chunk_bytes(&self) -> usize {
        (self.bytes / 4).clamp(256 << 10, 8 << 20)
    }

    /// The buffer of each of `files` open bucket files.
    pub(super) fn buffer(&self, files: usize) -> usize {
        (self.bytes / 8 / files.max(1)).clamp(4 << 10, 64 << 10)
    }

    /// Buckets for at most `keys` keys, each to hold at most 3/4 of `max_keys`.
    pub fn buckets_for(&self, keys: u64) -> usize {
        let per = (self.max_keys as u64 * 3 / 4).max(1);
        (keys.div_ceil(per) as usize).clamp(2, MAX_BUCKETS)
    }
}

/// One change of the table, by hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Upsert { key: u64, row: u64, ts: i64 },
    Delete { key: u64, ts: i64 },
    Truncate { ts: i64 },
}

impl Event {
    fn encode(&self) -> [u8; LOG_RECORD] {
        let (kind, key, row, ts) = match *self {
            Event::Upsert { key, row, ts } => (0u8, key, row, ts),
            Event::Delete { key, ts } => (1, key, 0, ts),
            Event::Truncate { ts } => (2, 0, 0, ts),
        };
        let mut b = [0u8; LOG_RECORD];
        b[0] = kind;
        b[1..9].copy_from_slice(&key.to_le_bytes());
        b[9..17].copy_from_slice(&row.to_le_bytes());
        b[17..25].copy_from_slice(&ts.to_le_bytes());
        b
    }

    fn decode(b: &[u8; LOG_RECORD]) -> Option<Event> {
        let key = u64::from_le_bytes(b[1..9].try_into().unwrap());
        let row = u64::from_le_bytes(b[9..17].try_into().unwrap());
        let ts = i64::from_le_bytes(b[17..25].try_into().unwrap());
        match b[0] {
            0 => Some(Event::Upsert { key, row, ts }),
            1 => Some(Event::Delete { key, ts }),
            2 => Some(Event::Truncate { ts }),
            _ => None,
        }
    }
}

/// The table rebuilt from its changes: key hash → (row hash, log time of its latest
/// record). A truncate clears every key whose latest record is not newer than it (the
/// truncate is in one partition, the keys in all of them: log time is their only order),
/// and at the end every key older than the newest truncate goes.
#[derive(Debug, Default)]
pub struct Rebuild {
    pub map: HashMap<u64, (u64, i64)>,
    /// The newest truncate's log time, if any.
    pub truncated: Option<i64>,
}

impl Rebuild {
    pub fn apply(&mut self, ev: Event) {
        match ev {
            Event::Upsert { key, row, ts } => {
                self.map.insert(key, (row, ts));
            }
            Event::Delete { key, .. } => {
                self.map.remove(&key);
            }
            Event::Truncate { ts } => {
                self.map.retain(|_, (_, t)| *t > ts);
                self.note_truncate(ts);
            }
        }
    }

    pub fn note_truncate(&mut self, ts: i64) {
        self.truncated = Some(self.truncated.map_or(ts, |t| t.max(ts)));
    }

    /// The end of the log: keys older than the newest truncate `truncated` (the whole
    /// log's) go.
    pub fn finish(&mut self, truncated: Option<i64>) {
        if let Some(tr) = truncated {
            self.map.retain(|_, (_, t)| *t >= tr);
        }
    }
}

/// The smallest `cap` values pushed, and how many were pushed.
#[derive(Debug)]
pub struct Smallest<T: Ord> {
    heap: BinaryHeap<T>,
    cap: usize,
    pushed: u64,
}

impl<T: Ord> Smallest<T> {
    pub fn new(cap: usize) -> Self {
        Smallest {
            heap: BinaryHeap::with_capacity(cap.min(1 << 16)),
            cap,
            pushed: 0,
        }
    }

    pub fn push(&mut self, x: T) {
        self.pushed += 1;
        if self.heap.len() < self.cap {
            self.heap.push(x);
        } else if self.heap.peek().is_some_and(|top| x < *top) {
            self.heap.pop();
            self.heap.push(x);
        }
    }

    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Pushed but not kept.
    pub fn dropped(&self) -> u64 {
        self.pushed - self.heap.len() as u64
    }

    /// The kept values, ascending.
    pub fn into_sorted(self) -> Vec<T> {
        self.heap.into_sorted_vec()
    }
}

/// The bucket of a key hash at a split level: a mix of the hash with the level, so that
/// splitting a bucket again uses other bits than the split that made it.
pub fn bucket_of(key: u64, level: u32, k: usize) -> usize {
    let mut z = key ^ (level as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % k as u64) as usize
}

/// A spill's error: what failed, naming the directory (and saying so when the disk is
/// full).
pub(super) fn io_err(dir: &Path, what: &str, e: io::Error) -> VerifyError {
    let full = e.kind() == io::ErrorKind::StorageFull
        || matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT));
    VerifyError::Failed(format!(
        "spilling to {}: {what}: {e}{}",
        dir.display(),
        if full {
            " (the disk is full: free space there, point --spill-dir at another disk, or raise --memory-mb)"
        } else {
            ""
        }
    ))
}

/// The temporary directory of one verification; removed (with its files) when dropped.
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
}

impl SpillDir {
    /// A new directory in the first of `parents` where one can be made.
    pub fn create(parents: &[PathBuf]) -> Result<SpillDir, VerifyError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("cdc-verify-spill-{}-{nanos:09}", std::process::id());
        let mut last = None;
        for parent in parents {
            let path = parent.join(&name);
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(SpillDir { path }),
                Err(e) => last = Some(io_err(parent, "creating a temporary directory", e)),
            }
        }
        Err(last.unwrap_or_else(|| VerifyError::Failed("no directory to spill to".into())))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Fixed-size records appended to a file through a buffer.
pub(super) struct Out {
    w: BufWriter<File>,
}

impl Out {
    pub(super) fn create(dir: &Path, path: &Path, buffer: usize) -> Result<Out, VerifyError> {
        let f = File::create(path).map_err(|e| io_err(dir, "creating a bucket file", e))?;
        Ok(Out {
            w: BufWriter::with_capacity(buffer, f),
        })
    }

    pub(super) fn put(&mut self, dir: &Path, b: &[u8]) -> Result<(), VerifyError> {
        self.w
            .write_all(b)
            .map_err(|e| io_err(dir, "writing a bucket file", e))
    }

    pub(super) fn close(self, dir: &Path) -> Result<(), VerifyError> {
        self.w
            .into_inner()
            .map(drop)
            .map_err(|e| io_err(dir, "writing a bucket file", e.into_error()))
    }
}

/// Reads fixed-size records of a file in order.
pub(super) struct In<const N: usize> {
    r: BufReader<File>,
    pub(super) left: u64,
}

impl<const N: usize> In<N> {
    pub(super) fn open(dir: &Path, path: &Path, buffer: usize) -> Result<In<N>, VerifyError> {
        let f = File::open(path).map_err(|e| io_err(dir, "reading a bucket file", e))?;
        let len = f
            .metadata()
            .map_err(|e| io_err(dir, "reading a bucket file", e))?
            .len();
        Ok(In {
            r: BufReader::with_capacity(buffer, f),
            left: len / N as u64,
        })
    }

    pub(super) fn next(&mut self, dir: &Path) -> Result<Option<[u8; N]>, VerifyError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let mut b = [0u8; N];
        self.r
            .read_exact(&mut b)
            .map_err(|e| io_err(dir, "reading a bucket file", e))?;
        Ok(Some(b))
    }
}

fn src_record(key: u64, row: u64, at: u64) -> [u8; SRC_RECORD] {
    let mut b = [0u8; SRC_RECORD];
    b[0..8].copy_from_slice(&key.to_le_bytes());
    b[8..16].copy_from_slice(&row.to_le_bytes());
    b[16..24].copy_from_slice(&at.to_le_bytes());
    b
}

fn src_fields(b: &[u8; SRC_RECORD]) -> (u64, u64, u64) {
    let f = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    (f(0), f(8), f(16))
}

/// A source row that differs, by where it is: its offset in `rows` (source order), its
/// key hash, and whether the view has a row of its key.
pub type SourceDiff = (u64, u64, bool);

/// What the bucket comparison found.
#[derive(Debug)]
pub struct Found {
    /// Rows of the rebuilt table.
    pub view_rows: u64,
    /// The source rows that differ (the first `cap` in source order kept).
    pub source: Smallest<SourceDiff>,
    /// The view's keys the source lacks (the `cap` of smallest hash kept).
    pub extras: Smallest<u64>,
    /// Buckets compared, counting those made by splitting again.
    pub buckets: u64,
}

/// A verification spilled to bucket files.
pub struct Spill {
    budget: Budget,
    k: usize,
    /// The log's bucket files while they are written.
    log: Vec<Out>,
    /// The source's bucket files and the rows file while they are written.
    src: Vec<Out>,
    rows: Option<Out>,
    rows_at: u64,
    /// The line of one row, reused.
    line: Vec<u8>,
    /// The newest truncate of the whole log.
    truncated: Option<i64>,
    /// Last: dropped after the open files.
    dir: SpillDir,
}

impl Spill {
    /// Starts spilling into a new directory in the first of `parents` that takes one, in
    /// `k` buckets, with `state` (the map rebuilt so far) as the first records.
    pub fn start(
        parents: &[PathBuf],
        budget: Budget,
        k: usize,
        state: &HashMap<u64, (u64, i64)>,
    ) -> Result<Spill, VerifyError> {
        let dir = SpillDir::create(parents)?;
        let k = k.max(1);
        let buffer = budget.buffer(k);
        let log = (0..k)
            .map(|i| Out::create(dir.path(), &dir.path().join(format!("log-{i}")), buffer))
            .collect::<Result<Vec<_>, _>>()?;
        let mut s = Spill {
            budget,
            k,
            log,
            src: Vec::new(),
            rows: None,
            rows_at: 0,
            line: Vec::new(),
            truncated: None,
            dir,
        };
        for (&key, &(row, ts)) in state {
            s.log_event(Event::Upsert { key, row, ts })?;
        }
        Ok(s)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn buckets(&self) -> usize {
        self.k
    }

    /// The next change of the log (in the scan's order).
    pub fn log_event(&mut self, ev: Event) -> Result<(), VerifyError> {
        let b = ev.encode();
        let dir = self.dir.path();
        match ev {
            Event::Upsert { key, .. } | Event::Delete { key, .. } => {
                self.log[bucket_of(key, 0, self.k)].put(dir, &b)
            }
            Event::Truncate { ts } => {
                self.truncated = Some(self.truncated.map_or(ts, |t| t.max(ts)));
                self.log.iter_mut().try_for_each(|o| o.put(dir, &b))
            }
        }
    }

    /// The end of the log: its bucket files closed, `truncated` the newest truncate of
    /// the whole log (also those before spilling started).
    pub fn end_log(&mut self, truncated: Option<i64>) -> Result<(), VerifyError> {
        self.truncated = match (self.truncated, truncated) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        for o in std::mem::take(&mut self.log) {
            o.close(self.dir.path())?;
        }
        Ok(())
    }

    /// The next source row (in source order), with its key's and row's hashes.
    pub fn source_row(
        &mut self,
        key_hash: u64,
        row_hash: u64,
        key: &JsonRow,
        after: &JsonRow,
    ) -> Result<(), VerifyError> {
        let dir = self.dir.path();
        if self.rows.is_none() {
            let buffer = self.budget.buffer(self.k + 1);
            self.src = (0..self.k)
                .map(|i| Out::create(dir, &dir.join(format!("src-{i}")), buffer))
                .collect::<Result<Vec<_>, _>>()?;
            self.rows = Some(Out::create(dir, &dir.join("rows"), 64 << 10)?);
        }
        self.line.clear();
        serde_json::to_writer(&mut self.line, &(key, after))
            .map_err(|e| VerifyError::Failed(format!("writing a source row: {e}")))?;
        self.line.push(b'\n');
        let rows = self.rows.as_mut().expect("opened above");
        rows.put(dir, &self.line)?;
        self.src[bucket_of(key_hash, 0, self.k)]
            .put(dir, &src_record(key_hash, row_hash, self.rows_at))?;
        self.rows_at += self.line.len() as u64;
        Ok(())
    }

    /// Compares bucket by bucket; `cap`: differences kept of each kind.
    pub fn compare(&mut self, cap: usize) -> Result<Found, VerifyError> {
        let dir = self.dir.path().to_path_buf();
        for o in std::mem::take(&mut self.src) {
            o.close(&dir)?;
        }
        if let Some(o) = self.rows.take() {
            o.close(&dir)?;
        }
        let mut found = Found {
            view_rows: 0,
            source: Smallest::new(cap),
            extras: Smallest::new(cap),
            buckets: 0,
        };
        let mut rb = Rebuild::default();
        for i in 0..self.k {
            let (log, src) = (dir.join(format!("log-{i}")), dir.join(format!("src-{i}")));
            if !src.exists() {
                File::create(&src).map_err(|e| io_err(&dir, "creating a bucket file", e))?;
            }
            self.compare_bucket(&log, &src, 0, &mut rb, &mut found)?;
        }
        Ok(found)
    }

    /// One bucket: its log rebuilt (split again if it does not fit), then its source rows
    /// taken out of it; what remains the source lacks.
    fn compare_bucket(
        &self,
        log: &Path,
        src: &Path,
        level: u32,
        rb: &mut Rebuild,
        found: &mut Found,
    ) -> Result<(), VerifyError> {
        let dir = self.dir.path();
        let buffer = self.budget.buffer(2);
        rb.map.clear();
        let mut input = In::<LOG_RECORD>::open(dir, log, buffer)?;
        // The whole table at once (as the in-memory rebuild does), not grown by doubling.
        let want = (input.left as usize).min(self.budget.max_keys);
        rb.map.reserve(want);
        let mut fits = true;
        while let Some(b) = input.next(dir)? {
            let ev = Event::decode(&b)
                .ok_or_else(|| VerifyError::Failed(format!("{}: a bad record", log.display())))?;
            if matches!(ev, Event::Upsert { .. }) && !self.budget.room_for_one(&rb.map) {
                fits = false;
                break;
            }
            rb.apply(ev);
        }
        drop(input);
        if !fits {
            rb.map = HashMap::new();
            return self.split(log, src, level, rb, found);
        }
        rb.finish(self.truncated);
        found.buckets += 1;
        found.view_rows += rb.map.len() as u64;
        let mut input = In::<SRC_RECORD>::open(dir, src, buffer)?;
        while let Some(b) = input.next(dir)? {
            let (key, row, at) = src_fields(&b);
            match rb.map.remove(&key) {
                Some((h, _)) if h == row => {}
                Some(_) => found.source.push((at, key, true)),
                None => found.source.push((at, key, false)),
            }
        }
        for &key in rb.map.keys() {
            found.extras.push(key);
        }
        let _ = std::fs::remove_file(log);
        let _ = std::fs::remove_file(src);
        Ok(())
    }

    /// A bucket too large for the budget, split into smaller ones by the next level's
    /// bits, each compared in turn.
    fn split(
        &self,
        log: &Path,
        src: &Path,
        level: u32,
        rb: &mut Rebuild,
        found: &mut Found,
    ) -> Result<(), VerifyError> {
        let dir = self.dir.path();
        if level >= MAX_LEVEL {
            return Err(VerifyError::Failed(format!(
                "{}: a bucket of the log still holds more than {} keys after {level} splits",
                log.display(),
                self.budget.max_keys
            )));
        }
        let records = std::fs::metadata(log)
            .map_err(|e| io_err(dir, "reading a bucket file", e))?
            .len()
            / LOG_RECORD as u64;
        let k = self.budget.buckets_for(records).min(16);
        let buffer = self.budget.buffer(k + 1);
        let sub = |p: &Path, j: usize| PathBuf::from(format!("{}.{j}", p.display()));
        let mut outs = (0..k)
            .map(|j| Out::create(dir, &sub(log, j), buffer))
            .collect::<Result<Vec<_>, _>>()?;
        let mut input = In::<LOG_RECORD>::open(dir, log, buffer)?;
        while let Some(b) = input.next(dir)? {
            match Event::decode(&b) {
                Some(Event::Upsert { key, .. }) | Some(Event::Delete { key, .. }) => {
                    outs[bucket_of(key, level + 1, k)].put(dir, &b)?
                }
                _ => outs.iter_mut().try_for_each(|o| o.put(dir, &b))?,
            }
        }
        for o in outs {
            o.close(dir)?;
        }
        let mut outs = (0..k)
            .map(|j| Out::create(dir, &sub(src, j), buffer))
            .collect::<Result<Vec<_>, _>>()?;
        let mut input = In::<SRC_RECORD>::open(dir, src, buffer)?;
        while let Some(b) = input.next(dir)? {
            let (key, _, _) = src_fields(&b);
            outs[bucket_of(key, level + 1, k)].put(dir, &b)?;
        }
        for o in outs {
            o.close(dir)?;
        }
        let _ = std::fs::remove_file(log);
        let _ = std::fs::remove_file(src);
        tracing::debug!(bucket = %log.display(), records, parts = k, "verify: a bucket split again");
        for j in 0..k {
            self.compare_bucket(&sub(log, j), &sub(src, j), level + 1, rb, found)?;
        }
        Ok(())
    }

    /// The source row written at `at` (an offset [`Found::source`] gives): key and row.
    pub fn row_at(&self, at: u64) -> Result<(JsonRow, JsonRow), VerifyError> {
        json_line_at(self.dir.path(), "rows", at)
    }
}

/// The JSON line at byte `at` of file `name` in `dir` (a spilled row).
pub(super) fn json_line_at<T: serde::de::DeserializeOwned>(
    dir: &Path,
    name: &str,
    at: u64,
) -> Result<T, VerifyError> {
    let mut f = File::open(dir.join(name)).map_err(|e| io_err(dir, "reading rows", e))?;
    f.seek(SeekFrom::Start(at))
        .map_err(|e| io_err(dir, "reading rows", e))?;
    let mut line = Vec::new();
    BufReader::with_capacity(8 << 10, f)
        .read_until(b'\n', &mut line)
        .map_err(|e| io_err(dir, "reading rows", e))?;
    serde_json::from_slice(&line)
        .map_err(|e| VerifyError::Failed(format!("{}: a bad row: {e}", dir.display())))
}

#[cfg(test)]
#[path = "spill_tests.rs"]
mod tests;
