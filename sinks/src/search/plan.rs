//! The delivery loop both search sinks run over a batch: changes in chunks of at most
//! `batch_documents` documents (one bulk request per chunk and collection/index), each
//! truncate on its own between chunks, and the truncate bookkeeping that keeps replays
//! from bringing back what a truncate removed. An [`Engine`] (Typesense, Elasticsearch)
//! does the engine's part: making the collection/index ready, writing a chunk, clearing.
//!
//! Invariants:
//! - what [`deliver`] reports as delivered took effect in the engine: a chunk counts once
//!   its bulk request answered (with its per-document outcomes), a truncate once the
//!   collection is cleared *and* its version recorded;
//! - a failure after some chunks took effect reports those chunks as delivered (the
//!   driver commits them) and the failure comes back on the next call, so the driver's
//!   backoff applies to it;
//! - truncate markers are per (collection/index, topic, partition): versions of different
//!   partitions are not comparable, so a truncate only passes over older changes of its
//!   own partition (with one partition per table topic, the default, that is every change
//!   of the table).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::change::{Change, Op};
use crate::search::names::NameTemplate;
use crate::{Delivered, SinkError};

/// A change to write, with where it goes.
pub struct Item<'a> {
    /// Its index in the batch.
    pub index: usize,
    /// The collection / index.
    pub target: Arc<str>,
    pub change: &'a Change,
}

/// What a chunk's bulk request did.
#[derive(Debug, Default)]
pub struct Written {
    /// Changes the engine refused for good (index in the batch, its message).
    pub rejected: Vec<(usize, String)>,
    /// `Some(i)`: the changes from batch index `i` on did not take effect (the engine
    /// pushed back on them) and must be written again; those before did.
    pub retry_from: Option<usize>,
}

