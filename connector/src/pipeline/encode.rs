//! The encoding stage: events to encoded records, off the pipeline task and several jobs at
//! once, while the pipeline appends earlier jobs' records in order.
//!
//! Encoding (the JSON or Avro envelope) is the largest CPU cost of the data path after the
//! source's decoding; done inline it serialised everything behind one task. Here a batch is
//! cut into [`Job`]s of about [`JOB_BYTES`] of decoded events; each job runs on the blocking
//! pool and returns [`Piece`]s (records of one topic, about `APPEND_CHUNK_BYTES` each); the
//! pipeline awaits jobs strictly in the order it created them and appends their pieces.
//!
//! A job also seals its pieces into log batches ([`cdc_log::SealedBatch`]: the Kafka
//! record batch, compressed with the topic's codec, one per partition the records go to by
//! Kafka's partitioner), so that compression (the largest cost after encoding, and the
//! whole cost of an append before) runs on the workers too; the pipeline's append only
//! copies a batch into the log and writes its base offset.
//!
//! Invariants:
//! - a job encodes with the encoders captured when its segment was prepared ([`Encoders`]
//!   is copy-on-write), so a schema version registered for a later segment or batch never
//!   encodes an earlier one's events, and every encoder a job uses is registered before
//!   any of its records is appended;
//! - pieces of one job are in event order and split where the topic changes, so order
//!   within a topic (and so within a partition) is the order of the source; a piece's
//!   batches keep that order within each partition;
//! - the batch's events (and with them its share of the queue's memory budget) are freed
//!   by the last of its jobs, on the worker: freeing rows is not the pipeline's work either.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use cdc_log::{HeaderRef, LogError, NewRecord, SealedBatch};
use cdc_schemas::encode::{Encoder, RecordBuf, RecordKind, HEADER_TRUNCATE_PARTITIONS};
use cdc_schemas::{Op, TableId, TableSchema};

use super::hidden::HiddenValues;
use super::out::OutTopic;
use super::queue::Queued;
use super::{PipelineError, APPEND_CHUNK_BYTES};

/// Decoded bytes per job: small enough that a few jobs in flight hold little memory, large
/// enough that handing one to a worker costs nothing next to encoding it.
pub(super) const JOB_BYTES: u64 = 1 << 20;

/// A table's encoder for one schema version, and its topic.
pub(super) struct TableState {
    pub schema: Arc<TableSchema>,
    pub encoder: Encoder,
    pub topic: OutTopic,
}

/// Every prepared (registered) encoder, as of one moment. Shared by the jobs prepared
/// from it; the pipeline changes its own copy with `Arc::make_mut`.
#[derive(Clone, Default)]
pub(super) struct Encoders {
    pub tables: HashMap<TableId, Arc<TableState>>,
    pub messages: Option<Arc<(Encoder, OutTopic)>>,
}

/// Events `range` of a batch, each table in it with one schema version, and the encoders
/// for them.
pub(super) struct Segment {
    pub range: Range<usize>,
    pub encoders: Arc<Encoders>,
}

/// Records of one topic, in order, sealed into one batch per partition that gets any
/// (in partition order; each batch in the records' order) for the embedded log, or left
/// unsealed for Kafka.
pub(super) struct Piece {
    pub topic: OutTopic,
    pub batches: Vec<(u32, SealedBatch)>,
    /// For Kafka: the encoded records and where each goes (librdkafka seals them).
    pub unsealed: Option<Unsealed>,
    pub records: u64,
    /// Encoded bytes before compression (what group commit counts).
    pub bytes: u64,
}

/// A piece's records for Kafka, in the order they are produced: `order` is (partition,
/// record index in `buf`), each partition's records in source order; a truncate is in it
/// once per partition (as for the embedded log).
pub(super) struct Unsealed {
    pub buf: RecordBuf,
    pub order: Vec<(u32, u32)>,
    pub ts: i64,
}

/// Part of one segment of a batch to encode.
pub(super) struct Job {
    pub batch: Arc<Queued>,
    pub part: Segment,
    pub now_ns: i64,
    /// Counts the values the format could not carry, as their records are sealed.
    pub hidden: HiddenValues,
}

/// Reused buffers: encode buffers go back once sealed, batches once appended, so
/// steady-state encoding allocates nothing per record (nor per piece's bytes).
#[derive(Clone, Default)]
pub(super) struct BufPool(Arc<Mutex<Pools>>);

