//! Model-based test: random sequences of append, flush, read, reopen (drop without flush
//! = crash of unflushed data), retention, compaction and group commits, checked against
//! a simple in-memory model. After every step the log must equal the model's durable
//! prefix (minus what retention/compaction legitimately removed, checked separately).

mod common;

use std::collections::{BTreeMap, HashMap};

use cdc_log::{
    CleanupPolicy, Log, LogError, LogOptions, NewRecord, SealedBatch, StartAt, TopicConfig,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// topic index (0 = delete policy, 1 = compacted), partition, records (key, value len or tombstone)
    Append(usize, u32, Vec<(u8, Option<u32>)>),
    Flush(u8),
    Reopen,
    Read(usize, u32, u8),
    Retention,
    Compact(i64),
    Commit(u32, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Now and then a value large enough that its flush takes the O_DIRECT path of the
        // write stage (the last block padded with zeros), which reopen must read back.
        6 => (0..2usize, 0..2u32, prop::collection::vec((0..6u8, prop::option::weighted(0.85, prop_oneof![30 => 0..400u32, 1 => 60_000..MAX_VALUE])), 1..8))
            .prop_map(|(t, p, r)| Op::Append(t, p, r)),
        3 => any::<u8>().prop_map(Op::Flush),
        1 => Just(Op::Reopen),
        2 => (0..2usize, 0..2u32, any::<u8>()).prop_map(|(t, p, f)| Op::Read(t, p, f)),
        1 => Just(Op::Retention),
        1 => (0..3i64).prop_map(|n| Op::Compact(n * 1000)),
        1 => (0..2u32, any::<u8>()).prop_map(|(p, f)| Op::Commit(p, f)),
    ]
}

#[derive(Debug, Clone, PartialEq)]
struct MRec {
    offset: u64,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    ts: i64,
}

#[derive(Default, Debug)]
struct MPart {
    /// Records present (durable or not), by offset.
    recs: Vec<MRec>,
    /// Offset after the last durable record.
    durable: u64,
    /// Offset the next append gets.
    leo: u64,
    log_start: u64,
}

impl MPart {
    fn durable_recs(&self) -> Vec<&MRec> {
        self.recs
            .iter()
            .filter(|r| r.offset < self.durable)
            .collect()
    }
}

const TOPICS: [&str; 2] = ["d", "c"];
const MAX_VALUE: u32 = 140_000;

fn configs() -> [TopicConfig; 2] {
    [
        TopicConfig {
            partitions: 2,
            // Tiny segments with size retention: `Retention` drops segments into the
            // recycle pool (default bound 2 per partition) and later rolls reuse them, so
            // appends, reads, reopens (crashes) and retention all meet recycled active
            // segments with stale batches past their data.
            segment_bytes: 1024,
            retention_ms: None,
            retention_bytes: Some(3000),
            ..TopicConfig::default()
        },
        TopicConfig {
            partitions: 2,
            segment_bytes: 1024,
            retention_ms: None,
            cleanup_policy: CleanupPolicy::COMPACT,
            delete_retention_ms: 500,
            // The cleaner re-encodes compressed batches, sealed ones among them.
            compression: cdc_log::Compression::Lz4,
            ..TopicConfig::default()
        },
    ]
}

fn read_from(log: &Log, t: &str, p: u32, from: u64) -> Result<Vec<MRec>, LogError> {
    let mut r = log.reader(t, p, StartAt::Offset(from))?;
    let mut out = Vec::new();
    loop {
        let got = r.poll(2000)?;
        if got.is_empty() {
            return Ok(out);
        }
        out.extend(got.into_iter().map(|r| MRec {
            offset: r.offset,
            key: r.key.map(|k| k.to_vec()).unwrap_or_default(),
            value: r.value.map(|v| v.to_vec()),
            ts: r.timestamp,
        }));
    }
}

fn check_all(log: &Log, model: &BTreeMap<(usize, u32), MPart>) {
    for (&(t, p), m) in model {
        let got = read_from(log, TOPICS[t], p, m.log_start).expect("read");
        let want: Vec<MRec> = m.durable_recs().into_iter().cloned().collect();
        assert_eq!(got, want, "topic {} partition {p}", TOPICS[t]);
        let d = log.describe(TOPICS[t]).unwrap();
        let pd = &d.partitions[p as usize];
        assert_eq!(pd.high_watermark, m.durable, "hw {} {p}", TOPICS[t]);
        assert_eq!(pd.log_end_offset, m.leo, "leo {} {p}", TOPICS[t]);
        assert_eq!(
            pd.log_start_offset, m.log_start,
            "log start {} {p}",
            TOPICS[t]
        );
    }
}

