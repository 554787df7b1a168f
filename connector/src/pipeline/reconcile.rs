//! Re-snapshot reconciliation: after a snapshot taken over a log that already holds records
//! of its tables (a lost replication slot, a purged binlog), the keys the log still holds
//! live but the snapshot did not read were deleted while the source could not see it. Each
//! gets a delete record (Debezium's `op = "d"`, `before` = its last known row, made by
//! [`cdc_schemas::encode::redelete`]) and a tombstone, so a view built from the log (the
//! newest record per key, tombstones removing) equals the tables. Source-agnostic: driven
//! only by the [`SnapshotMark`](cdc_sources::SnapshotMark)s a source puts around a
//! snapshot.
//!
//! # What runs when
//!
//! - At `Begin`, [`Start::at`] notes, per partition of each topic the snapshot's tables go
//!   to, the high watermark: the *prefix* `[log start, start)` is what the log held
//!   before this snapshot, and everything from `start` on is the snapshot's rows.
//! - At `End` (the snapshot's rows are durable: see the pipeline's durability rules), per
//!   partition: the live keys of the prefix (a key is live when its newest record is
//!   neither a tombstone nor a delete), minus every key found from `start` on, are the
//!   deleted ones; their newest prefix record gives the delete's `before`.
//!
//! # Memory: bounded and stated
//!
//! Keys are held as 128-bit hashes (two independently seeded SipHash-1-3 values; a
//! collision needs about 2^64 keys) with the offset of their newest record: a
//! `HashMap<(u64, u64), u64>` of 24 bytes an entry plus a control byte, sized for
//! [`KEYS_PER_PASS`] keys (2^20 slots: about 25 MiB; should a pass hold more keys than
//! planned, the table doubles once, 50 MiB). A partition whose prefix holds more records
//! than that is done in several passes, each over the keys of one hash bucket
//! (`hash mod passes`, so each pass holds about `records / passes` keys at most), and
//! memory stays under the bound whatever the table size; each pass reads the partition's
//! prefix and the snapshot's records once, then the deleted keys' newest records where
//! they are (a seek each, or reading on when they are close). Records are visited in the
//! reader's buffer
//! ([`cdc_log::Reader::poll_with`]): nothing is allocated per record read; the deletes are
//! appended in batches of about [`APPEND_BYTES`].
//!
//! # Two logs
//!
//! The reading and appending go through [`Store`]: [`LogStore`] for the embedded log,
//! [`KafkaStore`] for Kafka, where the snapshot's rows are first committed (under the
//! "snapshot incomplete" position) so that a `read_committed` reader sees them, the
//! deleted keys' newest records are read on from the first of them (no seeks), and the
//! deletes are produced into the open transaction, which `End`'s position commits.
//!
//! # Limits
//!
//! - Keys are compared as the bytes the log holds: a key encoded differently than before
//!   (another key format, another key schema id) is another key, and the old one is deleted.
//! - A routed topic (`[[routing]]`) holding a table the snapshot does not read loses that
//!   table's keys: keys are per topic.
//! - An Avro record is rewritten with its writer schema, fetched from the registry by the
//!   id in its frame (once per id). When that fails (the registry unreachable, a schema it
//!   cannot walk), or a last record is not a change envelope, the key gets the tombstone
//!   alone (warned once per reconciliation). Without tombstones (`tombstones_on_delete =
//!   false`) a key gets the delete alone — or, when no delete could be made, a tombstone
//!   still, the only way left to remove it.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Instant;

use cdc_log::{Log, LogError, NewRecord, ResetPolicy, StartAt};
use cdc_schemas::encode::redelete::{avro_schema_id, delete_from_last, is_delete};
use cdc_schemas::encode::redelete_avro::WriterSchema;
use cdc_schemas::encode::RecordFormat;
use cdc_schemas::Checkpoint;

use super::{now_ns, PipelineError};