#[derive(Default)]
struct Pools {
    records: Vec<RecordBuf>,
    batches: Vec<SealedBatch>,
    /// Uncompressed records sections while a codec compresses them.
    scratch: Vec<Vec<u8>>,
}

/// Buffers kept for reuse; more than the pieces of the jobs in flight is waste.
const POOL_MAX: usize = 32;

impl BufPool {
    fn pools(&self) -> std::sync::MutexGuard<'_, Pools> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self) -> RecordBuf {
        self.pools().records.pop().unwrap_or_default()
    }

    pub(super) fn give(&self, mut buf: RecordBuf) {
        buf.clear();
        if buf.bytes.capacity() > 4 * APPEND_CHUNK_BYTES {
            // One huge record grew it: give the memory back.
            buf.bytes.shrink_to(APPEND_CHUNK_BYTES);
        }
        let mut pools = self.pools();
        if pools.records.len() < POOL_MAX {
            pools.records.push(buf);
        }
    }

    fn take_batch(&self) -> SealedBatch {
        self.pools().batches.pop().unwrap_or_default()
    }

    /// Takes back the batches of an appended (or abandoned) piece.
    pub fn give_batches(&self, batches: Vec<(u32, SealedBatch)>) {
        let mut pools = self.pools();
        for (_, mut b) in batches {
            if pools.batches.len() >= POOL_MAX {
                break;
            }
            b.clear();
            if b.capacity() > 4 * APPEND_CHUNK_BYTES {
                b.shrink_to(APPEND_CHUNK_BYTES);
            }
            pools.batches.push(b);
        }
    }

    /// Takes back the buffers of an appended (or abandoned) piece.
    pub fn give_piece(&self, p: Piece) {
        self.give_batches(p.batches);
        if let Some(u) = p.unsealed {
            self.give(u.buf);
        }
    }

    fn take_scratch(&self) -> Vec<u8> {
        self.pools().scratch.pop().unwrap_or_default()
    }

    fn give_scratch(&self, mut s: Vec<u8>) {
        s.clear();
        if s.capacity() > 4 * APPEND_CHUNK_BYTES {
            s.shrink_to(APPEND_CHUNK_BYTES);
        }
        let mut pools = self.pools();
        if pools.scratch.len() < POOL_MAX {
            pools.scratch.push(s);
        }
    }
}

impl Job {
    /// Encodes the job's events into sealed pieces. On error nothing of the job is
    /// returned.
    pub fn run(self, pool: &BufPool) -> Result<Vec<Piece>, PipelineError> {
        let mut pieces: Vec<Piece> = Vec::new();
        let r = self.encode(pool, &mut pieces);
        // The last job of a batch frees its events here, on the worker.
        drop(self);
        match r {
            Ok(()) => Ok(pieces),
            Err(e) => {
                for p in pieces {
                    pool.give_piece(p);
                }
                Err(e)
            }
        }
    }

    fn encode(&self, pool: &BufPool, pieces: &mut Vec<Piece>) -> Result<(), PipelineError> {
        let seg = &self.part;
        let ts = self.now_ns / 1_000_000;
        // The table state of the previous event, by its schema's Arc: no lookup per event.
        let mut cached: Option<(&Arc<TableSchema>, &TableState)> = None;
        // The piece being encoded: its topic and records.
        let mut open: Option<(&OutTopic, RecordBuf)> = None;
        for ev in &self.batch.batch.events[seg.range.clone()] {
            let (enc, topic) = if ev.op == Op::Message {
                let m = seg.encoders.messages.as_ref().expect("prepared");
                (&m.0, &m.1)
            } else {
                let schema = ev.table.as_ref().expect("table event");
                let st = match cached {
                    Some((s, st)) if Arc::ptr_eq(s, schema) => st,
                    _ => {
                        let st = seg.encoders.tables.get(&schema.id).expect("prepared");
                        cached = Some((schema, st));
                        st
                    }
                };
                (&st.encoder, &st.topic)
            };
            let start_new = match &open {
                None => true,
                Some((t, buf)) => t.name() != topic.name() || buf.bytes.len() >= APPEND_CHUNK_BYTES,
            };
            if start_new {
                if let Some((t, buf)) = open.take() {
                    pieces.push(seal_piece(t, buf, ts, pool, &self.hidden)?);
                }
                open = Some((topic, pool.take()));
            }
            let (_, buf) = open.as_mut().expect("opened");
            if let Err(e) = enc.records_into(ev, self.now_ns, buf) {
                if let Some((_, buf)) = open.take() {
                    pool.give(buf);
                }
                return Err(e.into());
            }
        }
        if let Some((t, buf)) = open.take() {
            pieces.push(seal_piece(t, buf, ts, pool, &self.hidden)?);
        }
        Ok(())
    }
}

