//! Behaviour tests of the public API: append/flush/read, checkpoint, tailing, groups,
//! retention, compaction, time lookup, disk budget.

mod common;

use std::time::{Duration, Instant};

use cdc_log::{
    CleanupPolicy, Compression, FlushPolicy, HeaderRef, Log, LogError, LogOptions, NewRecord,
    ResetPolicy, StartAt, TopicConfig,
};
use common::*;

#[test]
fn append_flush_read_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let t = log.create_topic("t", small_topic(2)).unwrap();
    let h = [HeaderRef {
        key: "op",
        value: Some(b"c"),
    }];
    let info = t
        .append(
            0,
            &[
                rec(b"a", b"1", 10),
                NewRecord {
                    key: Some(b"b"),
                    value: None,
                    headers: &h,
                    timestamp: 11,
                },
            ],
        )
        .unwrap();
    assert_eq!((info.base_offset, info.last_offset), (0, 1));
    // Not durable yet: invisible.
    assert!(read_all(&log, "t", 0).is_empty());
    log.flush(Some(b"pos-1")).unwrap();
    let recs = read_all(&log, "t", 0);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1].offset, 1);
    assert_eq!(recs[1].value, None);
    assert_eq!(recs[1].headers[0].key, "op");
    // Unflushed appends are lost on drop (simulated crash); flushed ones survive. Appends
    // are staged in memory until a flush, a roll or a full write chunk writes them to the
    // segment file: these two each fill a segment, so the first one reaches a file (when
    // the second rolls) and recovery has unflushed bytes on disk to cut.
    let big = vec![b'3'; 2000];
    t.append(0, &[rec(b"c", &big, 12)]).unwrap();
    t.append(0, &[rec(b"c", &big, 12)]).unwrap();
    drop(t);
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.checkpoint().as_deref(), Some(&b"pos-1"[..]));
    assert_eq!(read_all(&log, "t", 0).len(), 2);
    let d = log.describe("t").unwrap();
    assert_eq!(d.partitions[0].high_watermark, 2);
    assert_eq!(d.partitions[0].log_end_offset, 2);
    assert!(log.metrics().recovery_truncated_bytes > 0);
    // Offsets continue gaplessly.
    let t = log.topic("t").unwrap();
    assert_eq!(t.append(0, &[rec(b"d", b"4", 13)]).unwrap().base_offset, 2);
}

#[test]
fn many_segments_and_compression() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for (name, c) in [
        ("n", Compression::None),
        ("l", Compression::Lz4),
        ("z", Compression::Zstd),
    ] {
        let t = log
            .create_topic(
                name,
                TopicConfig {
                    compression: c,
                    ..small_topic(1)
                },
            )
            .unwrap();
        for i in 0..200u32 {
            let v = format!("value-{i}-{}", "x".repeat((i % 50) as usize));
            t.append(0, &[rec(&i.to_be_bytes(), v.as_bytes(), i as i64)])
                .unwrap();
        }
        log.flush(None).unwrap();
        let recs = read_all(&log, name, 0);
        assert_eq!(recs.len(), 200);
        assert!(recs.iter().enumerate().all(|(i, r)| r.offset == i as u64));
        assert!(log.describe(name).unwrap().partitions[0].segments > 1);
        // Reading from the middle (index lookup) and by time.
        let mut r = log.reader(name, 0, StartAt::Offset(137)).unwrap();
        assert_eq!(r.poll(100).unwrap()[0].offset, 137);
        assert_eq!(
            log.resolve_offset(name, 0, StartAt::Timestamp(150))
                .unwrap(),
            150
        );
        assert_eq!(
            log.resolve_offset(name, 0, StartAt::Timestamp(10_000))
                .unwrap(),
            200
        );
        assert_eq!(log.verify(name).unwrap(), 200);
    }
    drop(log);
    let log = open(dir.path());
    for name in ["n", "l", "z"] {
        assert_eq!(read_all(&log, name, 0).len(), 200);
    }
}