impl super::Pipeline {
    /// At a snapshot's `End`: makes the snapshot's records durable under
    /// `SnapshotIncomplete` (readable, and a crash still snapshots again), then appends the
    /// deletes of the keys it did not find ([`reconcile`]). Its position, made pending
    /// next, covers them in one durable step.
    pub(super) async fn reconcile_snapshot(&mut self) -> Result<(), PipelineError> {
        let Some(start) = self.snapshot_start.take() else {
            return Ok(());
        };
        if start.is_empty() {
            return Ok(());
        }
        debug_assert!(self.pending.is_none(), "a snapshot's rows carry no commit");
        let format = self.cfg.encoder.format;
        // Avro values are rewritten with their writer schema: the registry's, by id, asked
        // from the blocking thread the reconciliation runs on.
        let schemas: Option<SchemaLookup> = (format == RecordFormat::Avro).then(|| {
            let registry = self.registry.clone();
            let rt = tokio::runtime::Handle::current();
            Box::new(move |id: u32| {
                let s = rt
                    .block_on(registry.schema_by_id(id))
                    .map_err(|e| e.to_string())?;
                WriterSchema::parse(&s.text).map_err(|e| e.to_string())
            }) as SchemaLookup
        });
        let settings = Settings {
            format,
            tombstones: self.cfg.encoder.tombstones_on_delete,
            keys_per_pass: self.reconcile_keys_per_pass,
            schemas,
        };
        let started = Instant::now();
        let incomplete = Checkpoint::SnapshotIncomplete.to_bytes();
        let outcome = match &self.out {
            super::out::Out::Log(log) => {
                let log = log.clone();
                tokio::task::spawn_blocking(move || -> Result<Outcome, PipelineError> {
                    log.flush(Some(&incomplete))?;
                    Ok(reconcile(
                        &LogStore(&log),
                        &start,
                        &settings,
                        now_ns() / 1_000_000,
                    )?)
                })
                .await
            }
            super::out::Out::Kafka(k) => {
                let k = k.clone();
                tokio::task::spawn_blocking(move || -> Result<Outcome, PipelineError> {
                    // Committed, the snapshot's rows are readable (`read_committed`); the
                    // deletes go into the next transaction, which `End`'s position commits.
                    k.commit(&incomplete)?;
                    let store = KafkaStore {
                        reader: cdc_kafka::KafkaReader::connect(k.settings())?,
                        log: &k,
                    };
                    Ok(reconcile(&store, &start, &settings, now_ns() / 1_000_000)?)
                })
                .await
            }
        }
        .map_err(|e| PipelineError::FlushTask(e.to_string()))??;
        self.stats.flushes += 1;
        self.stats.records += outcome.records;
        self.stats.reconciled_deletes += outcome.deleted_keys;
        // The deletes are not counted: `End`'s position, next, is flushed with them.
        self.bytes_since_flush = 0;
        tracing::info!(
            deleted_keys = outcome.deleted_keys,
            tombstone_only = outcome.tombstone_only,
            records = outcome.records,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "re-snapshot reconciled: the log's keys now match the snapshot"
        );
        Ok(())
    }
}

/// Keys a pass is planned for: 7/8 of 2^20, the most a table of 2^20 slots holds at
/// hashbrown's load factor (24-byte entries + 1 control byte: about 25 MiB).
pub(super) const KEYS_PER_PASS: u64 = 7 << 17;

/// Deletes appended per log batch.
const APPEND_BYTES: usize = 1 << 20;

/// Where a snapshot's records start in each topic its tables go to.
#[derive(Debug, Clone, Default)]
pub(super) struct Start {
    /// Topic and, per partition, the high watermark at `Begin` (only topics that existed).
    topics: Vec<(String, Vec<u64>)>,
}

impl Start {
    /// The high watermarks of those of `topics` that exist in the Kafka cluster now
    /// (everything committed so far: the caller committed before). Blocking.
    pub fn at_kafka(
        reader: &cdc_kafka::KafkaReader,
        topics: impl IntoIterator<Item = String>,
    ) -> Result<Start, cdc_kafka::KafkaLogError> {
        let mut out: Vec<(String, Vec<u64>)> = Vec::new();
        for name in topics {
            if out.iter().any(|(n, _)| *n == name) {
                continue;
            }
            if let Some(parts) = reader.describe(&name)? {
                let starts = parts.iter().map(|w| w.high.max(0) as u64).collect();
                out.push((name, starts));
            }
        }
        Ok(Start { topics: out })
    }