/// Seals the records of `buf` (all for `topic`, timestamp `ts`) into a [`Piece`] and
/// gives the encode buffer back.
fn seal_piece(
    topic: &OutTopic,
    buf: RecordBuf,
    ts: i64,
    pool: &BufPool,
    hidden: &HiddenValues,
) -> Result<Piece, PipelineError> {
    hidden.report(&buf);
    let topic = match topic {
        OutTopic::Log(t) => t,
        OutTopic::Kafka(_) => return Ok(unsealed_piece(topic, buf, ts)),
    };
    let mut scratch = pool.take_scratch();
    let mut batches = Vec::new();
    let r = seal_records(topic, &buf, ts, pool, &mut scratch, &mut batches);
    pool.give_scratch(scratch);
    let piece = Piece {
        topic: OutTopic::Log(topic.clone()),
        batches,
        unsealed: None,
        records: buf.len() as u64,
        bytes: buf.bytes.len() as u64,
    };
    pool.give(buf);
    match r {
        Ok(()) => Ok(piece),
        Err(e) => {
            pool.give_batches(piece.batches);
            Err(e.into())
        }
    }
}

/// A piece for Kafka: `buf`'s records with their partitions, placed as
/// [`seal_records`] places them, in source order.
fn unsealed_piece(topic: &OutTopic, buf: RecordBuf, ts: i64) -> Piece {
    let parts = topic.partitions();
    let mut order: Vec<(u32, u32)> = Vec::with_capacity(buf.len());
    for i in 0..buf.len() {
        if parts > 1 && buf.spans[i].kind == RecordKind::Change(Op::Truncate) {
            order.extend((0..parts).map(|p| (p, i as u32)));
        } else {
            order.push((topic.partition_for(buf.key(i)), i as u32));
        }
    }
    // In source order: each partition's records are then in their order too.
    Piece {
        topic: topic.clone(),
        batches: Vec::new(),
        records: buf.len() as u64,
        bytes: buf.bytes.len() as u64,
        unsealed: Some(Unsealed { buf, order, ts }),
    }
}

/// The headers of record `i` of `buf`, pushed onto `out` (any number of them).
pub(super) fn push_headers<'a>(buf: &'a RecordBuf, i: usize, out: &mut Vec<HeaderRef<'a>>) {
    out.extend(buf.headers(i).map(|(key, value)| HeaderRef {
        key,
        value: Some(value),
    }));
}

