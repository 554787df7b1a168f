//! The fault suite's bookkeeping (`tests/faults/run.sh`): counting what a fault cost in a
//! log of the version-chain workload, and reporting a scenario's figures.
//!
//! The workloads of the crash tests update rows as `v = v + 1`, so the log's history of a
//! key must be its snapshot read (or its insert at some v), then one update per version,
//! then at most its delete. [`Tally`] counts, per key, the changes a history lacks (a jump
//! in v), repeats (the same v again, a create of a live key, a delete of an absent one) and
//! reorders (an older v after a newer one) — where the tests' own checkers stop at the
//! first problem, the report needs the counts.
//!
//! [`report`] appends one JSON object per scenario run to the file named by
//! `CDC_FAULT_REPORT` (nothing when unset); `tests/faults/report.py` turns the lines into
//! RELIABILITY.md.

use std::collections::HashMap;
use std::io::Write as _;

use serde_json::Value as Json;

/// What a log's histories hold against the version chain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Change records checked.
    pub changes: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

impl Tally {
    /// Counts the histories of `records`: (key, op `r|c|u|d`, `after.v`) in log order per key.
    pub fn of<'a>(records: impl IntoIterator<Item = (String, &'a str, Option<i64>)>) -> Tally {
        let mut t = Tally::default();
        let mut state: HashMap<String, Option<i64>> = HashMap::new();
        for (key, op, after) in records {
            t.changes += 1;
            let cur = state.get(&key).copied().flatten();
            match op {
                "r" => {
                    state.insert(key, after);
                }
                "c" => {
                    if cur.is_some() {
                        t.duplicated += 1;
                    } else {
                        state.insert(key, after);
                    }
                }
                "u" => match (cur, after) {
                    (Some(c), Some(a)) if a == c + 1 => {
                        state.insert(key, Some(a));
                    }
                    (Some(c), Some(a)) if a == c => t.duplicated += 1,
                    (Some(c), Some(a)) if a < c => t.reordered += 1,
                    (Some(c), Some(a)) => {
                        t.lost += (a - c - 1) as u64;
                        state.insert(key, Some(a));
                    }
                    // An update of a key the log never created: its create is missing.
                    (None, a) => {
                        t.lost += 1;
                        state.insert(key, a);
                    }
                    (Some(_), None) => t.lost += 1,
                },
                "d" => {
                    if cur.is_none() {
                        t.duplicated += 1;
                    } else {
                        state.insert(key, None);
                    }
                }
                _ => {}
            }
        }
        t
    }

    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.reordered == 0
    }
}

/// One run of a scenario, as the report shows it.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub scenario: String,
    pub faults: u64,
    /// Source transactions the workload committed, when it counts them.
    pub transactions: Option<u64>,
    pub tally: Tally,
    /// Postgres: the most WAL the slot retained at the moments the scenario looked.
    pub max_retained_wal_bytes: Option<i64>,
    /// MariaDB: the most binlog the connector's durable position was behind the server's
    /// head (`cdc_mysql_binlog_behind_bytes`) at the moments the scenario looked.
    pub max_binlog_behind_bytes: Option<i64>,
    /// MariaDB: the lowest `cdc_mysql_binlog_margin_seconds` seen (the server may purge the
    /// file holding the connector's position after this long), when the server expires
    /// binlogs and the file's age is known.
    pub min_binlog_margin_seconds: Option<f64>,
    /// From the last fault (or restart) to the log equal to the database.
    pub recovery: std::time::Duration,
}

impl Run {
    /// Reports the run ([`report`]) and fails the test unless nothing was lost,
    /// duplicated or reordered.
    pub fn report_and_check(&self) {
        self.report();
        assert!(self.tally.is_clean(), "{}: {:?}", self.scenario, self.tally);
    }

    /// For an at-least-once path (Kafka without transactions): reports the run, its
    /// duplicates counted, and fails the test unless nothing was lost or reordered (per
    /// key, the first copies in commit order).
    pub fn report_and_check_at_least_once(&self) {
        self.report();
        assert!(
            self.tally.lost == 0 && self.tally.reordered == 0,
            "{}: {:?}",
            self.scenario,
            self.tally
        );
    }