    /// The high watermarks of `topics` now (the log must be durable up to here: nothing
    /// appended unflushed).
    pub fn at(log: &Log, topics: impl IntoIterator<Item = String>) -> Result<Start, LogError> {
        let existing = log.topics();
        let mut out: Vec<(String, Vec<u64>)> = Vec::new();
        for name in topics {
            if !existing.contains(&name) || out.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let t = log.topic(&name)?;
            let starts = (0..t.partitions())
                .map(|p| t.high_watermark(p).unwrap_or(0))
                .collect();
            out.push((name, starts));
        }
        Ok(Start { topics: out })
    }

    /// True when the log held nothing of these topics before the snapshot.
    pub fn is_empty(&self) -> bool {
        self.topics
            .iter()
            .all(|(_, starts)| starts.iter().all(|s| *s == 0))
    }
}

/// The writer schema of an Avro schema id (the registry's), or why there is none.
pub(super) type SchemaLookup = Box<dyn Fn(u32) -> Result<WriterSchema, String> + Send>;

/// How deletes are written.
pub(super) struct Settings {
    pub format: RecordFormat,
    pub tombstones: bool,
    /// Keys per pass (tests lower it to exercise the passes).
    pub keys_per_pass: u64,
    /// For Avro values.
    pub schemas: Option<SchemaLookup>,
}

/// Reads and rewrites values; Avro writer schemas are looked up once per id.
struct Rewriter<'s> {
    s: &'s Settings,
    schemas: HashMap<u32, Option<Arc<WriterSchema>>>,
    warned: bool,
}

impl Rewriter<'_> {
    fn writer(&mut self, value: &[u8]) -> Option<Arc<WriterSchema>> {
        if self.s.format != RecordFormat::Avro {
            return None;
        }
        let id = avro_schema_id(value)?;
        if let Some(w) = self.schemas.get(&id) {
            return w.clone();
        }
        let w = match self.s.schemas.as_ref().map(|f| f(id)) {
            Some(Ok(w)) => Some(Arc::new(w)),
            Some(Err(e)) => {
                self.warn(&format!("Avro schema id {id}: {e}"));
                None
            }
            None => None,
        };
        self.schemas.insert(id, w.clone());
        w
    }

    fn warn(&mut self, why: &str) {
        if !self.warned {
            self.warned = true;
            tracing::warn!(reason = %why, "re-snapshot: a deleted key's last record could not be rewritten as a delete; such keys get a tombstone only");
        }
    }

    fn is_delete(&mut self, value: &[u8]) -> bool {
        let w = self.writer(value);
        is_delete(&self.s.format, value, w.as_deref()) == Some(true)
    }

    /// The delete for a key whose last record's value is `last`, if one can be made.
    fn delete(&mut self, last: &[u8], ts_ms: i64) -> Option<Vec<u8>> {
        let w = self.writer(last);
        if self.s.format == RecordFormat::Avro && w.is_none() {
            return None;
        }
        match delete_from_last(&self.s.format, last, ts_ms, w.as_deref()) {
            Ok(d) => d,
            Err(e) => {
                self.warn(&e.to_string());
                None
            }
        }
    }
}

/// What a reconciliation appended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Outcome {
    /// Keys found deleted (each got a delete record and/or a tombstone).
    pub deleted_keys: u64,
    /// Of those, keys that got a tombstone only (no delete record could be made).
    pub tombstone_only: u64,
    pub records: u64,
}

/// A visitor of records: (offset, key, value).
pub(super) type Visit<'f, E> = dyn FnMut(u64, &[u8], Option<&[u8]>) -> Result<(), E> + 'f;

/// A record made: key, value (`None`: a tombstone), timestamp.
pub(super) type Made = (Vec<u8>, Option<Vec<u8>>, i64);

/// The log a reconciliation reads and appends to: the embedded log ([`LogStore`]) or
/// Kafka ([`KafkaStore`]). Blocking.
pub(super) trait Store {
    type Error;
    /// The partition's log start.
    fn log_start(&self, topic: &str, p: u32) -> Result<u64, Self::Error>;
    /// Visits each keyed record of `[from (None: the log start), to)`: (offset, key, value).
    fn scan(
        &self,
        topic: &str,
        p: u32,
        from: Option<u64>,
        to: u64,
        f: &mut Visit<'_, Self::Error>,
    ) -> Result<(), Self::Error>;
    /// Visits the keyed records at `offsets` (ascending; an offset compacted away is
    /// passed over).
    fn visit_offsets(
        &self,
        topic: &str,
        p: u32,
        offsets: &[u64],
        f: &mut Visit<'_, Self::Error>,
    ) -> Result<(), Self::Error>;
    /// Appends (key, value, timestamp) records to the partition, unflushed.
    fn append(&self, topic: &str, p: u32, records: &[Made]) -> Result<(), Self::Error>;
}

