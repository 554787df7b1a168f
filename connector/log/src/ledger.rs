//! The ledger: the single small file that says what is durable. Owns its format and the
//! in-memory [`LedgerState`] it is written from.
//!
//! Invariant: the ledger is only ever replaced atomically (see `fsutil::write_atomic`) and
//! only *after* the segment data it describes has been fsynced. So after any crash, each
//! partition's `durable_end` is a batch boundary whose bytes are on disk, and the
//! `checkpoint` (the source position the pipeline passed to `flush`) covers exactly the
//! records below those ends. On open, everything past `durable_end` is cut off.
//! `log_start` is written *before* retention deletes segment files, so a crash mid-delete
//! leaves files the next open deletes, never a log start pointing at missing data.
//!
//! # File `<dir>/ledger` (integers big-endian)
//!
//! ```text
//! size  field
//!    8  magic "CDCLEDG1"
//!    2  version u16 = 1
//!    8  generation u64, +1 per write (diagnostics)
//!    1  has_checkpoint u8 (0 or 1)
//!    4  checkpoint length u32 (0 when absent)
//!    n  checkpoint bytes (opaque to the log)
//!    4  partition count u32
//!  per partition:
//!    2  topic name length u16, then the UTF-8 name
//!    4  partition u32
//!    8  log_start u64   first offset still readable
//!    8  durable_end u64 offset after the last durable record (the high watermark)
//!    4  CRC-32C (u32) of every byte before it
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{LogError, Result};
use crate::fsutil::{self, put_string16, seal, unseal, Cursor};

const MAGIC: &[u8; 8] = b"CDCLEDG1";
const VERSION: u16 = 1;
pub const FILE_NAME: &str = "ledger";

/// Durable bounds of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionMark {
    pub log_start: u64,
    pub durable_end: u64,
}

/// What the ledger file holds, in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerState {
    pub generation: u64,
    pub checkpoint: Option<Vec<u8>>,
    pub partitions: BTreeMap<(String, u32), PartitionMark>,
}

impl LedgerState {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.partitions.len() * 40);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&self.generation.to_be_bytes());
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
            put_string16(&mut out, topic);
            out.extend_from_slice(&p.to_be_bytes());
            out.extend_from_slice(&m.log_start.to_be_bytes());
            out.extend_from_slice(&m.durable_end.to_be_bytes());
        }
        seal(&mut out);
        out
    }

    pub fn decode(buf: &[u8]) -> std::result::Result<LedgerState, String> {
        let body = unseal(buf)?;
        let mut c = Cursor::new(body);
        if c.take(8)? != MAGIC {
            return Err("bad magic".into());
        }
        let v = c.u16()?;
        if v != VERSION {
            return Err(format!("unsupported version {v}"));
        }
        let generation = c.u64()?;
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
        if c.pos != body.len() {
            return Err("trailing bytes".into());
        }
        Ok(LedgerState {
            generation,
            checkpoint,
            partitions,
        })
    }

    /// Reads `<dir>/ledger`; `Ok(None)` if there is none yet.
    pub fn load(dir: &Path) -> Result<Option<LedgerState>> {
        let path = dir.join(FILE_NAME);
        let Some(buf) = fsutil::read_optional(&path)? else {
            return Ok(None);
        };
        LedgerState::decode(&buf).map(Some).map_err(|reason| {
            LogError::corrupt_file(
                "ledger",
                &path,
                reason,
                "the log cannot tell what is durable: restore the log directory from a backup",
            )
        })
    }

    /// Bumps the generation and replaces `<dir>/ledger` atomically.
    pub fn store(&mut self, dir: &Path) -> Result<()> {
        self.generation += 1;
        fsutil::write_atomic(&dir.join(FILE_NAME), &self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
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
        let buf = s.encode();
        assert_eq!(LedgerState::decode(&buf).unwrap(), s);
        for i in 0..buf.len() {
            let mut b = buf.clone();
            b[i] ^= 0x40;
            assert!(LedgerState::decode(&b).is_err());
            assert!(LedgerState::decode(&buf[..i]).is_err());
        }
    }
}
