//! The on-disk spill of streamed (still open) transactions.
//!
//! With `streaming` on, Postgres sends a large transaction in blocks while it is still
//! open (Stream Start … Stream Stop), interleaved with other transactions, and ends it
//! with Stream Commit or Stream Abort. Records must reach the log in commit order, so the
//! blocks cannot be appended as they come: each top-level transaction's messages go to a
//! file of its own, `<dir>/<xid>.spill`, and are read back in order at its Stream Commit.
//! Memory stays bounded by one write buffer per open streamed transaction, whatever the
//! transaction's size.
//!
//! # Invariants
//!
//! - A file holds the raw pgoutput messages of one top-level transaction, in the order the
//!   server sent them, each as `u32 length (BE) | u64 wal_start (BE) | message bytes`.
//!   Relation and Type messages are kept with the data: they are applied at replay, in
//!   stream order, exactly as Postgres' own subscriber does.
//! - Subtransaction aborts (Stream Abort with `subxid != xid`) do not rewrite the file: the
//!   aborted subxids are remembered and their data messages skipped at replay. Relation and
//!   Type messages are never skipped — the server sends a relation's schema once per
//!   streamed transaction, whichever subtransaction triggered it.
//! - Every byte written to a spill file is counted in the shared disk budget
//!   ([`DiskBudget`], with the log's segments) until its file is removed; the caller asks
//!   [`DiskBudget::has_room`] before it spills more.
//! - Files never outlive the process's view of the stream: the directory is emptied when
//!   the store opens (after a crash or reconnect the server sends every open transaction
//!   again from its start), a whole-transaction abort or a skipped commit deletes the file,
//!   and a [`SpillReader`] deletes its file when dropped.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use cdc_schemas::Lsn;

use crate::DiskBudget;

/// Write buffer per open streamed transaction.
const WRITE_BUFFER: usize = 64 * 1024;
/// Largest message accepted back from a spill file (a sanity bound: pgoutput messages
/// are bounded by Postgres' 1 GB field limit).
const MAX_MESSAGE: u32 = 1 << 30;

/// A spill failure, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("spill file {path}: {op}: {source}")]
pub struct SpillError {
    pub path: PathBuf,
    pub op: &'static str,
    #[source]
    pub source: io::Error,
}

impl SpillError {
    fn new(path: &Path, op: &'static str, source: io::Error) -> Self {
        SpillError {
            path: path.to_path_buf(),
            op,
            source,
        }
    }

    /// Out of space (or quota): the operator can free space and the source retry.
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self.source.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        )
    }
}

struct SpillFile {
    path: PathBuf,
    writer: BufWriter<File>,
    aborted_subxids: HashSet<u32>,
    messages: u64,
    bytes: u64,
}

/// The spill files of the open streamed transactions.
pub struct SpillStore {
    dir: PathBuf,
    open: HashMap<u32, SpillFile>,
    budget: DiskBudget,
}

impl SpillStore {
    /// Opens `dir` (created if missing), removing spill files left by an earlier run.
    pub fn open(dir: &Path, budget: DiskBudget) -> Result<SpillStore, SpillError> {
        fs::create_dir_all(dir).map_err(|e| SpillError::new(dir, "creating the directory", e))?;
        let rd = fs::read_dir(dir).map_err(|e| SpillError::new(dir, "listing", e))?;
        for ent in rd {
            let ent = ent.map_err(|e| SpillError::new(dir, "listing", e))?;
            let p = ent.path();
            if p.extension().and_then(|e| e.to_str()) == Some("spill") {
                fs::remove_file(&p).map_err(|e| SpillError::new(&p, "removing a stale file", e))?;
            }
        }
        Ok(SpillStore {
            dir: dir.to_path_buf(),
            open: HashMap::new(),
            budget,
        })
    }

    /// Number of open streamed transactions.
    pub fn open_transactions(&self) -> usize {
        self.open.len()
    }

    /// Appends one message of top-level transaction `xid`.
    pub fn append(&mut self, xid: u32, wal_start: Lsn, msg: &[u8]) -> Result<(), SpillError> {
        let f = match self.open.entry(xid) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let path = self.dir.join(format!("{xid}.spill"));
                let file =
                    File::create(&path).map_err(|e| SpillError::new(&path, "creating", e))?;
                v.insert(SpillFile {
                    path,
                    writer: BufWriter::with_capacity(WRITE_BUFFER, file),
                    aborted_subxids: HashSet::new(),
                    messages: 0,
                    bytes: 0,
                })
            }
        };
        let len = u32::try_from(msg.len()).map_err(|_| {
            SpillError::new(
                &f.path,
                "writing",
                io::Error::new(io::ErrorKind::InvalidInput, "message over 4 GiB"),
            )
        })?;
        let mut head = [0u8; 12];
        head[..4].copy_from_slice(&len.to_be_bytes());
        head[4..].copy_from_slice(&wal_start.0.to_be_bytes());
        f.writer
            .write_all(&head)
            .and_then(|_| f.writer.write_all(msg))
            .map_err(|e| SpillError::new(&f.path, "writing", e))?;
        f.messages += 1;
        f.bytes += 12 + msg.len() as u64;
        self.budget.add(12 + msg.len() as u64);
        Ok(())
    }

    /// Stream Abort: the whole transaction (`subxid == xid`) or one subtransaction.
    pub fn abort(&mut self, xid: u32, subxid: u32) {
        if xid == subxid {
            if let Some(f) = self.open.remove(&xid) {
                drop(f.writer);
                let _ = fs::remove_file(&f.path);
                self.budget.release(f.bytes);
            }
        } else if let Some(f) = self.open.get_mut(&xid) {
            f.aborted_subxids.insert(subxid);
        }
    }

    /// Stream Commit: the transaction's messages for replay (`None`: nothing was spilled).
    pub fn take(&mut self, xid: u32) -> Result<Option<SpillReader>, SpillError> {
        let Some(f) = self.open.remove(&xid) else {
            return Ok(None);
        };
        let SpillFile {
            path,
            writer,
            aborted_subxids,
            messages,
            bytes,
        } = f;
        writer
            .into_inner()
            .map_err(|e| SpillError::new(&path, "writing", e.into_error()))?;
        let file = File::open(&path).map_err(|e| SpillError::new(&path, "reopening", e))?;
        Ok(Some(SpillReader {
            reader: BufReader::with_capacity(WRITE_BUFFER, file),
            budget: self.budget.clone(),
            path,
            aborted_subxids,
            messages,
            bytes,
            buf: BytesMut::new(),
        }))
    }

    /// Discards a transaction (a commit that is skipped as already in the log).
    pub fn discard(&mut self, xid: u32) {
        self.abort(xid, xid);
    }
}