/// One sealed batch per partition of `topic` that gets records of `buf`, each partition's
/// records in their order in `buf`.
fn seal_records(
    topic: &cdc_log::Topic,
    buf: &RecordBuf,
    ts: i64,
    pool: &BufPool,
    scratch: &mut Vec<u8>,
    out: &mut Vec<(u32, SealedBatch)>,
) -> Result<(), LogError> {
    let n = buf.len();
    if n == 0 {
        return Ok(());
    }
    // Every record's headers in one list, each record's range of it (headers are rare:
    // the list is usually empty).
    let parts = topic.partitions();
    let parts_text = parts.to_string();
    let mut headers: Vec<HeaderRef<'_>> = Vec::new();
    let mut ranges: Vec<Range<usize>> = Vec::with_capacity(n);
    for i in 0..n {
        let start = headers.len();
        push_headers(buf, i, &mut headers);
        if parts > 1 && buf.spans[i].kind == RecordKind::Change(Op::Truncate) {
            headers.push(HeaderRef {
                key: HEADER_TRUNCATE_PARTITIONS,
                value: Some(parts_text.as_bytes()),
            });
        }
        ranges.push(start..headers.len());
    }
    let records: Vec<NewRecord<'_>> = (0..n)
        .map(|i| NewRecord {
            key: buf.key(i),
            value: buf.value(i),
            headers: &headers[ranges[i].clone()],
            timestamp: ts,
        })
        .collect();
    let codec = topic.config().compression;
    if topic.partitions() == 1 {
        // Where Kafka's partitioner would send every record anyway: no hashing of each
        // key and no regrouping.
        let mut b = pool.take_batch();
        b.seal(&records, codec, scratch)?;
        out.push((0, b));
        return Ok(());
    }
    // (partition, record) pairs. A truncate concerns every key of the table, and keys are
    // spread over the partitions, whose records have no order between them: so it goes to
    // every partition, where each copy sits at its place in commit order and a reader of
    // one partition clears that partition's rows older than it (as Kafka writes a
    // transaction's control records to every partition it touched). Debezium writes one
    // truncate record, to one partition. Each copy says how many there are
    // (HEADER_TRUNCATE_PARTITIONS).
    let mut order: Vec<(u32, usize)> = Vec::with_capacity(n);
    for (i, r) in records.iter().enumerate() {
        if buf.spans[i].kind == RecordKind::Change(Op::Truncate) {
            order.extend((0..parts).map(|p| (p, i)));
        } else {
            order.push((topic.partition_for(r.key), i));
        }
    }
    // Stable: each partition's records stay in their order.
    order.sort_by_key(|&(p, _)| p);
    let mut group: Vec<NewRecord<'_>> = Vec::with_capacity(n);
    let mut at = 0;
    while at < order.len() {
        let p = order[at].0;
        group.clear();
        while at < order.len() && order[at].0 == p {
            group.push(records[order[at].1]);
            at += 1;
        }
        let mut b = pool.take_batch();
        if let Err(e) = b.seal(&group, codec, scratch) {
            pool.give_batches(vec![(p, b)]);
            return Err(e);
        }
        out.push((p, b));
    }
    Ok(())
}

