//! The view of `cdc verify --log`: the table rebuilt from the log — the latest change of
//! each key of the table's topic (deletes remove, truncates clear) — read through
//! [`VerifyLog`] (a read-only open of the embedded log, so it works while `cdc run` holds
//! it, or the Kafka cluster's committed records).
//!
//! Memory: the rebuilt table is only hashes — key hash → (row hash, the record's log
//! time), about 40 bytes a key with the map's overhead — while that fits `--memory-mb`;
//! past it the rebuild spills to bucket files on disk ([`super::spill`]) and is compared
//! with the source bucket by bucket. The values of the few keys that differ are read
//! again by [`LogView::rows_of`] (another pass over the topic, keeping only those keys).
//!
//! Truncates: a truncate record sits in one partition, while the table's keys are spread
//! over all of them, whose records have no order between them but their log time. A
//! truncate therefore clears every key whose latest record is older than it (to the
//! millisecond); within one partition that is exactly log order.
//!
//! Also here: waiting for the log's durable checkpoint to reach a source position, and for
//! a consumer group to reach the high watermarks (the busy-table re-check).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_schemas::registry::SchemaRegistry;
use cdc_schemas::TableId;
use cdc_sinks::change::{Decoded, Decoder, Op};
use cdc_sinks::SinkRecord;
use cdc_sources::verify::ReadMark;

use super::compare::{hash_row, JsonRow};
use super::log_source::VerifyLog;
use super::spill::{Budget, Event, Rebuild, Smallest, Spill};
use super::VerifyError;

/// A change of the table read from the log.
enum Seen {
    Upsert { key: JsonRow, after: JsonRow },
    Delete { key: JsonRow },
    Truncate,
}

/// Where and when the log view spills.
#[derive(Debug, Clone)]
pub struct SpillPlan {
    pub budget: Budget,
    /// Where the temporary directory may go, in order of preference.
    pub dirs: Vec<PathBuf>,
}

/// The table as the log has it, by hashes.
pub struct LogView {
    log: Arc<VerifyLog>,
    topic: String,
    table: TableId,
    decoder: Decoder,
    /// Key hash → (row hash, log time of its latest record) — while it fits the budget.
    map: HashMap<u64, (u64, i64)>,
    /// Past the budget: the log's changes in bucket files (and `map` empty).
    spill: Option<Spill>,
    /// Records read by the last pass.
    pub records_read: u64,
}

impl LogView {
    /// Rebuilds `table` from `topic` (as durable now). A topic that does not exist is an
    /// empty table.
    pub async fn build(
        log: &Arc<VerifyLog>,
        topic: &str,
        table: &TableId,
        registry: Option<Arc<dyn SchemaRegistry>>,
        plan: &SpillPlan,
    ) -> Result<LogView, VerifyError> {
        let mut v = LogView {
            log: log.clone(),
            topic: topic.to_string(),
            table: table.clone(),
            decoder: Decoder::new(registry),
            map: HashMap::new(),
            spill: None,
            records_read: 0,
        };
        let mut rb = Rebuild::default();
        let mut spill: Option<Spill> = None;
        let name = table.to_string();
        v.scan(None, |seen, ts, left| {
            let ev = match seen {
                Seen::Upsert { key, after } => Event::Upsert {
                    key: hash_row(&key),
                    row: hash_row(&after),
                    ts,
                },
                Seen::Delete { key } => Event::Delete {
                    key: hash_row(&key),
                    ts,
                },
                Seen::Truncate => Event::Truncate { ts },
            };
            if let Some(s) = spill.as_mut() {
                return s.log_event(ev);
            }
            if matches!(ev, Event::Upsert { .. }) && !plan.budget.room_for_one(&rb.map) {
                // Past the budget: the map so far and the rest of the log go to bucket
                // files, enough of them for every record left being a new key.
                let keys = rb.map.len() as u64 + left + 1;
                let s = Spill::start(
                    &plan.dirs,
                    plan.budget,
                    plan.budget.buckets_for(keys),
                    &rb.map,
                )?;
                tracing::info!(
                    table = %name,
                    dir = %s.dir().display(),
                    keys_in_memory = rb.map.len(),
                    max_keys = plan.budget.max_keys,
                    "verify: spilled to {} buckets", s.buckets()
                );
                rb.map = HashMap::new();
                let s = spill.insert(s);
                return s.log_event(ev);
            }
            if rb.map.capacity() == 0 {
                // Room for every key the log can still name, at once: a map that grows
                // holds its old table and the doubled one together while it moves, half
                // as much again as the budget's table.
                rb.map
                    .reserve((left + 1).min(plan.budget.max_keys as u64) as usize);
            }
            rb.apply(ev);
            Ok(())
        })
        .await?;
        match spill {
            Some(mut s) => {
                s.end_log(rb.truncated)?;
                v.spill = Some(s);
            }
            None => {
                let t = rb.truncated;
                rb.finish(t);
                // Not shrunk to fit: that too would hold two tables at once.
                v.map = rb.map;
            }
        }
        Ok(v)
    }

    /// Rows of the rebuilt table.
    pub fn rows(&self) -> u64 {
        self.map.len() as u64
    }

    /// Takes the key out of the rebuilt table (so that what remains at the end is what
    /// the source lacks); returns its row hash.
    pub fn take(&mut self, key: &JsonRow) -> Option<u64> {
        self.map.remove(&hash_row(key)).map(|(h, _)| h)
    }

    /// The keys not taken: the `cap` of smallest hash, ascending, and how many there are.
    pub fn extras(&self, cap: usize) -> (Vec<u64>, u64) {
        let mut s = Smallest::new(cap);
        for &k in self.map.keys() {
            s.push(k);
        }
        let n = s.pushed();
        (s.into_sorted(), n)
    }

