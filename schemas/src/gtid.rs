//! GTID sets, in both dialects.
//!
//! - MySQL: `source_uuid[:tag]:interval[:interval…]` items separated by commas, e.g.
//!   `3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:11-18`. Tags are MySQL 8.4's tagged GTIDs.
//!   Intervals are inclusive, kept sorted and merged.
//! - MariaDB: `domain-server-sequence` items, at most one per replication domain, e.g.
//!   `0-1-100,1-2-5`. A MariaDB GTID position says "everything up to this sequence
//!   number in this domain"; the server id is carried but does not order.
//!
//! The canonical text form (what [`std::fmt::Display`] prints) parses back to the same set.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One MariaDB GTID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MariaGtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

impl fmt::Display for MariaGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

impl FromStr for MariaGtid {
    type Err = ParseGtidError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseGtidError(s.to_string());
        let mut it = s.trim().splitn(3, '-');
        let domain = it.next().and_then(|x| x.parse().ok()).ok_or_else(err)?;
        let server = it.next().and_then(|x| x.parse().ok()).ok_or_else(err)?;
        let seq = it.next().and_then(|x| x.parse().ok()).ok_or_else(err)?;
        Ok(MariaGtid {
            domain,
            server,
            seq,
        })
    }
}

/// A set of GTIDs in MySQL's or MariaDB's dialect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum GtidSet {
    /// Key: (source uuid in lowercase, tag or empty). Value: sorted, disjoint, non-adjacent
    /// inclusive intervals.
    MySql(BTreeMap<(String, String), Vec<(u64, u64)>>),
    /// Key: domain id.
    MariaDb(BTreeMap<u32, MariaGtid>),
}

/// A string that is not a GTID set of either dialect.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a GTID set: {0:?} (expected MySQL 'uuid:1-5,…' or MariaDB 'domain-server-seq,…')")]
pub struct ParseGtidError(pub String);

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

impl GtidSet {
    pub fn empty_mysql() -> Self {
        GtidSet::MySql(BTreeMap::new())
    }

    pub fn empty_mariadb() -> Self {
        GtidSet::MariaDb(BTreeMap::new())
    }

    pub fn is_empty(&self) -> bool {
        match self {
            GtidSet::MySql(m) => m.is_empty(),
            GtidSet::MariaDb(m) => m.is_empty(),
        }
    }

    /// Adds one MySQL GTID (`uuid`, `tag` — empty for untagged —, transaction number).
    /// No effect on a MariaDB set.
    pub fn add_mysql(&mut self, uuid: &str, tag: &str, gno: u64) {
        if let GtidSet::MySql(m) = self {
            let v = m
                .entry((uuid.to_ascii_lowercase(), tag.to_string()))
                .or_default();
            insert_interval(v, gno, gno);
        }
    }

    /// Records a MariaDB GTID: the domain's position becomes this one.
    /// No effect on a MySQL set.
    pub fn add_mariadb(&mut self, gtid: MariaGtid) {
        if let GtidSet::MariaDb(m) = self {
            m.insert(gtid.domain, gtid);
        }
    }

    pub fn contains_mysql(&self, uuid: &str, tag: &str, gno: u64) -> bool {
        match self {
            GtidSet::MySql(m) => m
                .get(&(uuid.to_ascii_lowercase(), tag.to_string()))
                .is_some_and(|v| v.iter().any(|&(a, b)| a <= gno && gno <= b)),
            GtidSet::MariaDb(_) => false,
        }
    }

    /// True when the set's position in `gtid`'s domain is at or past it.
    pub fn contains_mariadb(&self, gtid: &MariaGtid) -> bool {
        match self {
            GtidSet::MariaDb(m) => m.get(&gtid.domain).is_some_and(|p| p.seq >= gtid.seq),
            GtidSet::MySql(_) => false,
        }
    }
}

