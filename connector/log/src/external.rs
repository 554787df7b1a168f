//! External consumer-group offsets: one file per group under `<dir>/groups.d/`, written by
//! the group's consumer itself — in the writer's process or in another one that opened the
//! log read-only — never by the writer's own `groups` file (`groups.rs`). Owns the
//! directory `groups.d`, its file names, the file format and the per-group lock file.
//!
//! Why a file per group: a consumer in another process has no writer lock and must not
//! touch the writer's files; one file per group means no two processes ever write the
//! same file (the group's lock guarantees one consumer per group), and the writer only
//! reads them.
//!
//! # Names
//!
//! A group name is escaped into a file name: ASCII letters, digits, `-` and `_` stay,
//! every other byte of its UTF-8 becomes `%XX` (upper-case hex), so any name maps to one
//! safe name without `/`, `.` or NUL (the real name is also stored inside the file).
//! `<escaped>.group` holds the offsets; `<escaped>.lock` is the group's lock; a leftover
//! `<escaped>.group.tmp` from an interrupted write is ignored (the next write replaces it).
//!
//! # File `<dir>/groups.d/<escaped>.group` (integers big-endian)
//!
//! ```text
//!    8  magic "CDCXGRP1"
//!    8  generation u64, +1 per write of this file
//!    1  flags: bit 0 = protect (retention and the disk budget keep what the group has
//!       not read); other bits 0
//!    2  group name length u16, then the UTF-8 name
//!    4  entry count u32
//!    per entry:
//!      2  topic length u16, then the UTF-8 topic
//!      4  partition u32
//!      8  committed offset u64 (next offset to read)
//!    4  CRC-32C (u32) of every byte before it
//! ```
//!
//! Every write replaces the file atomically (temp + fsync + rename + directory fsync):
//! after a crash it holds the last completed commit. A rename gives the file a new inode,
//! which is how readers notice a change cheaply ([`Stamp`]).
//!
//! # Lock `<dir>/groups.d/<escaped>.lock`
//!
//! An exclusive `flock`, held while a consumer of the group is open ([`GroupLock`]); the
//! holder writes its pid into it (informational, for the error of a second consumer).
//! The kernel drops it when the process dies. Reset and deletion of a group take it for
//! the time of the change, so they refuse while a consumer runs.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::fsutil::{self, put_string16, seal, unseal, Cursor};

const MAGIC: &[u8; 8] = b"CDCXGRP1";
pub const DIR_NAME: &str = "groups.d";
const SUFFIX: &str = ".group";
const LOCK_SUFFIX: &str = ".lock";
const FLAG_PROTECT: u8 = 1;

/// One group's file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExternalGroup {
    pub generation: u64,
    pub protect: bool,
    pub name: String,
    /// (topic, partition) -> committed offset
    pub offsets: BTreeMap<(String, u32), u64>,
}

impl ExternalGroup {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.push(if self.protect { FLAG_PROTECT } else { 0 });
        put_string16(&mut out, &self.name);
        out.extend_from_slice(&(self.offsets.len() as u32).to_be_bytes());
        for ((t, p), o) in &self.offsets {
            put_string16(&mut out, t);
            out.extend_from_slice(&p.to_be_bytes());
            out.extend_from_slice(&o.to_be_bytes());
        }
        seal(&mut out);
        out
    }

    pub fn decode(buf: &[u8]) -> std::result::Result<ExternalGroup, String> {
        let body = unseal(buf)?;
        let mut c = Cursor::new(body);
        if c.take(8)? != MAGIC {
            return Err("bad magic".into());
        }
        let generation = c.u64()?;
        let flags = c.u8()?;
        if flags & !FLAG_PROTECT != 0 {
            return Err(format!("unknown flags {flags:#04x}"));
        }
        let name = c.string16()?;
        let n = c.u32()?;
        let mut offsets = BTreeMap::new();
        for _ in 0..n {
            let t = c.string16()?;
            let p = c.u32()?;
            let o = c.u64()?;
            offsets.insert((t, p), o);
        }
        if c.pos != body.len() {
            return Err("trailing bytes".into());
        }
        Ok(ExternalGroup {
            generation,
            protect: flags & FLAG_PROTECT != 0,
            name,
            offsets,
        })
    }
}