#[test]
fn tailing_reader_wakes_on_flush() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let t = log.create_topic("t", small_topic(1)).unwrap();
    let mut r = log.reader("t", 0, StartAt::Latest).unwrap();
    let th = std::thread::spawn(move || {
        let start = Instant::now();
        let got = r.next_batch(1 << 20, Duration::from_secs(10)).unwrap();
        (got, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100));
    t.append(0, &[rec(b"k", b"v", 1)]).unwrap();
    log.flush(None).unwrap();
    let (got, waited) = th.join().unwrap();
    assert_eq!(got.len(), 1);
    assert!(waited < Duration::from_secs(5));
    // Timeout with nothing new.
    let mut r = log.reader("t", 0, StartAt::Latest).unwrap();
    assert!(r.next_batch(1024, SHORT).unwrap().is_empty());
}

#[test]
fn async_ready_future() {
    // A tiny executor: poll the future with a thread-unparking waker.
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake};
    struct W(std::thread::Thread);
    impl Wake for W {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let t = log.create_topic("t", small_topic(1)).unwrap();
    let r = log.reader("t", 0, StartAt::Latest).unwrap();
    let log2 = log.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        t.append(0, &[rec(b"k", b"v", 1)]).unwrap();
        log2.flush(None).unwrap();
    });
    let mut fut = Box::pin(r.ready());
    let waker = Arc::new(W(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(()) = fut.as_mut().poll(&mut cx) {
            break;
        }
        assert!(Instant::now() < deadline);
        std::thread::park_timeout(Duration::from_secs(1));
    }
    writer.join().unwrap();
}

#[test]
fn consumer_groups_and_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let (log, t) = hundred_records(dir.path());
    let mut c = log.consumer("g", "t", 0, ResetPolicy::Earliest).unwrap();
    let got = c.next_batch(500, SHORT).unwrap();
    assert!(!got.is_empty());
    c.commit().unwrap();
    let committed = log.committed("g", "t", 0).unwrap();
    assert_eq!(committed, got.last().unwrap().offset + 1);
    let lag = log.groups();
    assert_eq!(lag[0].lag, 100 - committed);
    // Retention by size moves the log start past the group.
    let r = log.enforce_retention().unwrap();
    assert!(r.deleted_segments > 0);
    let start = log.describe("t").unwrap().partitions[0].log_start_offset;
    assert!(start > committed);
    let mut strict = log.reader("t", 0, StartAt::Offset(0)).unwrap();
    assert!(matches!(
        strict.poll(100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    strict.set_reset_policy(ResetPolicy::Earliest);
    assert_eq!(strict.poll(100).unwrap()[0].offset, start);
    // Group reset and reopen persistence.
    assert_eq!(
        log.reset_group("g", "t", StartAt::Latest).unwrap(),
        vec![(0, 100)]
    );
    drop((t, c, strict));
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.committed("g", "t", 0), Some(100));
    assert_eq!(
        log.describe("t").unwrap().partitions[0].log_start_offset,
        start
    );
    assert_eq!(read_all(&log, "t", 0)[0].offset, start);
    assert!(matches!(
        log.consumer("new", "t", 0, ResetPolicy::None),
        Err(LogError::NoCommittedOffset { .. })
    ));
}

#[test]
fn time_retention_deletes_old_closed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let t = log
        .create_topic(
            "t",
            TopicConfig {
                retention_ms: Some(1000),
                ..small_topic(1)
            },
        )
        .unwrap();
    let now = cdc_log::now_ms();
    for i in 0..50i64 {
        let ts = if i < 30 { now - 10_000 } else { now };
        t.append(0, &[rec(b"k", &[1u8; 100], ts)]).unwrap();
    }
    log.flush(None).unwrap();
    log.enforce_retention().unwrap();
    let d = log.describe("t").unwrap().partitions[0].clone();
    assert!(d.log_start_offset > 0 && d.log_start_offset <= 30, "{d:?}");
    let recs = read_all(&log, "t", 0);
    assert!(recs.iter().filter(|r| r.timestamp == now).count() == 20);
}

