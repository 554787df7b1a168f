//! The ledger: the single small file that says what is durable. Owns its format, the
//! in-memory [`LedgerState`] it is written from and the open [`LedgerFile`] it is written
//! through.
//!
//! Invariant: the ledger is only written *after* the segment data it describes has been
//! fsynced, and a write is atomic (see below). So after any crash, each partition's
//! `durable_end` is a batch boundary whose bytes are on disk, and the `checkpoint` (the
//! source position the pipeline passed to `flush`) covers exactly the records below those
//! ends. On open, everything past `durable_end` is cut off. `log_start` is written
//! *before* retention deletes segment files, so a crash mid-delete leaves files the next
//! open deletes, never a log start pointing at missing data.
//!
//! # Atomicity: two alternating, CRC-checked slots, written in place
//!
//! The file holds two slots. A write goes to the slot that does *not* hold the newest
//! valid state, with sequence number newest + 1, followed by one `fdatasync` (the file
//! never changes size, so no metadata has to be synced: no rename, no directory fsync).
//! A reader (open, or a read-only process following a live writer) decodes both slots and
//! takes the valid one with the highest sequence. A torn or half-written slot fails its
//! CRC, and the other slot — the previous state, untouched by this write — is used. Writes
//! are serialized (the `Log` holds the ledger mutex) and each one is synced before the next
//! starts, so at most the newest write can be torn. Slots are 4 KiB-aligned and a multiple
//! of 4 KiB long, so a write of one slot never rewrites a page of the other.
//!
//! A damaged slot is one of three things, told apart by the sequence its first 8 bytes
//! read: 0 = never written (a new file; not an event); one less than the valid slot's =
//! the older state (the next write replaces it; nothing lost); anything else = the newest
//! write, torn by a crash during it (its flush never returned: nothing acknowledged is
//! lost) or damaged after it completed (the records and checkpoint it made durable are
//! lost). The last case cannot be told from the first, so the loader reports it
//! ([`SlotFallback`], with the damaged slot decoded without its checksum when it still
//! parses) and a writer's `Log::open` logs it at error level, counts it, says what
//! recovery cut and writes the state it used over the damaged slot. A read-only open
//! only notes it at debug level: it may have raced the live writer's slot write.
//!
//! When the state outgrows a slot (many partitions, a large checkpoint), the whole file
//! is rebuilt with a slot twice the needed size, atomically (temp file + fsync + rename +
//! directory fsync, `fsutil::write_atomic`); that is rare and also how the file is created.
//!
//! # File `<dir>/ledger`, format 2 (integers big-endian)
//!
//! ```text
//! bytes [0, 4096): header, written once when the file is (re)built
//!    8  magic "CDCLEDG2"
//!    4  slot size S, u32: a multiple of 4096
//!    4  CRC-32C of the 12 bytes before
//!       zero padding to 4096
//! bytes [4096, 4096 + S): slot 0; bytes [4096 + S, 4096 + 2S): slot 1; each:
//!    8  sequence u64, +1 per write (1 = first write; 0 = never written)
//!    4  body length n, u32 (n <= S - 16)
//!    n  body
//!    4  CRC-32C of the sequence, length and body bytes
//!       (the rest of the slot is stale and ignored)
//! body:
//!    1  has_checkpoint u8 (0 or 1)
//!    4  checkpoint length u32 (0 when absent)
//!    n  checkpoint bytes (opaque to the log)
//!    4  partition count u32
//!  per partition:
//!    2  topic name length u16, then the UTF-8 name
//!    4  partition u32
//!    8  log_start u64   first offset still readable
//!    8  durable_end u64 offset after the last durable record (the high watermark)
//! ```
//!
//! # Format 1 (read for migration)
//!
//! Logs written before format 2 have a `ledger` replaced by temp file + rename on every
//! write: magic "CDCLEDG1", version u16 = 1, generation u64, then the body above, then a
//! CRC-32C of everything before it. A writer opening such a log reads it and rewrites it
//! as format 2 (atomically, before anything else is written); a read-only open just
//! reads it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{LogError, Result};
use crate::fsutil::{self, put_string16, unseal, Cursor};

const MAGIC_V1: &[u8; 8] = b"CDCLEDG1";
const MAGIC_V2: &[u8; 8] = b"CDCLEDG2";
const VERSION_V1: u16 = 1;
pub const FILE_NAME: &str = "ledger";
/// Size of the header block, and the alignment of slots.
const BLOCK: u64 = 4096;
/// sequence + length + CRC.
const SLOT_OVERHEAD: usize = 16;