/// The engine's part of delivering.
pub trait Engine: Send {
    /// Makes `target` ready for a change whose after-image is `after`: creates it when it
    /// does not exist, declares the fields of columns it does not know yet, and on first
    /// sight loads its recorded truncates into `truncates`.
    fn open(
        &mut self,
        target: &Arc<str>,
        after: Option<&Map<String, Value>>,
        truncates: &mut Truncates,
    ) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Writes `items` (in batch order; at most `batch_documents`). An error means none
    /// of them is known to have taken effect.
    fn write(
        &mut self,
        items: &[Item<'_>],
    ) -> impl Future<Output = Result<Written, SinkError>> + Send;

    /// Removes every document of `target`.
    fn clear(&mut self, target: &Arc<str>) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Stores `markers` (all of `target`'s recorded truncates) in the engine.
    fn record_truncates(
        &mut self,
        target: &Arc<str>,
        markers: &BTreeMap<String, u64>,
    ) -> impl Future<Output = Result<(), SinkError>> + Send;
}

/// The recorded truncates: per collection/index, per `"<topic>/<partition>"`, the version
/// of the last truncate applied.
#[derive(Debug, Default)]
pub struct Truncates {
    by_target: HashMap<Arc<str>, BTreeMap<String, u64>>,
}

/// The marker key of a change's place: `"<topic>/<partition>"` (topic names have no `/`).
pub fn place(c: &Change) -> String {
    format!("{}/{}", c.topic, c.partition)
}

/// The marker key holding how many truncate copies a place still waits for.
fn pending_key(place: &str) -> String {
    format!("{place}/pending")
}

impl Truncates {
    pub fn is_loaded(&self, target: &str) -> bool {
        self.by_target.contains_key(target)
    }

    /// `target`'s markers as read from the engine.
    pub fn load(&mut self, target: &Arc<str>, markers: BTreeMap<String, u64>) {
        self.by_target.insert(target.clone(), markers);
    }

    fn marker(&self, target: &str, c: &Change) -> Option<u64> {
        self.by_target.get(target)?.get(&place(c)).copied()
    }

    /// How many copies of truncates applied already (from another partition) are still to
    /// come in `c`'s partition: until they have, its changes are older than the truncate.
    fn pending(&self, target: &str, c: &Change) -> u64 {
        self.by_target
            .get(target)
            .and_then(|m| m.get(&pending_key(&place(c))))
            .copied()
            .unwrap_or(0)
    }

    /// Whether `c` is older than a truncate of `target` already applied (it was removed).
    pub fn is_older(&self, target: &str, c: &Change) -> bool {
        self.pending(target, c) > 0 || self.marker(target, c).is_some_and(|v| c.version() < v)
    }

    /// Takes the truncate `c` of `target` into account; returns whether to clear `target`
    /// for it (the first copy met of a truncate not applied yet) and, when anything
    /// changed, the markers to store.
    ///
    /// A truncate of a topic of N partitions is in each of them ([`Change::truncate_copies`]):
    /// the first copy met clears the target — no partition has delivered a change after
    /// its copy yet, and every change before it is older than the truncate — and marks the
    /// other N−1 partitions as pending: their changes are passed over until their copy
    /// arrives, which then only moves their marker.
    pub fn take_truncate(
        &mut self,
        target: &Arc<str>,
        c: &Change,
    ) -> (bool, Option<BTreeMap<String, u64>>) {
        let here = place(c);
        let m = self.by_target.entry(target.clone()).or_default();
        let pk = pending_key(&here);
        if let Some(n) = m.get_mut(&pk).filter(|n| **n > 0) {
            *n -= 1;
            let v = m.entry(here).or_insert(0);
            *v = (*v).max(c.version());
            return (false, Some(m.clone()));
        }
        if m.get(&here).is_some_and(|&v| c.version() <= v) {
            return (false, None);
        }
        let v = m.entry(here).or_insert(0);
        *v = (*v).max(c.version());
        for q in (0..c.truncate_copies).filter(|&q| q != c.partition) {
            *m.entry(pending_key(&format!("{}/{q}", c.topic)))
                .or_insert(0) += 1;
        }
        (true, Some(m.clone()))
    }

    /// `target`'s markers now, for [`Truncates::restore`].
    pub fn snapshot(&self, target: &str) -> Option<BTreeMap<String, u64>> {
        self.by_target.get(target).cloned()
    }

    /// Puts back what [`Truncates::snapshot`] took (a truncate that did not take effect).
    pub fn restore(&mut self, target: &Arc<str>, before: Option<BTreeMap<String, u64>>) {
        match before {
            Some(m) => {
                self.by_target.insert(target.clone(), m);
            }
            None => {
                self.by_target.remove(target);
            }
        }
    }
}

/// How a sink batches: where changes go, how many per request, what was truncated.
pub struct Planner {
    pub names: NameTemplate,
    pub batch_documents: usize,
    pub truncates: Truncates,
}

/// Applies `changes` through `engine`.
pub async fn deliver<E: Engine>(
    engine: &mut E,
    p: &mut Planner,
    changes: &[Change],
) -> Result<Delivered, SinkError> {
    let mut done = 0;
    let mut rejected: Vec<(usize, String)> = Vec::new();
    // After something took effect, a failure is reported next time (see the invariants).
    let stop = |done: usize, rejected: Vec<(usize, String)>, e: SinkError| {
        if done > 0 {
            Ok(Delivered {
                upto: done,
                rejected,
                in_flight: 0,
            })
        } else {
            Err(e)
        }
    };
    let mut i = 0;
    while i < changes.len() {
        let c = &changes[i];
        if c.op == Op::Truncate {
            let target = p.names.render(&c.schema, &c.table);
            if let Err(e) = engine.open(&target, None, &mut p.truncates).await {
                return stop(done, rejected, e);
            }
            let before = p.truncates.snapshot(&target);
            let (clear, markers) = p.truncates.take_truncate(&target, c);
            if let Some(markers) = markers {
                // Recorded only once the target is cleared: a crash before this replays
                // the truncate, which is harmless; recorded first, a crash would leave the
                // rows in place. On a failure the state is as before, for the retry.
                let applied = async {
                    if clear {
                        engine.clear(&target).await?;
                    }
                    engine.record_truncates(&target, &markers).await
                };
                if let Err(e) = applied.await {
                    p.truncates.restore(&target, before);
                    return stop(done, rejected, e);
                }
                if clear {
                    tracing::info!(target_name = %target, table = %c.table_id(), version = c.version(), copies = c.truncate_copies, "search sink: truncate applied");
                }
            }
            i += 1;
            done = i;
            continue;
        }
        let end = changes[i..]
            .iter()
            .take(p.batch_documents)
            .position(|c| c.op == Op::Truncate)
            .map_or((i + p.batch_documents).min(changes.len()), |n| i + n);
        let mut items = Vec::with_capacity(end - i);
        for (j, c) in changes.iter().enumerate().take(end).skip(i) {
            if !(c.op.upserts() || c.op == Op::Delete) {
                continue;
            }
            let target = p.names.render(&c.schema, &c.table);
            if let Err(e) = engine
                .open(&target, c.after.as_ref(), &mut p.truncates)
                .await
            {
                return stop(done, rejected, e);
            }
            if p.truncates.is_older(&target, c) {
                continue;
            }
            items.push(Item {
                index: j,
                target,
                change: c,
            });
        }
        if !items.is_empty() {
            match engine.write(&items).await {
                Ok(w) => {
                    rejected.extend(w.rejected);
                    if let Some(from) = w.retry_from {
                        rejected.retain(|(k, _)| *k < from);
                        return Ok(Delivered {
                            upto: from,
                            rejected,
                            in_flight: 0,
                        });
                    }
                }
                Err(e) => return stop(done, rejected, e),
            }
        }
        i = end;
        done = end;
    }
    Ok(Delivered {
        upto: done,
        rejected,
        in_flight: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(partition: u32, offset: u64) -> Change {
        Change {
            topic: "app.public.t".into(),
            partition,
            offset,
            timestamp_ms: 0,
            op: Op::Truncate,
            schema: "public".into(),
            table: "t".into(),
            key: Map::new(),
            after: None,
            source_ts_ms: None,
            tx: None,
            after_json: None,
            truncate_copies: 0,
            tx_end: None,
        }
    }

    #[test]
    fn truncate_markers_compare_within_a_partition_only() {
        let mut t = Truncates::default();
        let target: Arc<str> = "t".into();
        assert!(t.take_truncate(&target, &change(0, 8)).0);
        assert_eq!(
            t.take_truncate(&target, &change(0, 8)),
            (false, None),
            "a replay"
        );
        assert!(t.is_older("t", &change(0, 7)));
        assert!(!t.is_older("t", &change(0, 9)));
        assert!(!t.is_older("t", &change(1, 3)));
        assert!(!t.is_older("other", &change(0, 3)));
        assert_eq!(place(&change(2, 0)), "app.public.t/2");
    }

    /// A truncate written to each of 3 partitions: the first copy met clears, the other
    /// partitions pass over their changes until their own copy, which clears nothing; a
    /// replay of any copy does nothing.
    #[test]
    fn the_first_copy_of_a_truncate_clears_and_the_others_wait_for_theirs() {
        let copy = |p: u32, offset: u64| Change {
            truncate_copies: 3,
            ..change(p, offset)
        };
        let row = |p: u32, offset: u64| Change {
            op: Op::Update,
            ..change(p, offset)
        };
        let mut t = Truncates::default();
        let target: Arc<str> = "t".into();
        assert!(!t.is_older("t", &row(2, 4)));
        let (clear, m) = t.take_truncate(&target, &copy(1, 10));
        assert!(clear);
        assert_eq!(
            m.unwrap(),
            BTreeMap::from([
                ("app.public.t/0/pending".to_string(), 1),
                ("app.public.t/1".to_string(), 11),
                ("app.public.t/2/pending".to_string(), 1),
            ])
        );
        assert!(!t.is_older("t", &row(1, 11)), "after partition 1's copy");
        assert!(t.is_older("t", &row(2, 4)), "before partition 2's copy");
        assert!(t.is_older("t", &row(0, 400)));
        let (clear, _) = t.take_truncate(&target, &copy(2, 5));
        assert!(!clear);
        assert!(!t.is_older("t", &row(2, 6)));
        assert!(t.is_older("t", &row(2, 4)));
        assert!(t.is_older("t", &row(0, 400)));
        assert!(!t.take_truncate(&target, &copy(0, 401)).0);
        assert!(!t.is_older("t", &row(0, 402)));
        for (p, o) in [(0, 401), (1, 10), (2, 5)] {
            assert_eq!(t.take_truncate(&target, &copy(p, o)), (false, None), "{p}");
        }
        // The next truncate clears again.
        assert!(t.take_truncate(&target, &copy(2, 50)).0);
    }
}
