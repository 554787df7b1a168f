//! Transactional views: which prefix of a batch can be applied so that every source
//! transaction in it is applied whole, in one atomic script call.
//!
//! A change with a `transaction` block belongs to transaction `id`; the transaction's END
//! record (topic `<connector>.transaction`, [`Op::TxEnd`]) says how many changes it wrote
//! per table. A transaction is *complete* in a batch when its END is there and the batch
//! holds, for every table of the END that the sink applies (its table filter), at least
//! the END's count of its changes. Changes without a transaction block (snapshot rows)
//! stand alone.
//!
//! Invariants of a [`Plan`]: `cuts` is ascending and ends at `upto`; no transaction has
//! changes (or its END) on both sides of a cut, so applying `[cut_i, cut_i+1)` ranges
//! in calls that never split a range applies each transaction atomically; every
//! transaction with an item before `upto` is complete, or was forced (below) and said so.
//!
//! Forcing (applying what is held of a transaction, not atomically, with a warning):
//! - the driver can hold no more ([`TxPlanner::force_next`], from `Sink::must_progress`);
//! - a transaction blocked the batch for [`TxPlanner::wait`] (5 s) without its END or all
//!   of its changes arriving (its END lost to retention, a table of it read by no topic
//!   pattern of the sink, a replay that starts inside it);
//! - no END record was ever seen and a transaction waited that long: the connector most
//!   likely runs without `[format] provide_transaction_metadata = true`, so from then on
//!   transactions are applied as they come (warned once) until an END shows up.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_schemas::filter::TableFilter;
use cdc_schemas::TableId;

use crate::change::{Change, Op};

/// How far a batch can go, and where it may be split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub upto: usize,
    /// Ends of the unsplittable ranges of `..upto`.
    pub cuts: Vec<usize>,
    /// Transactions applied non-atomically by this plan.
    pub forced: usize,
}

impl Plan {
    /// Everything, splittable anywhere (a non-transactional sink).
    pub fn all(n: usize) -> Plan {
        Plan {
            upto: n,
            cuts: (1..=n).collect(),
            forced: 0,
        }
    }
}

/// Per-sink state of the transactional planning (what was waited for, what was warned).
pub struct TxPlanner {
    sink: String,
    tables: TableFilter,
    pub wait: Duration,
    /// Set by `must_progress`: the next plan forces the transaction that blocks.
    pub force_next: bool,
    ends_seen: bool,
    /// No END ever seen after a full wait: apply transactions as they come.
    no_metadata: bool,
    warned_no_metadata: bool,
    warned_forced: bool,
    blocked: Option<(Arc<str>, Instant)>,
}

#[derive(Default)]
struct Agg<'a> {
    held: HashMap<String, u64>,
    /// `total_order` of the truncates counted (a truncate is in every partition).
    truncates: HashSet<u64>,
    end: Option<&'a crate::change::TxEnd>,
    last: usize,
}

fn tx_of(c: &Change) -> Option<&Arc<str>> {
    match (&c.tx, &c.tx_end) {
        (_, Some(end)) if c.op == Op::TxEnd => Some(&end.id),
        (Some(tx), _) => Some(&tx.id),
        _ => None,
    }
}

impl TxPlanner {
    pub fn new(sink: &str, tables: TableFilter) -> TxPlanner {
        TxPlanner {
            sink: sink.to_string(),
            tables,
            wait: Duration::from_secs(5),
            force_next: false,
            ends_seen: false,
            no_metadata: false,
            warned_no_metadata: false,
            warned_forced: false,
            blocked: None,
        }
    }

    fn applies(&self, data_collection: &str) -> bool {
        match data_collection.split_once('.') {
            Some((s, t)) => self.tables.includes(&TableId::new(s, t)),
            None => self.tables.includes(&TableId::new("", data_collection)),
        }
    }

    fn complete(&self, a: &Agg<'_>) -> bool {
        let Some(end) = a.end else { return false };
        end.data_collections
            .iter()
            .filter(|(dc, _)| self.applies(dc))
            .all(|(dc, n)| a.held.get(dc).copied().unwrap_or(0) >= *n)
    }