/// The embedded log.
pub(super) struct LogStore<'l>(pub &'l Log);

impl Store for LogStore<'_> {
    type Error = LogError;

    fn log_start(&self, topic: &str, p: u32) -> Result<u64, LogError> {
        self.0.resolve_offset(topic, p, StartAt::Earliest)
    }

    fn scan(
        &self,
        topic: &str,
        p: u32,
        from: Option<u64>,
        to: u64,
        f: &mut Visit<'_, LogError>,
    ) -> Result<(), LogError> {
        let from = from.map_or(StartAt::Earliest, StartAt::Offset);
        scan(self.0, topic, p, from, to, f)
    }

    fn visit_offsets(
        &self,
        topic: &str,
        p: u32,
        offsets: &[u64],
        f: &mut Visit<'_, LogError>,
    ) -> Result<(), LogError> {
        visit_offsets(self.0, topic, p, offsets, f)
    }

    fn append(&self, topic: &str, p: u32, records: &[Made]) -> Result<(), LogError> {
        let recs: Vec<NewRecord<'_>> = records
            .iter()
            .map(|(k, v, ts)| NewRecord::new(Some(k), v.as_deref(), *ts))
            .collect();
        self.0.topic(topic)?.append(p, &recs)?;
        Ok(())
    }
}

/// A Kafka log: committed records read with `read_committed`, deletes sent in the
/// producer's open transaction (the snapshot's `End` position commits them).
pub(super) struct KafkaStore<'k> {
    pub reader: cdc_kafka::KafkaReader,
    pub log: &'k cdc_kafka::KafkaLog,
}

impl KafkaStore<'_> {
    fn read(
        &self,
        topic: &str,
        p: u32,
        from: cdc_kafka::ReadFrom,
        mut f: impl FnMut(u64, &[u8], Option<&[u8]>) -> Result<bool, cdc_kafka::KafkaLogError>,
    ) -> Result<(), cdc_kafka::KafkaLogError> {
        let mut result = Ok(());
        self.reader.read(topic, &[p], from, u64::MAX, |r| {
            let Some(k) = r.key else { return true };
            match f(r.offset, k, r.value) {
                Ok(go_on) => go_on,
                Err(e) => {
                    result = Err(e);
                    false
                }
            }
        })?;
        result
    }
}

impl Store for KafkaStore<'_> {
    type Error = cdc_kafka::KafkaLogError;

    fn log_start(&self, topic: &str, p: u32) -> Result<u64, Self::Error> {
        Ok(self
            .reader
            .describe(topic)?
            .and_then(|w| w.get(p as usize).map(|w| w.low.max(0) as u64))
            .unwrap_or(0))
    }

    fn scan(
        &self,
        topic: &str,
        p: u32,
        from: Option<u64>,
        to: u64,
        f: &mut Visit<'_, Self::Error>,
    ) -> Result<(), Self::Error> {
        let from = from.map_or(cdc_kafka::ReadFrom::Earliest, cdc_kafka::ReadFrom::Offset);
        self.read(topic, p, from, |off, k, v| {
            if off >= to {
                return Ok(false);
            }
            f(off, k, v).map(|()| true)
        })
    }

    fn visit_offsets(
        &self,
        topic: &str,
        p: u32,
        offsets: &[u64],
        f: &mut Visit<'_, Self::Error>,
    ) -> Result<(), Self::Error> {
        let (Some(&first), Some(&last)) = (offsets.first(), offsets.last()) else {
            return Ok(());
        };
        let mut i = 0;
        self.read(topic, p, cdc_kafka::ReadFrom::Offset(first), |off, k, v| {
            while i < offsets.len() && offsets[i] < off {
                i += 1;
            }
            if i < offsets.len() && offsets[i] == off {
                i += 1;
                f(off, k, v)?;
            }
            Ok(off < last)
        })
    }

    fn append(&self, topic: &str, p: u32, records: &[Made]) -> Result<(), Self::Error> {
        for (k, v, ts) in records {
            self.log.send(
                topic,
                p,
                &cdc_kafka::OutRecord {
                    key: Some(k),
                    value: v.as_deref(),
                    headers: &[],
                    timestamp_ms: *ts,
                },
            )?;
        }
        Ok(())
    }
}