/// Cuts `range` (events of one segment) into pieces of about `per_job` events.
pub(super) fn split(range: Range<usize>, per_job: usize) -> impl Iterator<Item = Range<usize>> {
    let per_job = per_job.max(1);
    let end = range.end;
    range
        .step_by(per_job)
        .map(move |s| s..(s + per_job).min(end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_log::{partition_for_key, Compression, Log, LogOptions, StartAt, TopicConfig};
    use cdc_schemas::encode::{RecordKind, RecordSpan};

    /// A record's key, value and header value.
    type Parts<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, Option<&'a [u8]>);

    /// Records `(key, value, header)` in one encode buffer, as the encoder lays them out.
    fn record_buf(recs: &[Parts<'_>]) -> RecordBuf {
        let mut buf = RecordBuf::new();
        for (k, v, h) in recs {
            let mut put = |b: &Option<&[u8]>| {
                b.map(|b| {
                    let at = buf.bytes.len();
                    buf.bytes.extend_from_slice(b);
                    at..buf.bytes.len()
                })
            };
            let (key, value) = (put(k), put(v));
            let first = buf.headers.spans.len() as u32;
            if let Some(h) = h {
                buf.headers.push("__debezium.newkey", h);
            }
            buf.spans.push(RecordSpan {
                kind: RecordKind::Change(Op::Create),
                key,
                value,
                headers: first..buf.headers.spans.len() as u32,
            });
        }
        buf
    }

    /// Sealed per partition (Kafka's partitioner, keyless round-robin), each partition's
    /// records in their order, headers kept, the topic's codec; appended, they read back.
    #[test]
    fn pieces_are_sealed_per_partition_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        for (name, parts) in [("one", 1), ("four", 4)] {
            let topic = log
                .create_topic(
                    name,
                    TopicConfig {
                        compression: Compression::Lz4,
                        ..TopicConfig::with_partitions(parts)
                    },
                )
                .unwrap();
            let keys: Vec<String> = (0..200).map(|i| format!("{{\"id\":{i}}}")).collect();
            let vals: Vec<String> = (0..200).map(|i| format!("value {i}")).collect();
            let recs: Vec<_> = (0..200)
                .map(|i| {
                    (
                        (i % 50 != 7).then_some(keys[i].as_bytes()),
                        (i % 10 != 3).then_some(vals[i].as_bytes()),
                        (i % 9 == 0).then_some(&b"old"[..]),
                    )
                })
                .collect();
            let buf = record_buf(&recs);
            let pool = BufPool::default();
            let piece = seal_piece(
                &OutTopic::Log(topic.clone()),
                buf,
                1234,
                &pool,
                &HiddenValues::default(),
            )
            .unwrap();
            assert_eq!(piece.records, 200);
            let got: Vec<u32> = piece.batches.iter().map(|b| b.0).collect();
            let mut sorted = got.clone();
            sorted.dedup();
            assert_eq!(got, sorted, "one batch per partition, in partition order");
            assert!(piece
                .batches
                .iter()
                .all(|(_, b)| b.compression() == Compression::Lz4));
            for (p, b) in &piece.batches {
                topic.append_sealed(*p, b).unwrap();
            }
            log.flush(None).unwrap();
            let mut seen = 0;
            for p in 0..parts {
                let mut r = log.reader(name, p, StartAt::Earliest).unwrap();
                let back = r.poll(1 << 20).unwrap();
                // In the order of the buffer: values carry their index.
                let idx: Vec<usize> = back
                    .iter()
                    .map(|rec| {
                        // Keys are unique; keyless records have a value naming them.
                        let i = match &rec.key {
                            Some(k) => (0..200).find(|&i| recs[i].0 == Some(&k[..])).unwrap(),
                            None => std::str::from_utf8(rec.value.as_deref().unwrap()).unwrap()
                                [6..]
                                .parse()
                                .unwrap(),
                        };
                        assert_eq!(rec.timestamp, 1234);
                        assert_eq!(rec.key.as_deref(), recs[i].0);
                        if let Some(k) = recs[i].0 {
                            assert_eq!(partition_for_key(k, parts), p);
                        }
                        let h: Vec<_> = rec.headers.iter().map(|h| h.value.as_deref()).collect();
                        match recs[i].2 {
                            Some(v) => assert_eq!(h, [Some(v)]),
                            None => assert!(h.is_empty()),
                        }
                        i
                    })
                    .collect();
                assert!(idx.windows(2).all(|w| w[0] < w[1]), "{name}/{p}: {idx:?}");
                seen += back.len();
            }
            assert_eq!(seen, 200);
        }
    }

    /// A truncate (keyless, `op = t`) is in every partition of a multi-partition topic,
    /// at its place among each partition's records; other keyless records go to one.
    #[test]
    fn a_truncate_is_written_to_every_partition_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        let parts = 3;
        let topic = log
            .create_topic("t", TopicConfig::with_partitions(parts))
            .unwrap();
        let keys: Vec<String> = (0..60).map(|i| format!("{{\"id\":{i}}}")).collect();
        let vals: Vec<String> = (0..60).map(|i| format!("value {i}")).collect();
        let recs: Vec<_> = (0..60)
            .map(|i| (Some(keys[i].as_bytes()), Some(vals[i].as_bytes()), None))
            .collect();
        let mut buf = record_buf(&recs);
        // Record 30 becomes a truncate: no key.
        buf.spans[30].key = None;
        buf.spans[30].kind = RecordKind::Change(Op::Truncate);
        let piece = seal_piece(
            &OutTopic::Log(topic.clone()),
            buf,
            1,
            &BufPool::default(),
            &HiddenValues::default(),
        )
        .unwrap();
        for (p, b) in &piece.batches {
            topic.append_sealed(*p, b).unwrap();
        }
        log.flush(None).unwrap();
        let mut total = 0;
        for p in 0..parts {
            let back = log
                .reader("t", p, StartAt::Earliest)
                .unwrap()
                .poll(1 << 20)
                .unwrap();
            let idx: Vec<usize> = back
                .iter()
                .map(|r| {
                    std::str::from_utf8(r.value.as_deref().unwrap()).unwrap()[6..]
                        .parse()
                        .unwrap()
                })
                .collect();
            assert_eq!(
                idx.iter().filter(|&&i| i == 30).count(),
                1,
                "partition {p}: {idx:?}"
            );
            assert!(
                idx.windows(2).all(|w| w[0] < w[1]),
                "partition {p}: {idx:?}"
            );
            assert!(back
                .iter()
                .all(|r| r.key.is_none() == (r.value.as_deref() == Some(&b"value 30"[..]))));
            total += back.len();
        }
        assert_eq!(total, 60 + parts as usize - 1);
    }

    #[test]
    fn split_covers_the_range_in_order() {
        let parts: Vec<_> = split(3..10, 3).collect();
        assert_eq!(parts, vec![3..6, 6..9, 9..10]);
        assert_eq!(split(0..0, 5).count(), 0);
        assert_eq!(split(0..4, 0).count(), 4);
    }
}