/// `name` as a file-name stem (see module docs).
pub fn escape(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

pub fn groups_dir(dir: &Path) -> PathBuf {
    dir.join(DIR_NAME)
}

pub fn group_path(dir: &Path, group: &str) -> PathBuf {
    groups_dir(dir).join(format!("{}{SUFFIX}", escape(group)))
}

fn lock_path(dir: &Path, group: &str) -> PathBuf {
    groups_dir(dir).join(format!("{}{LOCK_SUFFIX}", escape(group)))
}

pub fn check_name(group: &str) -> Result<()> {
    // Escaping triples a byte at most; keep the file name under the usual 255 bytes.
    if group.is_empty() || group.len() > 80 {
        return Err(LogError::InvalidArgument(format!(
            "group name {group:?} must be 1..80 bytes"
        )));
    }
    Ok(())
}

/// Reads one group's file; `None` when it does not exist.
pub fn load(path: &Path) -> Result<Option<ExternalGroup>> {
    match fsutil::read_optional(path)? {
        None => Ok(None),
        Some(buf) => ExternalGroup::decode(&buf).map(Some).map_err(|r| {
            LogError::corrupt_file(
                "consumer group offsets",
                path,
                r,
                "restore it from a backup, or delete it (the group's consumer then starts per its reset policy)",
            )
        }),
    }
}

/// Writes one group's file atomically, creating `groups.d` if needed.
pub fn store(dir: &Path, g: &ExternalGroup) -> Result<()> {
    ensure_dir(dir)?;
    fsutil::write_atomic(&group_path(dir, &g.name), &g.encode())
}

/// Removes one group's file (durably). Returns whether it existed.
pub fn remove(dir: &Path, group: &str) -> Result<bool> {
    let path = group_path(dir, group);
    match fs::remove_file(&path) {
        Ok(()) => {
            fsutil::sync_dir(&groups_dir(dir))?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(LogError::io("removing", &path, e)),
    }
}

fn ensure_dir(dir: &Path) -> Result<()> {
    let gd = groups_dir(dir);
    if gd.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(&gd).map_err(|e| LogError::io("creating", &gd, e))?;
    fsutil::sync_dir(dir)
}

/// Identity of a file version: a rename-replaced file has a new inode; mtime and size
/// also catch an edit in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    ino: u64,
    mtime_ns: i128,
    len: u64,
}

/// Every group file in `groups.d` with its stamp (no `groups.d`: none). One `readdir` and
/// one `stat` per group: cheap enough for every retention decision.
pub fn scan(dir: &Path) -> Result<BTreeMap<PathBuf, Stamp>> {
    let gd = groups_dir(dir);
    let mut out = BTreeMap::new();
    let rd = match fs::read_dir(&gd) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(LogError::io("listing", &gd, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| LogError::io("listing", &gd, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.ends_with(SUFFIX) {
            continue;
        }
        let path = ent.path();
        let md = match fs::metadata(&path) {
            Ok(m) => m,
            // Deleted between the listing and the stat.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(LogError::io("reading metadata of", &path, e)),
        };
        out.insert(
            path,
            Stamp {
                ino: md.ino(),
                mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
                len: md.len(),
            },
        );
    }
    Ok(out)
}

/// The in-memory copy of `groups.d`, kept current by [`ExternalStore::reload`].
#[derive(Debug, Default)]
pub struct ExternalStore {
    files: BTreeMap<PathBuf, (Stamp, ExternalGroup)>,
}

impl ExternalStore {
    /// Re-reads the group files whose stamp changed and forgets removed ones. Returns
    /// whether anything changed.
    pub fn reload(&mut self, dir: &Path) -> Result<bool> {
        let now = scan(dir)?;
        let before = self.files.len();
        self.files.retain(|p, _| now.contains_key(p));
        let mut changed = self.files.len() != before;
        for (path, stamp) in now {
            if self.files.get(&path).is_some_and(|(s, _)| *s == stamp) {
                continue;
            }
            match load(&path)? {
                Some(g) => {
                    self.files.insert(path, (stamp, g));
                }
                None => {
                    self.files.remove(&path);
                }
            }
            changed = true;
        }
        Ok(changed)
    }

    /// Puts a group this process just wrote (its file is the durable copy), so a read
    /// right after a commit sees it even before the next reload.
    pub fn put(&mut self, dir: &Path, g: ExternalGroup) {
        let path = group_path(dir, &g.name);
        let stamp = scan_one(&path);
        match stamp {
            Some(s) => {
                self.files.insert(path, (s, g));
            }
            None => {
                self.files.remove(&path);
            }
        }
    }

    pub fn forget(&mut self, dir: &Path, group: &str) {
        self.files.remove(&group_path(dir, group));
    }

    pub fn groups(&self) -> impl Iterator<Item = &ExternalGroup> {
        self.files.values().map(|(_, g)| g)
    }

    pub fn get(&self, group: &str) -> Option<&ExternalGroup> {
        self.groups().find(|g| g.name == group)
    }
}

fn scan_one(path: &Path) -> Option<Stamp> {
    let md = fs::metadata(path).ok()?;
    Some(Stamp {
        ino: md.ino(),
        mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
        len: md.len(),
    })
}

/// The lock of one consumer group (see module docs). Released when dropped.
#[derive(Debug)]
pub struct GroupLock {
    _file: File,
    group: String,
}

impl GroupLock {
    pub fn group(&self) -> &str {
        &self.group
    }
}

/// Who holds a group's lock, when [`try_lock`] could not take it.
pub enum Holder {
    /// This process (another consumer or handle in it).
    Me,
    /// Another process, with its pid when it wrote one.
    Other(Option<u32>),
}

/// Takes the group's lock without waiting. `Ok(Err(holder))` when someone holds it.
pub fn try_lock(dir: &Path, group: &str) -> Result<std::result::Result<GroupLock, Holder>> {
    ensure_dir(dir)?;
    let file = match fsutil::try_flock(&lock_path(dir, group))? {
        Ok(file) => file,
        Err(pid) if pid == Some(std::process::id()) => return Ok(Err(Holder::Me)),
        Err(pid) => return Ok(Err(Holder::Other(pid))),
    };
    Ok(Ok(GroupLock {
        _file: file,
        group: group.to_string(),
    }))
}

/// The error of a group whose lock someone else holds.
pub fn locked(dir: &Path, group: &str, pid: Option<u32>) -> LogError {
    LogError::GroupLocked {
        group: group.to_string(),
        dir: dir.to_path_buf(),
        pid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let mut g = ExternalGroup {
            generation: 3,
            protect: true,
            name: "sink/search.v1".into(),
            offsets: BTreeMap::new(),
        };
        g.offsets.insert(("a.b".into(), 2), 99);
        let b = g.encode();
        assert_eq!(ExternalGroup::decode(&b).unwrap(), g);
        assert!(ExternalGroup::decode(&b[..b.len() - 1]).is_err());
        let mut bad = b.clone();
        bad[16] ^= 1;
        assert!(ExternalGroup::decode(&bad).is_err());
    }

    #[test]
    fn escaping_is_safe_and_injective_on_examples() {
        assert_eq!(escape("search-sink_1"), "search-sink_1");
        assert_eq!(escape("a/b"), "a%2Fb");
        assert_eq!(escape(".."), "%2E%2E");
        assert_eq!(escape("é"), "%C3%A9");
        assert_ne!(escape("a%2Fb"), escape("a/b"));
        for n in ["x.lock", "a b", "%", "\0"] {
            let e = escape(n);
            assert!(e
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_%".contains(&b)));
        }
    }
}