/// Appends the deletes for every key of the prefixes of `start` that the records from
/// `start` on do not hold. Blocking (reads the log); nothing is flushed here.
pub(super) fn reconcile<S: Store>(
    store: &S,
    start: &Start,
    s: &Settings,
    now_ms: i64,
) -> Result<Outcome, S::Error> {
    let hasher = KeyHasher::default();
    let mut rw = Rewriter {
        s,
        schemas: HashMap::new(),
        warned: false,
    };
    let mut out = Outcome::default();
    for (name, starts) in &start.topics {
        let before = out;
        for (p, &start) in starts.iter().enumerate() {
            partition(
                store, name, p as u32, start, &mut rw, &hasher, now_ms, &mut out,
            )?;
        }
        if out.deleted_keys > before.deleted_keys {
            tracing::info!(
                topic = %name,
                deleted_keys = out.deleted_keys - before.deleted_keys,
                tombstone_only = out.tombstone_only - before.tombstone_only,
                "re-snapshot: keys the snapshot did not find again are deleted in the log"
            );
        }
    }
    Ok(out)
}

/// 128-bit key hashes from two independently seeded SipHash hashers.
#[derive(Default)]
struct KeyHasher(std::hash::RandomState, std::hash::RandomState);

impl KeyHasher {
    fn hash(&self, key: &[u8]) -> (u64, u64) {
        (self.0.hash_one(key), self.1.hash_one(key))
    }
}

/// Visits each keyed record of `[from, to)` of a partition: (offset, key, value).
fn scan(
    log: &Log,
    topic: &str,
    p: u32,
    from: StartAt,
    to: u64,
    f: &mut Visit<'_, LogError>,
) -> Result<(), LogError> {
    let mut r = log.reader(topic, p, from)?;
    // Retention may drop old segments while this runs: read on from the new start.
    r.set_reset_policy(ResetPolicy::Earliest);
    let mut result = Ok(());
    while r.position() < to {
        let n = r.poll_with(APPEND_BYTES, |rec| {
            if result.is_err() || rec.offset >= to {
                return;
            }
            if let Some(k) = rec.key {
                result = f(rec.offset, k, rec.value);
            }
        })?;
        if n == 0 || result.is_err() {
            break;
        }
    }
    result
}

/// A seek costs about one batch read: targets closer than this many records are reached
/// by reading on.
const SEEK_GAP: u64 = 4096;