    /// The bucket files, when the rebuilt table did not fit the budget.
    pub fn spill_mut(&mut self) -> Option<&mut Spill> {
        self.spill.as_mut()
    }

    /// Takes the bucket files out (to compare them; their directory goes when dropped).
    pub fn take_spill(&mut self) -> Option<Spill> {
        self.spill.take()
    }

    /// Reads the log again (as durable now) for the keys with these hashes: each one's
    /// key and latest row (`None`: deleted or truncated).
    /// `upto`: the high watermarks to read to (the log as of one checkpoint); `None`: to
    /// the durable end now.
    pub async fn rows_of(
        &mut self,
        keys: &HashSet<u64>,
        upto: Option<&[u64]>,
    ) -> Result<HashMap<u64, (JsonRow, Option<JsonRow>)>, VerifyError> {
        let mut found: HashMap<u64, (JsonRow, Option<JsonRow>, i64)> = HashMap::new();
        let mut truncated = i64::MIN;
        self.scan(upto, |seen, ts, _| {
            match seen {
                Seen::Upsert { key, after } => {
                    let h = hash_row(&key);
                    if keys.contains(&h) {
                        found.insert(h, (key, Some(after), ts));
                    }
                }
                Seen::Delete { key } => {
                    let h = hash_row(&key);
                    if keys.contains(&h) {
                        found.insert(h, (key, None, ts));
                    }
                }
                Seen::Truncate => {
                    for (_, row, t) in found.values_mut() {
                        if *t <= ts {
                            *row = None;
                        }
                    }
                    truncated = truncated.max(ts);
                }
            }
            Ok(())
        })
        .await?;
        Ok(found
            .into_iter()
            .map(|(h, (k, row, t))| (h, (k, if t < truncated { None } else { row })))
            .collect())
    }

    /// One pass over the topic up to `upto` (or its current high watermarks), partition
    /// by partition, handing each change of the table to `f` with its log time and how
    /// many records at most are left to read after it.
    async fn scan(
        &mut self,
        upto: Option<&[u64]>,
        mut f: impl FnMut(Seen, i64, u64) -> Result<(), VerifyError>,
    ) -> Result<(), VerifyError> {
        self.records_read = 0;
        let now = tokio::task::block_in_place(|| self.log.high_watermarks(&self.topic))?;
        let name: Arc<str> = self.topic.as_str().into();
        let hwms: Vec<u64> = now
            .iter()
            .enumerate()
            .map(|(p, &now)| {
                upto.and_then(|u| u.get(p).copied())
                    .map_or(now, |u| u.min(now))
            })
            .collect();
        let planned: u64 = hwms.iter().sum();
        for (p, &hwm) in hwms.iter().enumerate() {
            let p = p as u32;
            let mut reader = tokio::task::block_in_place(|| self.log.reader(&self.topic, p))?;
            loop {
                let records =
                    tokio::task::block_in_place(|| self.log.next_batch(&mut reader, hwm))?;
                if records.is_empty() {
                    break;
                }
                for r in records {
                    self.records_read += 1;
                    let rec = SinkRecord {
                        topic: name.clone(),
                        partition: p,
                        offset: r.offset,
                        timestamp_ms: r.timestamp,
                        key: r.key,
                        value: r.value,
                        headers: Vec::new(),
                    };
                    let c = match self.decoder.decode(&rec).await {
                        Ok(Decoded::Change(c)) => c,
                        Ok(Decoded::Skip) => continue,
                        Err(e) => {
                            return Err(VerifyError::Failed(format!(
                                "{} partition {p} offset {}: {e}",
                                self.topic, r.offset
                            )))
                        }
                    };
                    if *c.schema != *self.table.schema || *c.table != *self.table.name {
                        continue;
                    }
                    let seen = match c.op {
                        Op::Truncate => Seen::Truncate,
                        Op::Delete => Seen::Delete { key: c.key },
                        op if op.upserts() => Seen::Upsert {
                            key: c.key,
                            after: c.after.unwrap_or_default(),
                        },
                        _ => continue,
                    };
                    f(seen, r.timestamp, planned.saturating_sub(self.records_read))?;
                }
            }
        }
        Ok(())
    }
}

/// Waits until the log's durable source position reaches `mark` (or `deadline`); then
/// returns the high watermarks of `topic` (what the log holds up to that position, at
/// least), `None` at the deadline.
pub fn wait_checkpoint(
    log: &VerifyLog,
    mark: &ReadMark,
    topic: &str,
    deadline: Instant,
) -> Option<Vec<u64>> {
    tokio::task::block_in_place(|| loop {
        let (cp, hwms) = log.position(topic);
        if cp.is_some_and(|c| mark.reached_by(&c)) {
            return Some(hwms);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        log.wait_for_change((deadline - now).min(Duration::from_millis(500)));
    })
}

/// Waits until consumer group `group` committed `hwms` of `topic` (or `deadline`);
/// returns whether it did.
pub fn wait_group(
    log: &VerifyLog,
    group: &str,
    topic: &str,
    hwms: &[u64],
    deadline: Instant,
) -> bool {
    tokio::task::block_in_place(|| loop {
        let committed = log.committed(group, topic, hwms.len() as u32);
        let done = hwms
            .iter()
            .zip(&committed)
            .all(|(&hw, c)| hw == 0 || c.is_some_and(|c| c >= hw));
        if done {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        log.wait_for_change((deadline - now).min(Duration::from_millis(500)));
    })
}