/// Durable bounds of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionMark {
    pub log_start: u64,
    pub durable_end: u64,
}

/// What the ledger file holds, in memory. `generation` is the sequence number of the slot
/// it was read from / written to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerState {
    pub generation: u64,
    pub checkpoint: Option<Vec<u8>>,
    pub partitions: BTreeMap<(String, u32), PartitionMark>,
}

/// The newest ledger slot failed its checksum and the older one was loaded: the state
/// of the last completed ledger write may be lost (`Log::open` reports it loudly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotFallback {
    /// The slot that failed (0 or 1).
    pub corrupt_slot: usize,
    /// Why it failed.
    pub reason: String,
    /// The sequence number its header reads (unverified: may be damaged too).
    pub corrupt_sequence: u64,
    /// The sequence number of the slot that was loaded.
    pub used_sequence: u64,
    /// The damaged slot decoded without its checksum, when its bytes still parse: what the
    /// lost write most likely said (durable ends, checkpoint). A hint for the operator,
    /// never used as state.
    pub unverified: Option<LedgerState>,
}

/// Where a loaded state came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadedFormat {
    /// The old temp + rename file: must be rewritten before the first write.
    V1,
    /// Two slots of `slot_size` bytes; `newest` holds the state that was loaded.
    V2 { slot_size: u64, newest: usize },
}