/// `LogOptions::maintenance_interval` (what `cdc run` sets): the background thread applies
/// size retention and compaction without anyone calling them, and stops after `close`.
#[test]
fn maintenance_thread_applies_retention_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogOptions {
            maintenance_interval: Some(Duration::from_millis(20)),
            ..LogOptions::default()
        },
    )
    .unwrap();
    let sized = log
        .create_topic(
            "sized",
            TopicConfig {
                retention_bytes: Some(4096),
                segment_ms: None,
                ..small_topic(1)
            },
        )
        .unwrap();
    let compacted = log
        .create_topic(
            "compacted",
            TopicConfig {
                cleanup_policy: CleanupPolicy::COMPACT,
                segment_ms: None,
                ..small_topic(1)
            },
        )
        .unwrap();
    for i in 0..200u32 {
        sized.append(0, &[rec(b"k", &[7u8; 100], 0)]).unwrap();
        let key = format!("k{}", i % 5);
        compacted
            .append(0, &[rec(key.as_bytes(), &i.to_be_bytes(), 0)])
            .unwrap();
    }
    log.flush(None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = log.describe("sized").unwrap().partitions[0].clone();
        let c = read_all(&log, "compacted", 0).len();
        if s.log_start_offset > 0 && c < 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "maintenance did not run: log start {}, {c} compacted-topic records",
            s.log_start_offset
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(log.metrics().compaction_runs > 0);
    log.close().unwrap();
}

#[test]
fn compaction_keeps_latest_and_expires_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let t = log
        .create_topic(
            "c",
            TopicConfig {
                cleanup_policy: CleanupPolicy::COMPACT,
                delete_retention_ms: 1000,
                ..small_topic(1)
            },
        )
        .unwrap();
    assert!(t.append(0, &[NewRecord::new(None, Some(b"x"), 0)]).is_err());
    // keys k0..k4, 10 rounds; k1 deleted at round 5 (tombstone at ts 5000).
    let mut expect = std::collections::BTreeMap::new();
    let mut off = 0u64;
    for round in 0..10i64 {
        for k in 0..5 {
            let key = format!("k{k}");
            let val = format!("v{round}");
            let deleted = k == 1 && round >= 5;
            let value = if deleted { None } else { Some(val.as_bytes()) };
            if !(k == 1 && round > 5) {
                t.append(
                    0,
                    &[NewRecord::new(Some(key.as_bytes()), value, round * 1000)],
                )
                .unwrap();
                expect.insert(key, (off, value.map(|v| v.to_vec())));
                off += 1;
            }
        }
    }
    // Active segment filler so every record above sits in closed segments.
    for _ in 0..20 {
        t.append(0, &[rec(b"filler", &[0u8; 200], 99_000)]).unwrap();
    }
    log.flush(None).unwrap();
    let before = read_all(&log, "c", 0);
    // Tombstone not yet expired (now = 5500 < 5000 + 1000).
    log.compact_at("c", 5500).unwrap();
    let mid = read_all(&log, "c", 0);
    assert!(mid.len() < before.len());
    let tomb = expect["k1"].0;
    assert!(mid.iter().any(|r| r.offset == tomb && r.value.is_none()));
    // Later: tombstone gone.
    let r = log.compact_at("c", 100_000).unwrap();
    assert!(r.removed_records >= 1);
    let after = read_all(&log, "c", 0);
    assert!(!after.iter().any(|r| r.key.as_deref() == Some(b"k1")));
    for k in [0, 2, 3, 4] {
        let key = format!("k{k}");
        let (o, v) = &expect[&key];
        let found: Vec<_> = after
            .iter()
            .filter(|r| r.key.as_deref() == Some(key.as_bytes()))
            .collect();
        assert_eq!(found.len(), 1, "{key}");
        assert_eq!(found[0].offset, *o);
        assert_eq!(found[0].value.as_deref(), v.as_deref());
    }
    // Offsets strictly increase; the log still reopens (segment end invariant holds).
    assert!(after.windows(2).all(|w| w[0].offset < w[1].offset));
    drop(t);
    drop(log);
    let log = open(dir.path());
    assert_eq!(read_all(&log, "c", 0), after);
    assert!(log.metrics().recovery_rebuilt_indexes == 0);
}

