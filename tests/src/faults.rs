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
