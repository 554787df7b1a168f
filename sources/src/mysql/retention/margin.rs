//! Placing a [`MySqlPosition`] against the server's binlogs ([`margin`]): retained or
//! purged (and then exactly what was lost, [`PurgedDetail`]), how much binlog lies
//! after and before the position, and when the file holding it may expire.
//!
//! Invariants: pure, no I/O; GTIDs decide when both the position and the server have
//! them (an empty GTID set counts as none), file:pos decides otherwise.

use std::collections::BTreeMap;

use cdc_schemas::gtid::GtidSet;
use cdc_schemas::MySqlPosition;

use super::{BinlogFile, ServerBinlogs, ServerGtids};

/// When the file holding the position may expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// The server never purges binlogs by age (`expire_logs_days = 0`).
    Never,
    /// At the earliest in this many seconds (0: it may go at the next rotation, or is
    /// gone). The server purges by age only when it opens a new file, so the real moment
    /// is the first rotation after this.
    In(u64),
    /// The file was closed before the watch started watching: its age is not known.
    Unknown,
}

impl std::fmt::Display for Expiry {
    /// Seconds, or `never` / `unknown` (for logs).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expiry::Never => f.write_str("never"),
            Expiry::In(s) => write!(f, "{s}"),
            Expiry::Unknown => f.write_str("unknown"),
        }
    }
}

/// Where a position stands against the server's binlogs; see [`margin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Margin {
    /// The position is still on the server (`purged` is None).
    pub retained: bool,
    /// Files at or after the position's file (its own included).
    pub files_ahead: usize,
    /// Binlog bytes from the position to the server's current position: how far we lag.
    pub bytes_ahead: u64,
    /// Files the server still has before the position's file.
    pub files_before: usize,
    /// Binlog bytes the server still has before the position.
    pub bytes_before: u64,
    pub expires_in: Expiry,
    pub purged: Option<PurgedDetail>,
}

/// What a purged position lost: the definite error the source raises.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the binlog at {position} was purged by the server; the changes between it and {oldest} are lost ({lost}): take a new snapshot (snapshot.mode = \"when_needed\" does it by itself) and raise expire_logs_days / binlog_expire_logs_seconds")]
pub struct PurgedDetail {
    /// Our position, `file:pos` (and its GTID set).
    pub position: String,
    /// The oldest the server still has: its first file (and the GTIDs it starts after).
    pub oldest: String,
    /// What was lost, in words: the files and/or the GTIDs.
    pub lost: String,
    /// The files between ours and the oldest retained one, ours included (when the names
    /// say so).
    pub lost_files: Vec<String>,
    /// The GTIDs purged that the position had not processed (MySQL set difference;
    /// MariaDB `domain-server-seq` ranges per domain).
    pub lost_gtids: Option<String>,
}
/// `binlog.000012` → (`binlog`, 12, 6 digits).
fn split_name(name: &str) -> Option<(&str, u64, usize)> {
    let (base, ext) = name.rsplit_once('.')?;
    let n = ext.parse().ok()?;
    Some((base, n, ext.len()))
}

/// `a - b` for MySQL GTID sets (`b` may be a MariaDB set: then nothing is subtracted).
pub(super) fn mysql_minus(a: &GtidSet, b: &GtidSet) -> GtidSet {
    let GtidSet::MySql(am) = a else {
        return a.clone();
    };
    let empty = BTreeMap::new();
    let bm = match b {
        GtidSet::MySql(m) => m,
        GtidSet::MariaDb(_) => &empty,
    };
    let mut out = GtidSet::empty_mysql();
    for ((uuid, tag), intervals) in am {
        let minus: &[(u64, u64)] = bm.get(&(uuid.clone(), tag.clone())).map_or(&[], |v| v);
        for &(s, e) in intervals {
            // Walk b's intervals (sorted, disjoint) cutting [s, e].
            let mut from = s;
            for &(bs, be) in minus {
                if be < from || bs > e {
                    continue;
                }
                if bs > from {
                    add_range(&mut out, uuid, tag, from, bs - 1);
                }
                from = be.saturating_add(1);
                if from > e {
                    break;
                }
            }
            if from <= e {
                add_range(&mut out, uuid, tag, from, e);
            }
        }
    }
    out
}

fn add_range(set: &mut GtidSet, uuid: &str, tag: &str, a: u64, b: u64) {
    if let GtidSet::MySql(m) = set {
        let v = m.entry((uuid.to_string(), tag.to_string())).or_default();
        // Called in ascending order with disjoint ranges: merge with the last if adjacent.
        match v.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => v.push((a, b)),
        }
    }
}