    pub fn report(&self) {
        report(serde_json::json!({
            "scenario": self.scenario,
            "faults": self.faults,
            "transactions": self.transactions,
            "changes": self.tally.changes,
            "lost": self.tally.lost,
            "duplicated": self.tally.duplicated,
            "reordered": self.tally.reordered,
            "max_retained_wal_bytes": self.max_retained_wal_bytes,
            "max_binlog_behind_bytes": self.max_binlog_behind_bytes,
            "min_binlog_margin_seconds": self.min_binlog_margin_seconds,
            "recovery_seconds": self.recovery.as_secs_f64(),
        }));
    }
}

/// The tally of a log's records of the version-chain workload (one topic: keys repeat
/// across tables).
#[cfg(feature = "e2e")]
pub fn tally(records: &[crate::golden::LogRecord]) -> Tally {
    Tally::of(records.iter().filter_map(|r| {
        let (k, v) = (r.key.as_ref()?, r.value.as_ref()?);
        Some((k.to_string(), v["op"].as_str()?, v["after"]["v"].as_i64()))
    }))
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.changes += o.changes;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
    }
}

/// The `i`-th network fault of the suite's rotation through `proxy`: a cut, a stall of
/// `pause`, 20 ms per chunk for `pause`, a black hole of `black_hole`. Returns its name.
pub async fn inject(
    proxy: &crate::FaultProxy,
    i: u32,
    pause: std::time::Duration,
    black_hole: std::time::Duration,
) -> &'static str {
    match i % 4 {
        0 => {
            proxy.cut();
            "cut"
        }
        1 => {
            proxy.stall(true);
            tokio::time::sleep(pause).await;
            proxy.stall(false);
            "stall"
        }
        2 => {
            proxy.slow(Some(std::time::Duration::from_millis(20)));
            tokio::time::sleep(pause).await;
            proxy.slow(None);
            "slow"
        }
        _ => {
            // Longer than the connector's silence limit: only its own detection ends it.
            proxy.stall(true);
            tokio::time::sleep(black_hole).await;
            proxy.stall(false);
            "black hole"
        }
    }
}

/// Appends `figures` (a JSON object; `scenario` names it) to `$CDC_FAULT_REPORT`.
pub fn report(figures: Json) {
    let Some(path) = std::env::var_os("CDC_FAULT_REPORT") else {
        return;
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("CDC_FAULT_REPORT {}: {e}", path.to_string_lossy()));
    writeln!(f, "{figures}").expect("writing the fault report");
}

/// The bench-shaped workload of the bulk scenarios (`faults_bulk*.rs`): ids `1..=rows`
/// inserted, the first `updated` of them updated once, the rest deleted. Each key's ops
/// (`c`, `u`, `d`) in log order, read from `topic` of the log at `log_dir` (a key is in
/// one partition); index 0 unused, ids beyond `rows` ignored.
#[cfg(feature = "e2e")]
pub fn bulk_histories(log_dir: &std::path::Path, topic: &str, rows: u64) -> Vec<Vec<u8>> {
    use cdc_log::{Log, StartAt};
    let mut h = vec![Vec::new(); rows as usize + 1];
    let Ok(log) = Log::open_read_only(log_dir) else {
        return h;
    };
    let Ok(d) = log.describe(topic) else {
        return h;
    };
    for p in 0..d.partitions.len() as u32 {
        let mut r = log.reader(topic, p, StartAt::Earliest).unwrap();
        loop {
            let batch = r.poll(8 << 20).unwrap();
            if batch.is_empty() {
                break;
            }
            for rec in batch {
                let (Some(k), Some(v)) = (rec.key, rec.value) else {
                    continue; // a tombstone
                };
                let (Some(id), Some(op)) = (key_id(&k), op_of(&v)) else {
                    continue;
                };
                if let Some(slot) = h.get_mut(id as usize) {
                    slot.push(op);
                }
            }
        }
    }
    h
}

/// How many snapshots the connector's output at `log` says it completed (both sources
/// log "snapshot complete"): a bulk scenario's kills must never cause a second one.
pub fn snapshots_logged(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("snapshot complete")
        .count()
}