/// Visits the keyed records at `offsets` (ascending) of a partition, seeking to each one
/// that lies far ahead (a compacted-away offset is passed over).
fn visit_offsets(
    log: &Log,
    topic: &str,
    p: u32,
    offsets: &[u64],
    f: &mut Visit<'_, LogError>,
) -> Result<(), LogError> {
    let Some(&first) = offsets.first() else {
        return Ok(());
    };
    let mut r = log.reader(topic, p, StartAt::Offset(first))?;
    r.set_reset_policy(ResetPolicy::Earliest);
    let mut i = 0;
    let mut result = Ok(());
    while i < offsets.len() {
        if offsets[i] >= r.high_watermark() {
            // Past the end (a reader out of range would start over from the earliest).
            break;
        }
        if offsets[i] > r.position() + SEEK_GAP {
            r.seek(StartAt::Offset(offsets[i]))?;
        }
        let n = r.poll_with(64 << 10, |rec| {
            while i < offsets.len() && offsets[i] < rec.offset {
                i += 1;
            }
            if result.is_ok() && i < offsets.len() && offsets[i] == rec.offset {
                i += 1;
                if let Some(k) = rec.key {
                    result = f(rec.offset, k, rec.value);
                }
            }
        })?;
        if n == 0 || result.is_err() {
            break;
        }
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn partition<S: Store>(
    store: &S,
    name: &str,
    p: u32,
    start: u64,
    rw: &mut Rewriter<'_>,
    hasher: &KeyHasher,
    now_ms: i64,
    out: &mut Outcome,
) -> Result<(), S::Error> {
    let first = store.log_start(name, p)?;
    if start <= first {
        return Ok(());
    }
    let s = rw.s;
    let passes = (start - first).div_ceil(s.keys_per_pass.max(1)).max(1);
    let cap = (start - first).min(s.keys_per_pass) as usize;
    // Whether a non-null value can be a delete: only when deletes have no tombstone after
    // them (with tombstones, the tombstone is every deleted key's newest record).
    let check_deletes = !s.tombstones;
    let mut live: HashMap<(u64, u64), u64> = HashMap::with_capacity(cap);
    let mut pending = Appender::new(store, name, p);
    for pass in 0..passes {
        let in_pass = |h: (u64, u64)| passes == 1 || h.1 % passes == pass;
        live.clear();
        store.scan(name, p, None, start, &mut |off, key, value| {
            let h = hasher.hash(key);
            if !in_pass(h) {
                return Ok(());
            }
            let dead = match value {
                None => true,
                Some(v) => check_deletes && rw.is_delete(v),
            };
            if dead {
                live.remove(&h);
            } else {
                live.insert(h, off);
            }
            Ok(())
        })?;
        if live.is_empty() {
            continue;
        }
        store.scan(name, p, Some(start), u64::MAX, &mut |_, key, _| {
            live.remove(&hasher.hash(key));
            Ok(())
        })?;
        if live.is_empty() {
            continue;
        }
        // The deleted keys' newest records, in offset order: read where they are.
        let mut offsets: Vec<u64> = live.values().copied().collect();
        offsets.sort_unstable();
        store.visit_offsets(name, p, &offsets, &mut |off, key, value| {
            let h = hasher.hash(key);
            if live.get(&h) != Some(&off) {
                return Ok(());
            }
            live.remove(&h);
            let delete = value.and_then(|v| rw.delete(v, now_ms));
            out.deleted_keys += 1;
            let made = delete.is_some();
            if let Some(d) = delete {
                pending.push(key, Some(d), now_ms)?;
                out.records += 1;
            }
            if s.tombstones || !made {
                pending.push(key, None, now_ms)?;
                out.records += 1;
            }
            if !made {
                out.tombstone_only += 1;
            }
            Ok(())
        })?;
    }
    pending.flush()
}

/// Deletes waiting to be appended to one partition, as one batch per ~[`APPEND_BYTES`].
struct Appender<'s, S: Store> {
    store: &'s S,
    topic: &'s str,
    partition: u32,
    records: Vec<Made>,
    bytes: usize,
}

impl<'s, S: Store> Appender<'s, S> {
    fn new(store: &'s S, topic: &'s str, partition: u32) -> Self {
        Appender {
            store,
            topic,
            partition,
            records: Vec::new(),
            bytes: 0,
        }
    }

    fn push(&mut self, key: &[u8], value: Option<Vec<u8>>, ts: i64) -> Result<(), S::Error> {
        self.bytes += key.len() + value.as_ref().map_or(0, Vec::len);
        self.records.push((key.to_vec(), value, ts));
        if self.bytes >= APPEND_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), S::Error> {
        if self.records.is_empty() {
            return Ok(());
        }
        self.store
            .append(self.topic, self.partition, &self.records)?;
        self.records.clear();
        self.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_log::{LogOptions, TopicConfig};

    /// Far targets are sought, near ones read on to; each visited once, in order.
    #[test]
    fn visit_offsets_seeks_far_and_reads_on_near() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        let t = log
            .topic_or_create("t", TopicConfig::with_partitions(1))
            .unwrap();
        let keys: Vec<String> = (0..20_000).map(|i| format!("k{i}")).collect();
        for chunk in keys.chunks(500) {
            let recs: Vec<NewRecord<'_>> = chunk
                .iter()
                .map(|k| NewRecord::new(Some(k.as_bytes()), Some(b"v"), 1))
                .collect();
            t.append(0, &recs).unwrap();
        }
        log.flush(None).unwrap();
        let want = [3, 4, 9_000, 9_001, 9_500, 19_999];
        let mut got = Vec::new();
        visit_offsets(&log, "t", 0, &want, &mut |off, key, _| {
            assert_eq!(key, format!("k{off}").as_bytes());
            got.push(off);
            Ok(())
        })
        .unwrap();
        assert_eq!(got, want);
        // Past the end: nothing, no error.
        let mut n = 0;
        visit_offsets(&log, "t", 0, &[25_000], &mut |_, _, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 0);
    }
}