fn insert_interval(v: &mut Vec<(u64, u64)>, a: u64, b: u64) {
    v.push((a, b));
    v.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for &(s, e) in v.iter() {
        match merged.last_mut() {
            Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    *v = merged;
}

impl FromStr for GtidSet {
    type Err = ParseGtidError;

    /// Parses either dialect; an empty string is an empty MySQL set. Whitespace and
    /// newlines (as `SHOW MASTER STATUS` prints them) are ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseGtidError(s.to_string());
        let items: Vec<&str> = s
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .collect();
        if items.is_empty() {
            return Ok(GtidSet::empty_mysql());
        }
        if items[0].contains(':') {
            let mut set = GtidSet::empty_mysql();
            for item in items {
                let mut parts = item.split(':');
                let uuid = parts.next().filter(|u| is_uuid(u)).ok_or_else(err)?;
                let mut tag = "";
                let mut any = false;
                for p in parts {
                    let p = p.trim();
                    if p.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                        let (a, b) = match p.split_once('-') {
                            Some((a, b)) => {
                                (a.parse().map_err(|_| err())?, b.parse().map_err(|_| err())?)
                            }
                            None => {
                                let x = p.parse().map_err(|_| err())?;
                                (x, x)
                            }
                        };
                        if a == 0 || b < a {
                            return Err(err());
                        }
                        if let GtidSet::MySql(m) = &mut set {
                            let v = m
                                .entry((uuid.to_ascii_lowercase(), tag.to_string()))
                                .or_default();
                            insert_interval(v, a, b);
                        }
                        any = true;
                    } else if !p.is_empty()
                        && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    {
                        tag = p;
                    } else {
                        return Err(err());
                    }
                }
                if !any {
                    return Err(err());
                }
            }
            Ok(set)
        } else {
            let mut set = GtidSet::empty_mariadb();
            for item in items {
                let g: MariaGtid = item.parse().map_err(|_| err())?;
                if let GtidSet::MariaDb(m) = &mut set {
                    if m.insert(g.domain, g).is_some() {
                        return Err(err());
                    }
                }
            }
            Ok(set)
        }
    }
}

impl fmt::Display for GtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GtidSet::MySql(m) => {
                // Untagged intervals of a uuid first, then each tag, all under one uuid item.
                let mut first_item = true;
                let mut current_uuid: Option<&str> = None;
                for ((uuid, tag), intervals) in m {
                    if current_uuid != Some(uuid.as_str()) {
                        if !first_item {
                            f.write_str(",")?;
                        }
                        first_item = false;
                        f.write_str(uuid)?;
                        current_uuid = Some(uuid);
                    }
                    if !tag.is_empty() {
                        write!(f, ":{tag}")?;
                    }
                    for &(a, b) in intervals {
                        if a == b {
                            write!(f, ":{a}")?;
                        } else {
                            write!(f, ":{a}-{b}")?;
                        }
                    }
                }
                Ok(())
            }
            GtidSet::MariaDb(m) => {
                for (i, g) in m.values().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{g}")?;
                }
                Ok(())
            }
        }
    }
}

impl From<GtidSet> for String {
    fn from(g: GtidSet) -> String {
        g.to_string()
    }
}

impl TryFrom<String> for GtidSet {
    type Error = ParseGtidError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U1: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const U2: &str = "4e11fa47-71ca-11e1-9e33-c80aa9429562";

    #[test]
    fn mysql_parse_merge_and_print() {
        let s = format!("{U2}:1-3, {}:1-5:11-18:6-10,\n{U1}:20", U1.to_uppercase());
        let g: GtidSet = s.parse().unwrap();
        assert_eq!(g.to_string(), format!("{U1}:1-18:20,{U2}:1-3"));
        assert!(g.contains_mysql(U1, "", 7));
        assert!(!g.contains_mysql(U1, "", 19));
        assert_eq!(g.to_string().parse::<GtidSet>().unwrap(), g);
    }

    #[test]
    fn mysql_tagged() {
        let g: GtidSet = format!("{U1}:1-2:tag_a:5").parse().unwrap();
        assert!(g.contains_mysql(U1, "tag_a", 5));
        assert!(!g.contains_mysql(U1, "", 5));
        assert_eq!(g.to_string().parse::<GtidSet>().unwrap(), g);
    }

    #[test]
    fn mysql_add() {
        let mut g = GtidSet::empty_mysql();
        for n in [3, 1, 2, 5] {
            g.add_mysql(U1, "", n);
        }
        assert_eq!(g.to_string(), format!("{U1}:1-3:5"));
    }

    #[test]
    fn mariadb() {
        let mut g: GtidSet = "0-1-100,1-2-5".parse().unwrap();
        assert!(g.contains_mariadb(&"0-3-99".parse().unwrap()));
        assert!(!g.contains_mariadb(&"1-2-6".parse().unwrap()));
        g.add_mariadb("1-2-6".parse().unwrap());
        assert_eq!(g.to_string(), "0-1-100,1-2-6");
        assert!(
            "0-1-1,0-1-2".parse::<GtidSet>().is_err(),
            "two positions for one domain"
        );
    }

    #[test]
    fn garbage() {
        for s in [
            "x",
            "abc:1",
            U1,
            &format!("{U1}:0"),
            &format!("{U1}:5-3"),
            "1-2",
            "a-b-c",
        ] {
            assert!(s.parse::<GtidSet>().is_err(), "{s}");
        }
        assert!("".parse::<GtidSet>().unwrap().is_empty());
    }

    #[test]
    fn serde_as_string() {
        let g: GtidSet = "0-1-100".parse().unwrap();
        let j = serde_json::to_string(&g).unwrap();
        assert_eq!(j, "\"0-1-100\"");
        assert_eq!(serde_json::from_str::<GtidSet>(&j).unwrap(), g);
    }
}