thread_local! {
    /// Rolls into recycled files during this thread's runs (`MetricsSnapshot::recycled_segments`
    /// of every log instance `run` opened), so a test can check recycling was exercised.
    static RECYCLED_ROLLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_recycled(log: &Log) {
    RECYCLED_ROLLS.with(|c| c.set(c.get() + log.metrics().recycled_segments));
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let cfgs = configs();
    for (i, c) in cfgs.iter().enumerate() {
        log.create_topic(TOPICS[i], c.clone()).unwrap();
    }
    let mut model: BTreeMap<(usize, u32), MPart> = BTreeMap::new();
    for t in 0..2 {
        for p in 0..2 {
            model.insert((t, p), MPart::default());
        }
    }
    let mut checkpoint: Option<Vec<u8>> = None;
    let mut committed: HashMap<u32, u64> = HashMap::new();
    let mut clock = 0i64;
    let value_bytes = vec![0xabu8; MAX_VALUE as usize];
    for op in ops {
        clock += 100;
        match op {
            Op::Append(t, p, recs) => {
                let keys: Vec<[u8; 1]> = recs.iter().map(|(k, _)| [*k]).collect();
                let new: Vec<NewRecord<'_>> = recs
                    .iter()
                    .zip(&keys)
                    .map(|((_, v), k)| {
                        NewRecord::new(Some(k), v.map(|n| &value_bytes[..n as usize]), clock)
                    })
                    .collect();
                // Half the appends go through a batch sealed beforehand (as the
                // connector's encode workers make them), half are encoded by the partition:
                // readers, recovery, retention and the cleaner must not tell them apart.
                let topic = log.topic(TOPICS[t]).unwrap();
                let info = if recs.len() % 2 == 0 {
                    let mut sealed = SealedBatch::new();
                    sealed
                        .seal(&new, topic.config().compression, &mut Vec::new())
                        .unwrap();
                    topic.append_sealed(p, &sealed).unwrap()
                } else {
                    topic.append(p, &new).unwrap()
                };
                assert_eq!(info.last_offset, info.base_offset + new.len() as u64 - 1);
                let m = model.get_mut(&(t, p)).unwrap();
                assert_eq!(info.base_offset, m.leo);
                for (i, r) in new.iter().enumerate() {
                    m.recs.push(MRec {
                        offset: m.leo + i as u64,
                        key: r.key.unwrap().to_vec(),
                        value: r.value.map(|v| v.to_vec()),
                        ts: clock,
                    });
                }
                m.leo += new.len() as u64;
            }
            Op::Flush(c) => {
                let cp = (c % 3 != 0).then(|| vec![c; (c % 5) as usize]);
                log.flush(cp.as_deref()).unwrap();
                if cp.is_some() {
                    checkpoint = cp;
                }
                for m in model.values_mut() {
                    m.durable = m.leo;
                }
            }
            Op::Reopen => {
                count_recycled(&log);
                drop(log);
                log = Log::open(dir.path(), LogOptions::default()).unwrap();
                assert_eq!(log.checkpoint(), checkpoint);
                for m in model.values_mut() {
                    let d = m.durable;
                    m.recs.retain(|r| r.offset < d);
                    m.leo = d;
                }
                for (&p, &o) in &committed {
                    assert_eq!(log.committed("g", "d", p), Some(o));
                }
            }
            Op::Read(t, p, f) => {
                let m = &model[&(t, p)];
                let span = m.durable.saturating_sub(m.log_start) + 2;
                let from = (m.log_start + (f as u64 % span)).saturating_sub(1);
                match read_from(&log, TOPICS[t], p, from) {
                    Ok(got) => {
                        let want: Vec<MRec> = m
                            .durable_recs()
                            .into_iter()
                            .filter(|r| r.offset >= from)
                            .cloned()
                            .collect();
                        assert!(from >= m.log_start && from <= m.leo);
                        assert_eq!(got, want);
                    }
                    Err(LogError::OffsetOutOfRange { .. }) => {
                        assert!(
                            from < m.log_start || from > m.leo,
                            "spurious out of range at {from}"
                        );
                    }
                    Err(e) => panic!("read failed: {e}"),
                }
            }
            Op::Retention => {
                log.enforce_retention().unwrap();
                for p in 0..2u32 {
                    let m = model.get_mut(&(0, p)).unwrap();
                    let d = log.describe("d").unwrap();
                    let start = d.partitions[p as usize].log_start_offset;
                    assert!(start >= m.log_start && start <= m.durable);
                    // Size retention keeps at least retention.bytes worth of durable data.
                    if start > m.log_start {
                        assert!(d.partitions[p as usize].size_bytes >= 3000 || start == m.durable);
                    }
                    m.log_start = start;
                    m.recs.retain(|r| r.offset >= start);
                }
            }
            Op::Compact(extra) => {
                let now = clock + extra;
                log.compact_at("c", now).unwrap();
                for p in 0..2u32 {
                    let m = model.get_mut(&(1, p)).unwrap();
                    let durable = m.durable_recs().into_iter().cloned().collect::<Vec<_>>();
                    let got = read_from(&log, "c", p, m.log_start).unwrap();
                    // Survivors are unchanged records at their offsets.
                    let by_off: HashMap<u64, &MRec> =
                        durable.iter().map(|r| (r.offset, r)).collect();
                    for g in &got {
                        assert_eq!(
                            by_off.get(&g.offset).copied(),
                            Some(g),
                            "compaction changed a record"
                        );
                    }
                    // The newest durable record of each key survives unless it is an
                    // expired tombstone.
                    let mut newest: HashMap<&[u8], &MRec> = HashMap::new();
                    for r in &durable {
                        newest.insert(&r.key, r);
                    }
                    for r in newest.values() {
                        let expired = r.value.is_none() && r.ts <= now - 500;
                        if !expired {
                            assert!(
                                got.iter().any(|g| g.offset == r.offset),
                                "newest record of a key lost: {r:?}"
                            );
                        }
                    }
                    // Adopt the result: keep unflushed records too.
                    let keep: std::collections::HashSet<u64> =
                        got.iter().map(|g| g.offset).collect();
                    let d = m.durable;
                    m.recs.retain(|r| r.offset >= d || keep.contains(&r.offset));
                }
            }
            Op::Commit(p, f) => {
                let m = &model[&(0, p)];
                let o = m.log_start + (f as u64 % (m.durable - m.log_start + 1));
                log.commit("g", "d", p, o).unwrap();
                committed.insert(p, o);
            }
        }
        check_all(&log, &model);
    }
    // Final: reopen and compare once more.
    count_recycled(&log);
    drop(log);
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    for m in model.values_mut() {
        let d = m.durable;
        m.recs.retain(|r| r.offset < d);
        m.leo = d;
    }
    check_all(&log, &model);
    for t in TOPICS {
        log.verify(t).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("CDC_LOG_MODEL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(128),
        max_shrink_iters: 2000,
        .. ProptestConfig::default()
    })]

    #[test]
    fn log_matches_model(ops in prop::collection::vec(op(), 1..60)) {
        run(ops);
    }
}

/// A fixed sequence that must go through segment recycling: retention pools dropped
/// segments of the delete-policy topic, later appends roll into them, a reopen (dropping
/// unflushed appends) meets a recycled active segment with stale batches past its data.
#[test]
fn model_sequence_with_recycling() {
    let mut ops = Vec::new();
    for round in 0..6u8 {
        for i in 0..12u8 {
            ops.push(Op::Append(
                0,
                0,
                vec![(i % 6, Some(300)), (round, Some(200))],
            ));
            if i % 3 == 2 {
                ops.push(Op::Flush(i));
            }
        }
        ops.push(Op::Retention);
        ops.push(Op::Read(0, 0, round));
        ops.push(Op::Append(0, 0, vec![(1, Some(100))]));
        ops.push(Op::Reopen);
    }
    RECYCLED_ROLLS.with(|c| c.set(0));
    run(ops);
    let rolls = RECYCLED_ROLLS.with(|c| c.get());
    eprintln!("model sequence: {rolls} rolls into recycled files");
    assert!(rolls > 0, "no roll reused a recycled segment file");
}