    /// The plan for `changes` (the driver's whole pending list, from its start).
    pub fn plan(&mut self, changes: &[Change], now: Instant) -> Plan {
        let mut aggs: HashMap<&str, Agg<'_>> = HashMap::new();
        for (i, c) in changes.iter().enumerate() {
            let Some(id) = tx_of(c) else { continue };
            let a = aggs.entry(id.as_ref()).or_default();
            a.last = i;
            if c.op == Op::TxEnd {
                a.end = c.tx_end.as_ref();
                self.ends_seen = true;
            } else if c.op == Op::Truncate
                && !a
                    .truncates
                    .insert(c.tx.as_ref().map_or(0, |t| t.total_order))
            {
                // Another partition's copy of a truncate counted already: END counts
                // the truncate once.
            } else {
                *a.held.entry(c.table_id()).or_insert(0) += 1;
            }
        }
        if self.ends_seen && self.no_metadata {
            tracing::info!(
                sink = %self.sink,
                "sink: transaction END records arrive again; transactions are applied atomically"
            );
            self.no_metadata = false;
            self.warned_no_metadata = false;
        }
        let mut forced: HashSet<&str> = HashSet::new();
        loop {
            let mut need = 0;
            let mut cuts = Vec::new();
            let mut blocked = None;
            for (i, c) in changes.iter().enumerate() {
                if let Some(id) = tx_of(c) {
                    let a = &aggs[id.as_ref()];
                    if !(self.no_metadata || forced.contains(id.as_ref()) || self.complete(a)) {
                        blocked = Some(id);
                        break;
                    }
                    need = need.max(a.last + 1);
                }
                if i + 1 >= need {
                    cuts.push(i + 1);
                }
            }
            let Some(id) = blocked else {
                self.blocked = None;
                return Plan {
                    upto: cuts.last().copied().unwrap_or(0),
                    cuts,
                    forced: forced.len(),
                };
            };
            let waited = match &self.blocked {
                Some((b, since)) if b == id => now.saturating_duration_since(*since),
                _ => {
                    self.blocked = Some((id.clone(), now));
                    Duration::ZERO
                }
            };
            if self.force_next {
                self.force_next = false;
                tracing::warn!(
                    sink = %self.sink,
                    transaction = %id,
                    "sink: a transaction is larger than the records the sink may hold (batch_bytes × 8): applying what it holds of it, not atomically"
                );
                forced.insert(id.as_ref());
            } else if waited >= self.wait {
                if !self.ends_seen {
                    if !self.warned_no_metadata {
                        tracing::warn!(
                            sink = %self.sink,
                            waited_ms = waited.as_millis() as u64,
                            "sink: transactional, but no transaction END record arrived: is the connector's [format] provide_transaction_metadata off? Applying transactions as they come, not atomically"
                        );
                        self.warned_no_metadata = true;
                    }
                    self.no_metadata = true;
                } else {
                    if !self.warned_forced {
                        tracing::warn!(
                            sink = %self.sink,
                            transaction = %id,
                            waited_ms = waited.as_millis() as u64,
                            "sink: a transaction's END or some of its changes did not arrive in time (a table of it outside the sink's topics, or a replay starting inside it): applying what the sink holds of it, not atomically (warned once)"
                        );
                        self.warned_forced = true;
                    }
                    forced.insert(id.as_ref());
                }
            } else {
                let upto = cuts.last().copied().unwrap_or(0);
                return Plan {
                    upto,
                    cuts,
                    forced: forced.len(),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::{TxEnd, TxInfo};

    fn row(table: &str, tx: Option<(&str, u64)>, offset: u64) -> Change {
        Change {
            topic: format!("app.public.{table}").into(),
            partition: 0,
            offset,
            timestamp_ms: 0,
            op: Op::Update,
            schema: "public".into(),
            table: table.into(),
            key: serde_json::Map::new(),
            after: Some(serde_json::Map::new()),
            source_ts_ms: None,
            tx: tx.map(|(id, n)| TxInfo {
                id: id.into(),
                total_order: n,
                data_collection_order: n,
            }),
            after_json: None,
            truncate_copies: 0,
            tx_end: None,
        }
    }

    fn end(id: &str, counts: &[(&str, u64)]) -> Change {
        let mut c = row("", None, 0);
        c.op = Op::TxEnd;
        c.after = None;
        c.tx_end = Some(TxEnd {
            id: id.into(),
            event_count: counts.iter().map(|(_, n)| n).sum(),
            data_collections: counts.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
        });
        c
    }

    fn planner(tables: &[&str]) -> TxPlanner {
        let t: Vec<String> = tables.iter().map(|s| s.to_string()).collect();
        TxPlanner::new("s", TableFilter::new(&t, &[]))
    }

    #[test]
    fn waits_for_the_end_and_all_counted_changes() {
        let mut p = planner(&[]);
        let now = Instant::now();
        let b = vec![
            row("a", None, 0),
            row("a", Some(("t1", 1)), 1),
            row("b", Some(("t1", 2)), 0),
        ];
        let plan = p.plan(&b, now);
        assert_eq!((plan.upto, plan.cuts.clone()), (1, vec![1]));
        let mut b2 = b.clone();
        b2.push(end("t1", &[("public.a", 1), ("public.b", 2)]));
        assert_eq!(p.plan(&b2, now).upto, 1, "public.b has 1 of 2");
        b2.push(row("b", Some(("t1", 3)), 1));
        b2.push(row("a", Some(("t2", 1)), 2));
        let plan = p.plan(&b2, now);
        assert_eq!((plan.upto, plan.cuts), (5, vec![1, 5]));
    }

    #[test]
    fn an_end_before_its_changes_and_tables_not_applied() {
        let mut p = planner(&["public.a"]);
        let now = Instant::now();
        let b = vec![
            end("t1", &[("public.a", 1), ("public.other", 7)]),
            row("a", Some(("t1", 1)), 0),
            row("a", None, 1),
        ];
        let plan = p.plan(&b, now);
        assert_eq!((plan.upto, plan.cuts), (3, vec![2, 3]));
    }

    #[test]
    fn forces_after_the_wait_or_when_told() {
        let mut p = planner(&[]);
        let t0 = Instant::now();
        let b = vec![row("a", Some(("t1", 1)), 0), row("a", Some(("t2", 1)), 1)];
        assert_eq!(p.plan(&b, t0).upto, 0);
        assert_eq!(p.plan(&b, t0 + Duration::from_secs(1)).upto, 0);
        // No END ever seen: after the wait, everything goes, now and later.
        let plan = p.plan(&b, t0 + Duration::from_secs(6));
        assert_eq!(plan.upto, 2);
        assert_eq!(p.plan(&b, t0 + Duration::from_secs(6)).upto, 2);
        // With ENDs seen, only the blocking transaction is forced, after the wait.
        let mut p = planner(&[]);
        let b = vec![
            end("t0", &[]),
            row("a", Some(("t1", 1)), 0),
            row("a", Some(("t2", 1)), 1),
            end("t2", &[("public.a", 1)]),
        ];
        assert_eq!(p.plan(&b, t0).upto, 1);
        let plan = p.plan(&b, t0 + Duration::from_secs(6));
        assert_eq!((plan.upto, plan.forced), (4, 1));
        p.force_next = true;
        let b = vec![row("a", Some(("t3", 1)), 2)];
        assert_eq!(p.plan(&b, t0 + Duration::from_secs(6)).upto, 1);
        assert!(!p.force_next);
    }

    /// A truncate is in every partition of its topic; END counts it once, so its copies
    /// do not stand in for the transaction's other changes of the table.
    #[test]
    fn the_copies_of_a_truncate_count_once() {
        let mut p = planner(&[]);
        let now = Instant::now();
        let truncate = |partition: u32| {
            let mut c = row("a", Some(("t1", 1)), 5);
            c.op = Op::Truncate;
            c.after = None;
            c.partition = partition;
            c
        };
        let mut b = vec![truncate(0), truncate(1), truncate(2)];
        b.push(end("t1", &[("public.a", 3)]));
        assert_eq!(p.plan(&b, now).upto, 0, "1 of the 3 changes of public.a");
        b.push(row("a", Some(("t1", 2)), 6));
        b.push(row("a", Some(("t1", 3)), 7));
        assert_eq!(p.plan(&b, now).upto, 6);
    }
}