/// Places `pos` against the server's binlogs. Pure: no I/O.
///
/// Retained or purged: by GTIDs when both sides have them (MySQL: `gtid_purged` must be
/// within the position's set; MariaDB: in every domain of the oldest file's GTID list the
/// position must be at or past that GTID), by file name otherwise (the position's file
/// must still be listed; an empty GTID set counts as none). Counts are from the position's file and offset; a position
/// retained by GTID whose file is not listed counts every file as ahead.
pub fn margin(server: &ServerBinlogs, pos: &MySqlPosition) -> Margin {
    let total: u64 = server.files.iter().map(|f| file_len(server, f)).sum();
    let index = server.files.iter().position(|f| f.name == pos.file);
    let oldest_file = server.files.first().map_or("", |f| f.name.as_str());

    let lost_files = match index {
        Some(_) => Vec::new(),
        None => lost_files(&pos.file, oldest_file),
    };
    let file_lost = || {
        if index.is_some() {
            None
        } else if pos.file.is_empty() {
            Some("the position names no binlog file".to_string())
        } else if lost_files.is_empty() {
            Some(format!(
                "{} is not among the server's binlogs ({} to {}): the binlog was reset or this is another server",
                pos.file,
                oldest_file,
                server.files.last().map_or("", |f| f.name.as_str())
            ))
        } else {
            Some(lost_files.join(", "))
        }
    };

    // GTIDs decide when both sides have them. An empty set is no GTID position: the
    // stream resumes such a position by file:pos (and "" reads back as an empty MySQL set
    // whatever its dialect was), so the file decides for it too.
    let ours = pos.gtid_set.as_ref().filter(|g| !g.is_empty());
    let by_gtid: Option<(Option<String>, String)> = match (&server.gtids, ours) {
        (ServerGtids::MySql { purged, .. }, Some(ours @ GtidSet::MySql(_))) => {
            let lost = mysql_minus(purged, ours);
            Some((
                (!lost.is_empty()).then(|| lost.to_string()),
                format!("gtid_purged {purged}"),
            ))
        }
        (ServerGtids::MariaDb { oldest, .. }, Some(GtidSet::MariaDb(ours))) => {
            let mut lost = Vec::new();
            for (domain, first) in oldest {
                let have = ours.get(domain).map_or(0, |g| g.seq);
                if have < first.seq {
                    lost.push(format!(
                        "domain {domain} seq {} to {} (up to {first})",
                        have + 1,
                        first.seq
                    ));
                }
            }
            let list: Vec<String> = oldest.values().map(|g| g.to_string()).collect();
            Some((
                (!lost.is_empty()).then(|| lost.join(", ")),
                format!(
                    "the GTIDs after {}",
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(",")
                    }
                ),
            ))
        }
        _ => None,
    };

    let purged = match &by_gtid {
        Some((None, _)) => None,
        Some((Some(gtids), oldest_gtids)) => Some(PurgedDetail {
            position: pos_text(pos),
            oldest: format!("{oldest_file} ({oldest_gtids})"),
            lost: match file_lost() {
                Some(f) if !lost_files.is_empty() => format!("{f}; GTIDs {gtids}"),
                _ => format!("GTIDs {gtids}"),
            },
            lost_files: lost_files.clone(),
            lost_gtids: Some(gtids.clone()),
        }),
        None => file_lost().map(|lost| PurgedDetail {
            position: pos_text(pos),
            oldest: format!("{oldest_file}:4"),
            lost,
            lost_files: lost_files.clone(),
            lost_gtids: None,
        }),
    };

    let (files_ahead, bytes_ahead, files_before, bytes_before) = match (&purged, index) {
        (None, Some(i)) => {
            let before: u64 = server.files[..i].iter().map(|f| file_len(server, f)).sum();
            let own = file_len(server, &server.files[i]);
            let into = pos.pos.min(own);
            (
                server.files.len() - i,
                (own - into)
                    + server.files[i + 1..]
                        .iter()
                        .map(|f| file_len(server, f))
                        .sum::<u64>(),
                i,
                before + into,
            )
        }
        _ => (server.files.len(), total, 0, 0),
    };

    let expires_in = if purged.is_some() {
        Expiry::In(0)
    } else {
        match server.retention.expire_seconds {
            None => Expiry::Never,
            Some(expire) => match index {
                Some(i)
                    if server.files[i].name == server.current_file
                        || i + 1 == server.files.len() =>
                {
                    Expiry::In(expire)
                }
                Some(i) => match server.files[i].closed_after {
                    Some(t) => Expiry::In((t + expire as i64 - server.now).max(0) as u64),
                    None => Expiry::Unknown,
                },
                // Retained by GTID, file not listed: the oldest file is the one that goes
                // first, and what we need may be in it.
                None => match server.files.first().and_then(|f| f.closed_after) {
                    Some(t) => Expiry::In((t + expire as i64 - server.now).max(0) as u64),
                    None => Expiry::Unknown,
                },
            },
        }
    };

    Margin {
        retained: purged.is_none(),
        files_ahead,
        bytes_ahead,
        files_before,
        bytes_before,
        expires_in,
        purged,
    }
}

/// A file's length: the current one's is the server's current position.
pub(super) fn file_len(server: &ServerBinlogs, f: &BinlogFile) -> u64 {
    if f.name == server.current_file && server.current_pos > 0 {
        server.current_pos
    } else {
        f.size
    }
}

fn pos_text(pos: &MySqlPosition) -> String {
    match &pos.gtid_set {
        Some(g) => format!("{}:{} (gtid {})", pos.file, pos.pos, g),
        None => format!("{}:{}", pos.file, pos.pos),
    }
}

/// The files from `ours` up to (not including) `oldest`, when both are `base.N` of the
/// same base and ours is older; empty otherwise.
fn lost_files(ours: &str, oldest: &str) -> Vec<String> {
    match (split_name(ours), split_name(oldest)) {
        (Some((b1, n1, w)), Some((b2, n2, _))) if b1 == b2 && n1 < n2 => {
            // Capped: a list of thousands of names says nothing more than its ends.
            if n2 - n1 > 20 {
                return vec![
                    ours.to_string(),
                    format!("… ({} files) …", n2 - n1 - 2),
                    format!("{b1}.{:0w$}", n2 - 1),
                ];
            }
            (n1..n2).map(|n| format!("{b1}.{n:0w$}")).collect()
        }
        _ => Vec::new(),
    }
}