/// A key map too small for the dirty section: each run cleans the whole segments the map
/// covers and moves the cleaner checkpoint, the next goes on from there, and the runs end
/// where one full run would: each key once among the closed segments (its newest there),
/// survivors at their offsets, the active segment untouched. Then, with nothing new, a
/// run rewrites nothing.
#[test]
fn compaction_with_a_small_key_map_progresses_over_runs() {
    // About 40 keys per run; segments of ~30 records.
    compaction_converges(40 * 32, None);
}

/// Compaction that leaves a thousand segments holding one empty batch each (one record
/// per segment, most of them superseded): a reader from the start still gets to the
/// survivors in one `poll`, however many empty segments come first.
#[test]
fn readers_cross_any_number_of_emptied_segments() {
    // Timestamps from 1970 make every append roll with the default `segment.ms`.
    compaction_converges(64 << 20, Some(TopicConfig::default().segment_ms));
    compaction_converges(40 * 32, Some(TopicConfig::default().segment_ms));
}

fn compaction_converges(dedupe_bytes: usize, segment_ms: Option<Option<i64>>) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogOptions {
            cleaner_dedupe_bytes: dedupe_bytes,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let t = log
        .create_topic(
            "c",
            TopicConfig {
                cleanup_policy: CleanupPolicy::COMPACT,
                segment_bytes: 4096,
                segment_ms: segment_ms.unwrap_or(None),
                ..small_topic(1)
            },
        )
        .unwrap();
    // 200 keys, 6 rounds.
    let mut all = Vec::new();
    for round in 0..6 {
        for k in 0..200u32 {
            let key = format!("key-{k:04}");
            let value = format!("r{round}-{}", "x".repeat(100));
            let info = t
                .append(0, &[rec(key.as_bytes(), value.as_bytes(), 1_000)])
                .unwrap();
            all.push((info.base_offset, key, value));
        }
    }
    log.flush(None).unwrap();
    let before = read_all(&log, "c", 0);
    assert_eq!(before.len(), all.len());
    // ~40 closed segments, ~1.3 covered per run: 60 runs reach the end.
    let removed_per_run: Vec<u64> = (0..60)
        .map(|_| log.compact_at("c", 10_000).unwrap().removed_records)
        .collect();
    let runs_with_removals = removed_per_run.iter().filter(|&&n| n > 0).count();
    if dedupe_bytes < 100 * 32 {
        assert!(
            runs_with_removals > 3,
            "one run did everything ({removed_per_run:?}): the map bound was not exercised"
        );
    } else {
        assert_eq!(runs_with_removals, 1, "{removed_per_run:?}");
    }
    assert_eq!(removed_per_run.last(), Some(&0));
    assert!(dir
        .path()
        .join("topics/c/0/cleaner-offset-checkpoint")
        .exists());
    // The closed segments end where the active one starts.
    let desc = log.describe("c").unwrap();
    let after = read_all(&log, "c", 0);
    assert_eq!(desc.partitions[0].log_end_offset, all.len() as u64);
    let active_base = {
        let mut bases: Vec<u64> = std::fs::read_dir(dir.path().join("topics/c/0"))
            .unwrap()
            .filter_map(|e| {
                let n = e.unwrap().file_name().to_string_lossy().to_string();
                n.strip_suffix(".log").and_then(|b| b.parse().ok())
            })
            .collect();
        bases.sort();
        *bases.last().unwrap()
    };
    // Expected: per key the newest record below the active segment, plus everything in it.
    let mut newest_closed = std::collections::HashMap::new();
    for (o, k, _) in &all {
        if *o < active_base {
            newest_closed.insert(k.clone(), *o);
        }
    }
    let expected: Vec<&(u64, String, String)> = all
        .iter()
        .filter(|(o, k, _)| *o >= active_base || newest_closed[k] == *o)
        .collect();
    assert_eq!(after.len(), expected.len(), "runs: {removed_per_run:?}");
    for (r, (o, k, v)) in after.iter().zip(&expected) {
        assert_eq!(r.offset, *o);
        assert_eq!(r.key.as_deref(), Some(k.as_bytes()));
        assert_eq!(r.value.as_deref(), Some(v.as_bytes()));
    }
    // Nothing dirty, no tombstone: nothing read or rewritten.
    let m0 = log.metrics().compaction_removed_records;
    assert_eq!(log.compact_at("c", 10_000).unwrap().removed_records, 0);
    assert_eq!(log.metrics().compaction_removed_records, m0);
    // The files reopen as they are.
    drop(t);
    drop(log);
    let log = open(dir.path());
    assert_eq!(read_all(&log, "c", 0), after);
}

