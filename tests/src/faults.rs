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

    fn report(&self) {
        report(serde_json::json!({
            "scenario": self.scenario,
            "faults": self.faults,
            "transactions": self.transactions,
            "changes": self.tally.changes,
            "lost": self.tally.lost,
            "duplicated": self.tally.duplicated,
            "reordered": self.tally.reordered,
            "max_retained_wal_bytes": self.max_retained_wal_bytes,
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
}