/// The id in a JSON key `{"id":N}`, without parsing it.
fn key_id(k: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(k).ok()?;
    let digits: String = s.chars().filter(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The `op` of a change record's JSON value (`"op":"c"`), without parsing the whole value.
fn op_of(v: &[u8]) -> Option<u8> {
    let pat = b"\"op\":\"";
    v.windows(pat.len())
        .position(|w| w == pat)
        .and_then(|i| v.get(i + pat.len()).copied())
}

/// The ops key `id` of the bulk workload must have, in this order.
fn bulk_wanted(id: u64, updated: u64) -> &'static [u8] {
    if id <= updated {
        b"cu"
    } else {
        b"cd"
    }
}

/// Every key of the bulk workload has all its ops (duplicates and order aside): the log
/// has drained the workload.
pub fn bulk_complete(h: &[Vec<u8>], updated: u64) -> bool {
    h.iter().enumerate().skip(1).all(|(id, ops)| {
        bulk_wanted(id as u64, updated)
            .iter()
            .all(|w| ops.contains(w))
    })
}

/// Counts, per key of the bulk workload, the ops missing, repeated and out of order
/// (of the first copies).
pub fn bulk_tally(h: &[Vec<u8>], updated: u64) -> Tally {
    let mut tally = Tally::default();
    for (id, ops) in h.iter().enumerate().skip(1) {
        let want = bulk_wanted(id as u64, updated);
        tally.changes += ops.len() as u64;
        let mut firsts: Vec<u8> = Vec::new();
        for &o in ops {
            if firsts.contains(&o) {
                tally.duplicated += 1;
            } else {
                firsts.push(o);
            }
        }
        tally.lost += want.iter().filter(|w| !firsts.contains(w)).count() as u64;
        let kept: Vec<u8> = firsts
            .iter()
            .copied()
            .filter(|o| want.contains(o))
            .collect();
        let wanted: Vec<u8> = want
            .iter()
            .copied()
            .filter(|o| firsts.contains(o))
            .collect();
        if kept != wanted {
            tally.reordered += 1;
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(recs: &[(&str, &'static str, Option<i64>)]) -> Tally {
        Tally::of(recs.iter().map(|(k, op, v)| (k.to_string(), *op, *v)))
    }

    #[test]
    fn a_clean_history() {
        let x = t(&[
            ("a", "r", Some(0)),
            ("a", "u", Some(1)),
            ("b", "c", Some(0)),
            ("a", "u", Some(2)),
            ("b", "d", None),
            ("b", "c", Some(0)),
        ]);
        assert!(x.is_clean(), "{x:?}");
        assert_eq!(x.changes, 6);
    }

    #[test]
    fn counts_gaps_repeats_and_reorders() {
        let x = t(&[
            ("a", "r", Some(0)),
            ("a", "u", Some(1)),
            ("a", "u", Some(1)), // repeat
            ("a", "u", Some(4)), // 2 and 3 lost
            ("a", "u", Some(3)), // older after newer
            ("b", "u", Some(7)), // never created
            ("c", "d", None),    // delete of an absent key
            ("a", "r", Some(9)), // a snapshot resets
            ("a", "u", Some(10)),
        ]);
        assert_eq!((x.lost, x.duplicated, x.reordered), (3, 2, 1), "{x:?}");
    }

    #[test]
    fn bulk_tally_counts_missing_repeated_and_reordered() {
        // ids 1, 2 updated; 3, 4 deleted.
        let h = vec![
            vec![],
            b"cu".to_vec(),
            b"cuu".to_vec(),
            b"dc".to_vec(),
            b"c".to_vec(),
        ];
        assert!(!bulk_complete(&h, 2));
        let t = bulk_tally(&h, 2);
        assert_eq!(
            t,
            Tally {
                changes: 8,
                lost: 1,
                duplicated: 1,
                reordered: 1
            }
        );
        let done = vec![vec![], b"cu".to_vec(), b"cd".to_vec()];
        assert!(bulk_complete(&done, 1));
        assert!(bulk_tally(&done, 1).is_clean());
    }
}