#[test]
fn disk_budget_blocks_until_group_reads() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogOptions {
            disk_budget_bytes: Some(8 * 1024),
            ..LogOptions::default()
        },
    )
    .unwrap();
    let t = log.create_topic("t", small_topic(1)).unwrap();
    // Register a group at the start.
    let mut c = log.consumer("g", "t", 0, ResetPolicy::Earliest).unwrap();
    let mut err = None;
    for i in 0..200u32 {
        match t.append(0, &[rec(&i.to_be_bytes(), &[1u8; 200], 0)]) {
            Ok(_) => log.flush(None).map(|_| ()).unwrap(),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let err = err.expect("budget must block");
    assert!(matches!(err, LogError::BudgetExhausted { .. }));
    assert!(err.is_transient());
    assert!(log.budget_exhausted());
    assert!(log.metrics().budget_exhausted_total >= 1);
    // Nothing was deleted that the group had not read.
    assert_eq!(log.describe("t").unwrap().partitions[0].log_start_offset, 0);
    // The group reads and commits: space can be freed, appends resume.
    while !c.poll(1 << 20).unwrap().is_empty() {}
    c.commit().unwrap();
    assert!(log.wait_for_budget(Duration::from_secs(1)));
    t.append(0, &[rec(b"x", b"y", 0)]).unwrap();
    assert!(log.describe("t").unwrap().partitions[0].log_start_offset > 0);
}

/// Bytes another writer holds on the same budget (the source's spill files) count as
/// used: appends are refused while they fill it and admitted once their owner frees them.
#[test]
fn disk_budget_counts_shared_bytes() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let shared = std::sync::Arc::new(AtomicU64::new(0));
    let log = Log::open(
        dir.path(),
        LogOptions {
            disk_budget_bytes: Some(64 * 1024),
            budget_shared_bytes: Some(shared.clone()),
            ..LogOptions::default()
        },
    )
    .unwrap();
    let t = log.create_topic("t", small_topic(1)).unwrap();
    t.append(0, &[rec(b"k", &[1u8; 100], 0)]).unwrap();
    let own = log.budget_used_bytes();
    assert!(own > 0);
    shared.store(64 * 1024, Ordering::Relaxed);
    assert_eq!(log.budget_used_bytes(), own + 64 * 1024);
    let e = t.append(0, &[rec(b"k", &[1u8; 100], 0)]).unwrap_err();
    assert!(matches!(e, LogError::BudgetExhausted { .. }), "{e}");
    assert!(!log.wait_for_budget(Duration::from_millis(10)));
    shared.store(0, Ordering::Relaxed);
    assert!(log.wait_for_budget(Duration::from_millis(10)));
    t.append(0, &[rec(b"k", &[1u8; 100], 0)]).unwrap();
    assert!(!log.budget_exhausted());
}

#[test]
fn flush_policies_and_partitioner() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogOptions {
            flush_policy: FlushPolicy::EveryAppend,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let t = log.create_topic("t", small_topic(4)).unwrap();
    let placed = t
        .append_keyed(&[
            rec(b"foobar", b"1", 0),
            NewRecord::new(None, Some(b"2"), 0),
            rec(b"foobar", b"3", 0),
        ])
        .unwrap();
    let p = cdc_log::partition_for_key(b"foobar", 4);
    assert_eq!(placed[0], (p, 0));
    assert_eq!(placed[2], (p, 1));
    assert_eq!(read_all(&log, "t", p).len(), 2);
    assert!(log.topic("nope").is_err());
    assert!(log.create_topic("t", small_topic(1)).is_err());
    assert!(log.create_topic("bad/name", small_topic(1)).is_err());
    assert_eq!(log.topics(), vec!["t".to_string()]);
}

#[test]
fn second_open_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let _log = open(dir.path());
    assert!(matches!(
        Log::open(dir.path(), LogOptions::default()),
        Err(LogError::Locked { .. })
    ));
}
