//! Consumer-group committed offsets. Owns the file `<dir>/groups` and its format.
//!
//! A committed offset is Kafka's: the *next* offset the group will read. Every commit
//! rewrites the whole file atomically (temp + fsync + rename + dir fsync): groups and
//! partitions are few, commits are per delivered batch, and one small file keeps the
//! format trivial to check. After a crash the file holds the last completed commit.
//!
//! # File `<dir>/groups` (integers big-endian)
//!
//! ```text
//!    8  magic "CDCGRPS1"
//!    8  generation u64, +1 per write
//!    4  group count u32
//!  per group:
//!    2  group name length u16, then the UTF-8 name
//!    4  entry count u32
//!    per entry:
//!      2  topic length u16, then the UTF-8 topic
//!      4  partition u32
//!      8  committed offset u64 (next offset to read)
//!    4  CRC-32C (u32) of every byte before it
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{LogError, Result};
use crate::fsutil::{self, put_string16, seal, unseal, Cursor};

const MAGIC: &[u8; 8] = b"CDCGRPS1";
pub const FILE_NAME: &str = "groups";

/// group -> (topic, partition) -> committed offset
pub type GroupMap = BTreeMap<String, BTreeMap<(String, u32), u64>>;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GroupStore {
    pub generation: u64,
    pub groups: GroupMap,
}

impl GroupStore {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&(self.groups.len() as u32).to_be_bytes());
        for (g, entries) in &self.groups {
            put_string16(&mut out, g);
            out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
            for ((t, p), o) in entries {
                put_string16(&mut out, t);
                out.extend_from_slice(&p.to_be_bytes());
                out.extend_from_slice(&o.to_be_bytes());
            }
        }
        seal(&mut out);
        out
    }

    pub fn decode(buf: &[u8]) -> std::result::Result<GroupStore, String> {
        let body = unseal(buf)?;
        let mut c = Cursor::new(body);
        if c.take(8)? != MAGIC {
            return Err("bad magic".into());
        }
        let generation = c.u64()?;
        let n = c.u32()?;
        let mut groups = GroupMap::new();
        for _ in 0..n {
            let g = c.string16()?;
            let m = c.u32()?;
            let mut entries = BTreeMap::new();
            for _ in 0..m {
                let t = c.string16()?;
                let p = c.u32()?;
                let o = c.u64()?;
                entries.insert((t, p), o);
            }
            groups.insert(g, entries);
        }
        if c.pos != body.len() {
            return Err("trailing bytes".into());
        }
        Ok(GroupStore { generation, groups })
    }

    pub fn load(dir: &Path) -> Result<GroupStore> {
        let path = dir.join(FILE_NAME);
        match fsutil::read_optional(&path)? {
            None => Ok(GroupStore::default()),
            Some(buf) => GroupStore::decode(&buf).map_err(|r| {
                LogError::corrupt_file(
                    "consumer group offsets",
                    &path,
                    r,
                    "restore it from a backup, or delete it and reset every group (consumers restart per their reset policy)",
                )
            }),
        }
    }

    pub fn store(&mut self, dir: &Path) -> Result<()> {
        self.generation += 1;
        fsutil::write_atomic(&dir.join(FILE_NAME), &self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut s = GroupStore::default();
        s.groups
            .entry("search".into())
            .or_default()
            .insert(("t".into(), 1), 42);
        let b = s.encode();
        assert_eq!(GroupStore::decode(&b).unwrap(), s);
        assert!(GroupStore::decode(&b[..b.len() - 1]).is_err());
    }
}
