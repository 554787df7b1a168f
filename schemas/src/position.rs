//! Source positions: where a change sits in the source database's own log.
//!
//! A position is what the pipeline stores in the embedded log's ledger in the same durable
//! step as the records it covers, and what the source resumes from after a restart. It is
//! serialised with serde (JSON) for that checkpoint; the textual forms are the databases'
//! own (`16/B374D848` for an LSN, `mysql-bin.000003:4711` for a binlog coordinate, GTID sets
//! as the servers print them).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::gtid::GtidSet;

/// A Postgres write-ahead-log location.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(into = "String", try_from = "String")]
pub struct Lsn(pub u64);

/// A string that is not an LSN.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a Postgres LSN: {0:?} (expected two hex numbers like 16/B374D848)")]
pub struct ParseLsnError(pub String);

impl Lsn {
    pub const ZERO: Lsn = Lsn(0);
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

impl FromStr for Lsn {
    type Err = ParseLsnError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError(s.to_string());
        let (hi, lo) = s.split_once('/').ok_or_else(err)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| err())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| err())?;
        Ok(Lsn(((hi as u64) << 32) | lo as u64))
    }
}

impl From<Lsn> for String {
    fn from(l: Lsn) -> String {
        l.to_string()
    }
}

impl TryFrom<String> for Lsn {
    type Error = ParseLsnError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// A change's position in Postgres' WAL, as logical decoding reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgPosition {
    /// End LSN of the commit record of the change's transaction: the position that may be
    /// confirmed to the slot once the whole transaction is durable.
    pub commit_lsn: Lsn,
    /// LSN of the change itself (Debezium's `source.lsn`).
    pub lsn: Lsn,
    /// Transaction id (Debezium's `source.txId`).
    pub tx_id: Option<u32>,
    /// Debezium's `source.xmin` (only with `xmin.fetch.interval.ms`).
    pub xmin: Option<u64>,
}

/// A change's position in the MySQL/MariaDB binlog.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MySqlPosition {
    /// Binlog file name, e.g. `mysql-bin.000003`.
    pub file: String,
    /// Byte offset in `file` of the event to resume from (the transaction's start for a
    /// change within a transaction; the next transaction after a commit).
    pub pos: u64,
    /// Index of the row within its rows event (Debezium's `source.row`).
    pub row: u32,
    /// Number of events of the transaction already processed, to skip on resume.
    pub event: u32,
    /// GTID of the change's transaction, if GTIDs are on.
    pub gtid: Option<String>,
    /// Every transaction already fully processed.
    pub gtid_set: Option<GtidSet>,
    pub server_id: u32,
    pub thread: Option<u64>,
}

/// Where a change sits in its source's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SourcePosition {
    Postgres(PgPosition),
    Mysql(MySqlPosition),
}

impl fmt::Display for SourcePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourcePosition::Postgres(p) => write!(f, "lsn {} (commit {})", p.lsn, p.commit_lsn),
            SourcePosition::Mysql(p) => {
                write!(f, "{}:{}", p.file, p.pos)?;
                if let Some(g) = &p.gtid_set {
                    write!(f, " gtid_set {g}")?;
                }
                Ok(())
            }
        }
    }
}

/// What the log's ledger stores beside the records it covers: where the source resumes.
///
/// "A snapshot is running and not finished" is a state of its own, not a default position:
/// a source that starts a snapshot over a log that already has a checkpoint first makes
/// [`Checkpoint::SnapshotIncomplete`] durable, so a crash during the snapshot is seen as
/// one on restart (and the snapshot is taken again), never as a resumable position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checkpoint {
    /// A snapshot was started and has not completed: there is no position to resume from.
    SnapshotIncomplete,
    /// Every change at or before this position is durable in the log.
    At(SourcePosition),
}

/// The stored form of [`Checkpoint::SnapshotIncomplete`].
const SNAPSHOT_INCOMPLETE: &[u8] = br#"{"type":"snapshot_incomplete"}"#;

impl Checkpoint {
    /// Serialised form stored as the log's source checkpoint. A position is stored as
    /// [`SourcePosition`]'s JSON (so logs written before this type existed read back).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Checkpoint::SnapshotIncomplete => SNAPSHOT_INCOMPLETE.to_vec(),
            Checkpoint::At(p) => serde_json::to_vec(p).expect("a position always serialises"),
        }
    }

    /// Reads a stored checkpoint. Older logs marked an unfinished snapshot with a Postgres
    /// position at LSN 0/0; that reads as [`Checkpoint::SnapshotIncomplete`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize)]
        struct Tag<'a> {
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
        }
        if serde_json::from_slice::<Tag>(bytes)?.kind == "snapshot_incomplete" {
            return Ok(Checkpoint::SnapshotIncomplete);
        }
        Ok(match serde_json::from_slice(bytes)? {
            SourcePosition::Postgres(p) if p.lsn == Lsn::ZERO => Checkpoint::SnapshotIncomplete,
            p => Checkpoint::At(p),
        })
    }

    /// The position, unless a snapshot is unfinished.
    pub fn position(&self) -> Option<&SourcePosition> {
        match self {
            Checkpoint::SnapshotIncomplete => None,
            Checkpoint::At(p) => Some(p),
        }
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checkpoint::SnapshotIncomplete => f.write_str("snapshot incomplete"),
            Checkpoint::At(p) => p.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text() {
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        assert_eq!("16/B374D848".parse::<Lsn>().unwrap(), Lsn(0x16_B374_D848));
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn::ZERO);
        assert!("16B374D848".parse::<Lsn>().is_err());
        assert!("1/G".parse::<Lsn>().is_err());
        assert!(Lsn(1) < Lsn(2));
    }

    #[test]
    fn checkpoint_round_trip() {
        let p = SourcePosition::Postgres(PgPosition {
            commit_lsn: Lsn(100),
            lsn: Lsn(90),
            tx_id: Some(7),
            xmin: None,
        });
        let cp = Checkpoint::At(p);
        assert_eq!(Checkpoint::from_bytes(&cp.to_bytes()).unwrap(), cp);
        let m = SourcePosition::Mysql(MySqlPosition {
            file: "binlog.000002".into(),
            pos: 4711,
            gtid_set: Some("0-1-5".parse().unwrap()),
            server_id: 1,
            ..Default::default()
        });
        let bytes = Checkpoint::At(m.clone()).to_bytes();
        assert!(String::from_utf8_lossy(&bytes).contains("\"0-1-5\""));
        assert_eq!(Checkpoint::from_bytes(&bytes).unwrap(), Checkpoint::At(m));
    }

    #[test]
    fn snapshot_incomplete_is_explicit_and_old_marker_reads_as_it() {
        let s = Checkpoint::SnapshotIncomplete;
        assert_eq!(Checkpoint::from_bytes(&s.to_bytes()).unwrap(), s);
        // What logs written before `Checkpoint` existed hold for an unfinished snapshot.
        let legacy = serde_json::to_vec(&SourcePosition::Postgres(PgPosition::default())).unwrap();
        assert_eq!(Checkpoint::from_bytes(&legacy).unwrap(), s);
        assert!(Checkpoint::from_bytes(b"{}").is_err());
        assert!(Checkpoint::from_bytes(br#"{"type":"oracle"}"#).is_err());
    }
}