impl Drop for SpillStore {
    fn drop(&mut self) {
        for (_, f) in self.open.drain() {
            drop(f.writer);
            let _ = fs::remove_file(&f.path);
            self.budget.release(f.bytes);
        }
    }
}

/// Reads one spilled transaction back, in order; deletes the file when dropped.
pub struct SpillReader {
    reader: BufReader<File>,
    /// The file's bytes leave the budget when it is removed.
    budget: DiskBudget,
    path: PathBuf,
    aborted_subxids: HashSet<u32>,
    messages: u64,
    bytes: u64,
    buf: BytesMut,
}

impl SpillReader {
    /// Messages and bytes spilled.
    pub fn size(&self) -> (u64, u64) {
        (self.messages, self.bytes)
    }

    /// Whether data messages of `xid` (a subtransaction) are to be skipped.
    pub fn is_aborted(&self, xid: u32) -> bool {
        self.aborted_subxids.contains(&xid)
    }

    /// The next message and its `wal_start`; `None` at the end.
    pub fn next_message(&mut self) -> Result<Option<(Lsn, Bytes)>, SpillError> {
        let mut head = [0u8; 12];
        match self.reader.read_exact(&mut head[..1]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(SpillError::new(&self.path, "reading", e)),
        }
        self.reader
            .read_exact(&mut head[1..])
            .map_err(|e| SpillError::new(&self.path, "reading", e))?;
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if len > MAX_MESSAGE {
            return Err(SpillError::new(
                &self.path,
                "reading",
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("message length {len} out of range (file damaged?)"),
                ),
            ));
        }
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&head[4..]);
        // One buffer for the whole replay: split_to hands out the message without a copy
        // and the next reserve reuses the space once the previous message is dropped.
        self.buf.clear();
        self.buf.resize(len as usize, 0);
        self.reader
            .read_exact(&mut self.buf[..])
            .map_err(|e| SpillError::new(&self.path, "reading", e))?;
        let msg = self.buf.split_to(len as usize).freeze();
        Ok(Some((Lsn(u64::from_be_bytes(lsn)), msg)))
    }
}

impl Drop for SpillReader {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cdc-spill-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn round_trip_in_order_and_files_removed() {
        let d = tmp();
        fs::write(d.join("77.spill"), b"stale").unwrap();
        let budget = DiskBudget::unlimited();
        let mut s = SpillStore::open(&d, budget.clone()).unwrap();
        assert!(!d.join("77.spill").exists(), "stale files are removed");
        for i in 0..10_000u64 {
            let xid = if i % 2 == 0 { 10 } else { 11 };
            s.append(xid, Lsn(i), format!("m{i}").as_bytes()).unwrap();
        }
        assert_eq!(
            budget.own_bytes(),
            10_000 * 12 + 48_890,
            "every spilled byte counts"
        );
        s.abort(11, 11);
        assert!(!d.join("11.spill").exists());
        s.abort(10, 12);
        let mut r = s.take(10).unwrap().unwrap();
        assert_eq!(r.size().0, 5_000);
        assert!(r.is_aborted(12) && !r.is_aborted(10));
        let mut n = 0u64;
        let mut held = Vec::new();
        while let Some((lsn, m)) = r.next_message().unwrap() {
            assert_eq!(lsn, Lsn(n * 2));
            assert_eq!(&m[..], format!("m{}", n * 2).as_bytes());
            held.push(m);
            n += 1;
        }
        assert_eq!(n, 5_000);
        // Messages handed out stay valid after later reads.
        assert_eq!(&held[0][..], b"m0");
        drop(r);
        assert!(!d.join("10.spill").exists());
        assert_eq!(budget.own_bytes(), 0, "removed files leave the budget");
        assert!(s.take(10).unwrap().is_none());
        s.append(5, Lsn(1), b"x").unwrap();
        drop(s);
        assert!(
            !d.join("5.spill").exists(),
            "dropping the store removes open files"
        );
        assert_eq!(budget.own_bytes(), 0);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn damaged_length_is_an_error_not_a_panic() {
        let d = tmp();
        let mut s = SpillStore::open(&d, DiskBudget::unlimited()).unwrap();
        s.append(1, Lsn(1), b"abc").unwrap();
        s.open.get_mut(&1).unwrap().writer.flush().unwrap();
        fs::write(
            d.join("1.spill"),
            [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1],
        )
        .unwrap();
        let mut r = s.take(1).unwrap().unwrap();
        let e = r.next_message().unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