impl LedgerState {
    /// The body (see the module docs), shared by both formats.
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        match &self.checkpoint {
            Some(c) => {
                out.push(1);
                out.extend_from_slice(&(c.len() as u32).to_be_bytes());
                out.extend_from_slice(c);
            }
            None => {
                out.push(0);
                out.extend_from_slice(&0u32.to_be_bytes());
            }
        }
        out.extend_from_slice(&(self.partitions.len() as u32).to_be_bytes());
        for ((topic, p), m) in &self.partitions {
            put_string16(out, topic);
            out.extend_from_slice(&p.to_be_bytes());
            out.extend_from_slice(&m.log_start.to_be_bytes());
            out.extend_from_slice(&m.durable_end.to_be_bytes());
        }
    }

    fn decode_body(c: &mut Cursor<'_>, generation: u64) -> std::result::Result<Self, String> {
        let has = c.u8()?;
        let len = c.u32()? as usize;
        let checkpoint = match has {
            0 => None,
            1 => Some(c.take(len)?.to_vec()),
            _ => return Err("bad checkpoint flag".into()),
        };
        let n = c.u32()?;
        let mut partitions = BTreeMap::new();
        for _ in 0..n {
            let topic = c.string16()?;
            let p = c.u32()?;
            let log_start = c.u64()?;
            let durable_end = c.u64()?;
            if log_start > durable_end {
                return Err(format!(
                    "{topic}-{p}: log start {log_start} beyond durable end {durable_end}"
                ));
            }
            partitions.insert(
                (topic, p),
                PartitionMark {
                    log_start,
                    durable_end,
                },
            );
        }
        if c.pos != c.buf.len() {
            return Err("trailing bytes".into());
        }
        Ok(LedgerState {
            generation,
            checkpoint,
            partitions,
        })
    }

    /// One format-2 slot image: sequence, length, body, CRC.
    pub fn encode_slot(&self, seq: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.partitions.len() * 40);
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        self.encode_body(&mut out);
        let n = (out.len() - 12) as u32;
        out[8..12].copy_from_slice(&n.to_be_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a slot that failed its checks as well as its bytes allow, ignoring the
    /// checksum (see [`SlotFallback::unverified`]).
    fn decode_slot_unverified(slot: &[u8]) -> Option<LedgerState> {
        let mut c = Cursor::new(slot);
        let seq = c.u64().ok()?;
        let n = c.u32().ok()? as usize;
        if seq == 0 || n > slot.len().saturating_sub(SLOT_OVERHEAD) {
            return None;
        }
        let body = c.take(n).ok()?;
        LedgerState::decode_body(&mut Cursor::new(body), seq).ok()
    }

    /// Decodes one slot; `Err` for a never-written, torn or corrupt slot.
    fn decode_slot(slot: &[u8]) -> std::result::Result<LedgerState, String> {
        let mut c = Cursor::new(slot);
        let seq = c.u64()?;
        let n = c.u32()? as usize;
        if seq == 0 {
            return Err("slot never written".into());
        }
        if n > slot.len().saturating_sub(SLOT_OVERHEAD) {
            return Err(format!("body length {n} exceeds the slot"));
        }
        let body = c.take(n)?;
        let stored = c.u32()?;
        let computed = crc32c::crc32c(&slot[..12 + n]);
        if stored != computed {
            return Err(format!(
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        LedgerState::decode_body(&mut Cursor::new(body), seq)
    }

    /// The whole format-2 file with `self` in slot 0 (sequence `generation`, at least 1)
    /// and slot 1 never written. Returns (bytes, slot size).
    pub(crate) fn encode_file(&self) -> (Vec<u8>, u64) {
        let seq = self.generation.max(1);
        let slot = self.encode_slot(seq);
        let slot_size = (slot.len() as u64 * 2).div_ceil(BLOCK).max(1) * BLOCK;
        let mut out = vec![0u8; (BLOCK + 2 * slot_size) as usize];
        out[..8].copy_from_slice(MAGIC_V2);
        out[8..12].copy_from_slice(&(slot_size as u32).to_be_bytes());
        let crc = crc32c::crc32c(&out[..12]);
        out[12..16].copy_from_slice(&crc.to_be_bytes());
        out[BLOCK as usize..BLOCK as usize + slot.len()].copy_from_slice(&slot);
        (out, slot_size)
    }

    /// Decodes a ledger file of either format.
    #[cfg(test)]
    pub fn decode(buf: &[u8]) -> std::result::Result<(LedgerState, LoadedFormat), String> {
        Self::decode_checked(buf).map(|(s, f, _)| (s, f))
    }

    /// [`LedgerState::decode`], also saying whether the newest slot was damaged and the
    /// older one used. A damaged slot whose sequence reads exactly one less than the
    /// loaded one is the older slot (the next write replaces it): not a fallback. A slot
    /// never written (sequence 0: a new file) is not one either.
    pub fn decode_checked(
        buf: &[u8],
    ) -> std::result::Result<(LedgerState, LoadedFormat, Option<SlotFallback>), String> {
        if buf.len() >= 8 && &buf[..8] == MAGIC_V1 {
            return Self::decode_v1(buf).map(|s| (s, LoadedFormat::V1, None));
        }
        if buf.len() < BLOCK as usize {
            return Err(format!("file of {} bytes is too short", buf.len()));
        }
        if &buf[..8] != MAGIC_V2 {
            return Err("bad magic".into());
        }
        let slot_size = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as u64;
        let crc = u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]);
        if crc != crc32c::crc32c(&buf[..12]) {
            return Err("header checksum mismatch".into());
        }
        if slot_size == 0 || slot_size % BLOCK != 0 {
            return Err(format!("bad slot size {slot_size}"));
        }
        if (buf.len() as u64) < BLOCK + 2 * slot_size {
            return Err(format!(
                "file of {} bytes is shorter than its two slots of {slot_size} bytes",
                buf.len()
            ));
        }
        let bytes = |i: usize| {
            let start = BLOCK as usize + i * slot_size as usize;
            &buf[start..start + slot_size as usize]
        };
        let fallback = |bad: usize, reason: String, used: &LedgerState| {
            let raw = bytes(bad);
            let corrupt_sequence = u64::from_be_bytes(raw[..8].try_into().unwrap_or([0; 8]));
            // Never written, or provably the older slot: nothing was lost.
            if corrupt_sequence == 0 || corrupt_sequence.checked_add(1) == Some(used.generation) {
                return None;
            }
            Some(SlotFallback {
                corrupt_slot: bad,
                reason,
                corrupt_sequence,
                used_sequence: used.generation,
                unverified: LedgerState::decode_slot_unverified(raw),
            })
        };
        let v2 = |newest| LoadedFormat::V2 { slot_size, newest };
        match (
            LedgerState::decode_slot(bytes(0)),
            LedgerState::decode_slot(bytes(1)),
        ) {
            (Ok(a), Ok(b)) if b.generation > a.generation => Ok((b, v2(1), None)),
            (Ok(a), Ok(_)) => Ok((a, v2(0), None)),
            (Ok(a), Err(why)) => {
                let f = fallback(1, why, &a);
                Ok((a, v2(0), f))
            }
            (Err(why), Ok(b)) => {
                let f = fallback(0, why, &b);
                Ok((b, v2(1), f))
            }
            (Err(a), Err(b)) => Err(format!("no valid slot (slot 0: {a}; slot 1: {b})")),
        }
    }

    fn decode_v1(buf: &[u8]) -> std::result::Result<LedgerState, String> {
        let body = unseal(buf)?;
        let mut c = Cursor::new(body);
        if c.take(8)? != MAGIC_V1 {
            return Err("bad magic".into());
        }
        let v = c.u16()?;
        if v != VERSION_V1 {
            return Err(format!("unsupported version {v}"));
        }
        let generation = c.u64()?;
        let rest = &body[c.pos..];
        LedgerState::decode_body(&mut Cursor::new(rest), generation)
    }

    /// Reads `<dir>/ledger`; `Ok(None)` if there is none yet.
    pub fn load(dir: &Path) -> Result<Option<(LedgerState, LoadedFormat)>> {
        Ok(Self::load_checked(dir)?.map(|(s, f, _)| (s, f)))
    }

    /// [`LedgerState::load`], also saying whether the newest slot was damaged
    /// ([`LedgerState::decode_checked`]).
    pub fn load_checked(
        dir: &Path,
    ) -> Result<Option<(LedgerState, LoadedFormat, Option<SlotFallback>)>> {
        let path = dir.join(FILE_NAME);
        let Some(buf) = fsutil::read_optional(&path)? else {
            return Ok(None);
        };
        LedgerState::decode_checked(&buf)
            .map(Some)
            .map_err(|reason| {
                LogError::corrupt_file(
                    "ledger",
                    &path,
                    reason,
                    "the log cannot tell what is durable: restore the log directory from a backup",
                )
            })
    }

    /// Bumps the generation and writes the state through `file` (one slot write + one
    /// fdatasync; see the module docs).
    /// Fails with `LogError::ReadOnly` when there is no open file (a read-only log).
    pub fn store(&mut self, file: &Mutex<Option<LedgerFile>>) -> Result<()> {
        let mut g = crate::partition::lock(file);
        let Some(f) = g.as_mut() else {
            return Err(LogError::ReadOnly(PathBuf::from("(read-only log)")));
        };
        self.generation = f.seq + 1;
        f.write(self)
    }
}

/// The open format-2 ledger file of a writer.
#[derive(Debug)]
pub struct LedgerFile {
    path: PathBuf,
    file: File,
    slot_size: u64,
    /// Slot holding the newest valid state.
    newest: usize,
    /// Its sequence number.
    seq: u64,
    buf: Vec<u8>,
}

impl LedgerFile {
    /// Builds a new format-2 file holding `state` (atomic replace) and opens it. Used to
    /// create the ledger, to migrate a format-1 file, and to grow the slots.
    pub fn create(dir: &Path, state: &mut LedgerState) -> Result<LedgerFile> {
        state.generation = state.generation.max(1);
        let (bytes, slot_size) = state.encode_file();
        let path = dir.join(FILE_NAME);
        fsutil::write_atomic(&path, &bytes)?;
        Self::open(dir, slot_size, 0, state.generation)
    }

    /// Opens the existing format-2 file for in-place slot writes.
    pub fn open(dir: &Path, slot_size: u64, newest: usize, seq: u64) -> Result<LedgerFile> {
        let path = dir.join(FILE_NAME);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| LogError::io("opening", &path, e))?;
        Ok(LedgerFile {
            path,
            file,
            slot_size,
            newest,
            seq,
            buf: Vec::new(),
        })
    }

    /// Writes `state` (whose generation is `self.seq + 1`) into the other slot.
    fn write(&mut self, state: &LedgerState) -> Result<()> {
        let seq = state.generation;
        self.buf.clear();
        self.buf.extend_from_slice(&seq.to_be_bytes());
        self.buf.extend_from_slice(&0u32.to_be_bytes());
        state.encode_body(&mut self.buf);
        let n = (self.buf.len() - 12) as u32;
        self.buf[8..12].copy_from_slice(&n.to_be_bytes());
        let crc = crc32c::crc32c(&self.buf);
        self.buf.extend_from_slice(&crc.to_be_bytes());
        if self.buf.len() as u64 > self.slot_size {
            // Outgrew the slot: rebuild the file (atomic replace) with bigger slots.
            let dir = self.path.parent().unwrap_or(Path::new(".")).to_path_buf();
            let mut s = state.clone();
            *self = LedgerFile::create(&dir, &mut s)?;
            tracing::debug!(slot_size = self.slot_size, "ledger slots grown");
            return Ok(());
        }
        let target = 1 - self.newest;
        let pos = BLOCK + target as u64 * self.slot_size;
        self.file
            .write_all_at(&self.buf, pos)
            .map_err(|e| LogError::io("writing", &self.path, e))?;
        self.file.sync_data().map_err(|e| LogError::FsyncFailed {
            path: self.path.clone(),
            source: e,
        })?;
        self.newest = target;
        self.seq = seq;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LedgerState {
        let mut s = LedgerState {
            generation: 7,
            checkpoint: Some(b"lsn:0/16B3748".to_vec()),
            ..Default::default()
        };
        s.partitions.insert(
            ("t".into(), 3),
            PartitionMark {
                log_start: 5,
                durable_end: 10,
            },
        );
        s
    }

    #[test]
    fn slot_round_trip_and_corruption() {
        let s = sample();
        let buf = s.encode_slot(7);
        assert_eq!(LedgerState::decode_slot(&buf).unwrap(), s);
        for i in 0..buf.len() {
            let mut b = buf.clone();
            b[i] ^= 0x40;
            assert!(LedgerState::decode_slot(&b).is_err());
            // A torn write: the tail is stale (zeros).
            let mut t = buf.clone();
            t[i..].fill(0);
            assert!(LedgerState::decode_slot(&t).is_err());
        }
    }

    #[test]
    fn two_slots_alternate_and_a_torn_slot_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sample();
        let f = Mutex::new(Some(LedgerFile::create(dir.path(), &mut s).unwrap()));
        let mut states = vec![s.clone()];
        for end in 11..20u64 {
            s.partitions.get_mut(&("t".into(), 3)).unwrap().durable_end = end;
            s.checkpoint = Some(end.to_be_bytes().to_vec());
            s.store(&f).unwrap();
            states.push(s.clone());
            let (got, fmt) = LedgerState::load(dir.path()).unwrap().unwrap();
            assert_eq!(got, s);
            assert!(matches!(fmt, LoadedFormat::V2 { .. }));
        }
        // Tear the newest slot anywhere: the previous state is read.
        let path = dir.path().join(FILE_NAME);
        let orig = std::fs::read(&path).unwrap();
        let (_, fmt) = LedgerState::decode(&orig).unwrap();
        let LoadedFormat::V2 { slot_size, newest } = fmt else {
            panic!()
        };
        let start = (BLOCK + newest as u64 * slot_size) as usize;
        let prev = &states[states.len() - 2];
        for cut in [0usize, 1, 8, 12, 20, 40, 55] {
            let mut b = orig.clone();
            b[start + cut..start + slot_size as usize].fill(0xee);
            let (got, _) = LedgerState::decode(&b).unwrap();
            assert_eq!(&got, prev, "cut at {cut}");
        }
        // Both slots damaged: an error, not a guess.
        let mut b = orig.clone();
        b[BLOCK as usize + 3] ^= 1;
        b[(BLOCK + slot_size) as usize + 3] ^= 1;
        assert!(LedgerState::decode(&b).is_err());
    }

    /// Found by the `segment` fuzz target: a damaged slot whose sequence reads u64::MAX
    /// overflowed the "is it the older slot" check (a panic with overflow checks).
    #[test]
    fn a_damaged_slot_with_the_largest_sequence_is_a_fallback() {
        let (mut file, slot_size) = sample().encode_file();
        let slot1 = (BLOCK + slot_size) as usize;
        file[slot1..slot1 + 8].copy_from_slice(&u64::MAX.to_be_bytes());
        file[slot1 + 8..slot1 + 12].copy_from_slice(&4u32.to_be_bytes());
        let (state, _, fallback) = LedgerState::decode_checked(&file).unwrap();
        assert_eq!(state, sample());
        let f = fallback.expect("a damaged newest slot is reported");
        assert_eq!((f.corrupt_slot, f.corrupt_sequence), (1, u64::MAX));
    }

    #[test]
    fn grows_slots_for_large_states() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sample();
        let f = Mutex::new(Some(LedgerFile::create(dir.path(), &mut s).unwrap()));
        for p in 0..500u32 {
            s.partitions.insert(
                (format!("topic-with-a-long-name-{p}"), p),
                PartitionMark::default(),
            );
        }
        s.store(&f).unwrap();
        s.checkpoint = None;
        s.store(&f).unwrap();
        assert_eq!(LedgerState::load(dir.path()).unwrap().unwrap().0, s);
    }

    #[test]
    fn reads_format_1_for_migration() {
        let s = sample();
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC_V1);
        out.extend_from_slice(&VERSION_V1.to_be_bytes());
        out.extend_from_slice(&s.generation.to_be_bytes());
        s.encode_body(&mut out);
        fsutil::seal(&mut out);
        let (got, fmt) = LedgerState::decode(&out).unwrap();
        assert_eq!(got, s);
        assert_eq!(fmt, LoadedFormat::V1);
        let mut bad = out.clone();
        bad[20] ^= 1;
        assert!(LedgerState::decode(&bad).is_err());
    }
}
