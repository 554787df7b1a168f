//! Segment file recycling (`recycle.rs`), on real files: retention moves dropped segment
//! files into a per-partition pool, a roll reuses one (same inode, stale bytes past what
//! is written), and nothing stale ever becomes visible — not to readers, not after a
//! reopen, not after a crash (drop without flush) or damage at random positions of a
//! recycled active segment.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use cdc_log::{Log, LogError, LogOptions, StartAt, TopicConfig};
use common::{copy_dir, Rng};

fn topic_cfg() -> TopicConfig {
    TopicConfig {
        partitions: 1,
        segment_bytes: 4096,
        retention_ms: None,
        retention_bytes: Some(8192),
        // Record timestamps are small numbers: `segment.ms` would roll at every append.
        segment_ms: None,
        ..TopicConfig::default()
    }
}

fn pdir(dir: &Path) -> PathBuf {
    dir.join("topics").join("t").join("0")
}

fn with_ext(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(pdir(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

fn pool_files(dir: &Path) -> Vec<PathBuf> {
    with_ext(dir, ".log.recycle")
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    with_ext(dir, ".log")
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "v".repeat((i * 37 % 200) as usize)).into_bytes()
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// Appends records `from..to`, one per batch, flushing every `flush_every` and at the
/// end (`flush_every` 0: never).
fn append(log: &Log, from: u64, to: u64, flush_every: u64) {
    let t = log.topic("t").unwrap();
    for i in from..to {
        let (k, v) = (key(i), value(i));
        let info = t.append(0, &[common::rec(&k, &v, i as i64)]).unwrap();
        assert_eq!(info.base_offset, i);
        if flush_every > 0 && ((i + 1 - from) % flush_every == 0 || i + 1 == to) {
            log.flush(Some(&(i + 1).to_be_bytes())).unwrap();
        }
    }
}

/// Every durable record is the one written at its offset, offsets are gapless from the
/// log start up to the high watermark, and the high watermark is `hw`.
fn check_exact(log: &Log, hw: u64) {
    let d = log.describe("t").unwrap();
    let p = &d.partitions[0];
    assert_eq!(p.high_watermark, hw, "high watermark");
    let recs = common::read_all(log, "t", 0);
    assert_eq!(recs.len() as u64, hw - p.log_start_offset, "record count");
    for (j, r) in recs.iter().enumerate() {
        let i = p.log_start_offset + j as u64;
        assert_eq!(r.offset, i, "gapless offsets");
        assert_eq!(r.key.as_deref(), Some(&key(i)[..]));
        assert_eq!(r.value.as_deref(), Some(&value(i)[..]), "value at {i}");
    }
    log.verify("t").unwrap();
}

/// Writes until retention pooled a file, then until a roll reused it. Returns the offset
/// after the last durable record and the recycled segment's path; the log is dropped
/// without [`Log::close`] (as a crash leaves it).
fn build_recycled(dir: &Path) -> (u64, PathBuf) {
    let (_, durable, path) = build_recycled_open(dir);
    (durable, path)
}

/// [`build_recycled`], returning the log still open.
fn build_recycled_open(dir: &Path) -> (Log, u64, PathBuf) {
    let log = common::open(dir);
    log.create_topic("t", topic_cfg()).unwrap();
    let mut next = 0;
    while pool_files(dir).is_empty() {
        append(&log, next, next + 20, 5);
        next += 20;
        log.enforce_retention().unwrap();
        assert!(next < 10_000, "retention never pooled a segment file");
    }
    let pooled: Vec<(u64, u64)> = pool_files(dir)
        .iter()
        .map(|p| {
            let m = fs::metadata(p).unwrap();
            (m.ino(), m.len())
        })
        .collect();
    let before: Vec<PathBuf> = segment_files(dir);
    // Append until the active segment rolls into a pooled file.
    let recycled = loop {
        append(&log, next, next + 1, 1);
        next += 1;
        let now = segment_files(dir);
        if let Some(new) = now.iter().find(|p| !before.contains(p)) {
            break new.clone();
        }
    };
    assert_eq!(
        pool_files(dir).len(),
        pooled.len() - 1,
        "the roll took a pool file"
    );
    let m = fs::metadata(&recycled).unwrap();
    // The new segment is a pooled inode, with stale bytes past the data: the file is
    // still as long as the old segment was.
    assert!(
        pooled.contains(&(m.ino(), m.len())),
        "the new segment is a recycled file of the same length: {:?} not in {pooled:?}",
        (m.ino(), m.len())
    );
    assert_eq!(log.metrics().recycled_segments, 1);
    append(&log, next, next + 3, 3);
    next += 3;
    check_exact(&log, next);
    (log, next, recycled)
}

/// A clean stop (`Log::close`) cuts the recycled active segment to its flushed bytes: the
/// next open has nothing to cut or report, unflushed appends are gone (as after a crash),
/// and writes after `close` fail with `Closed`.
#[test]
fn close_cuts_the_stale_tail_so_a_clean_restart_reports_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (log, durable, recycled) = build_recycled_open(dir.path());
    append(&log, durable, durable + 5, 0);
    log.close().unwrap();
    let t = log.topic("t").unwrap();
    assert!(matches!(
        t.append(0, &[common::rec(b"k", b"v", 0)]),
        Err(LogError::Closed(_))
    ));
    assert!(matches!(log.flush(None), Err(LogError::Closed(_))));
    log.close().unwrap();
    drop((t, log));
    let len = fs::metadata(&recycled).unwrap().len();
    let log = common::open(dir.path());
    assert_eq!(log.metrics().recovery_truncated_bytes, 0, "nothing to cut");
    assert_eq!(fs::metadata(&recycled).unwrap().len(), len);
    check_exact(&log, durable);
    append(&log, durable, durable + 50, 10);
    check_exact(&log, durable + 50);
}

#[test]
fn recycled_segment_reopens_to_exactly_the_durable_records() {
    let dir = tempfile::tempdir().unwrap();
    let (durable, recycled) = build_recycled(dir.path());
    let stale_len = fs::metadata(&recycled).unwrap().len();
    // Unflushed appends past the durable end, then a "crash" (drop without flush).
    {
        let log = common::open(dir.path());
        check_exact(&log, durable);
        // The stale tail was cut like a torn tail, and reported.
        assert!(fs::metadata(&recycled).unwrap().len() < stale_len);
        assert!(log.metrics().recovery_truncated_bytes > 0);
        append(&log, durable, durable + 4, 0);
    }
    let log = common::open(dir.path());
    check_exact(&log, durable);
    // Appending continues at the durable end; a roll cuts the segment to its size.
    append(&log, durable, durable + 200, 7);
    log.flush(None).unwrap();
    let end = durable + 200;
    check_exact(&log, end);
    drop(log);
    let log = common::open(dir.path());
    check_exact(&log, end);
}

/// Copies a valid batch with base offset = the expected next offset behind the durable
/// end of the active segment: it is valid, continues the offsets, and is still cut,
/// because the ledger says it is not durable.
#[test]
fn valid_batch_continuing_the_offsets_past_the_durable_end_is_cut() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cfg = TopicConfig {
        retention_bytes: None,
        segment_bytes: 1 << 20,
        ..topic_cfg()
    };
    for d in [a.path(), b.path()] {
        let log = common::open(d);
        log.create_topic("t", cfg.clone()).unwrap();
        append(&log, 0, 10, 10);
    }
    {
        let log = common::open(b.path());
        append(&log, 10, 13, 13);
    }
    let seg_a = segment_files(a.path())[0].clone();
    let seg_b = segment_files(b.path())[0].clone();
    let (da, db) = (fs::read(&seg_a).unwrap(), fs::read(&seg_b).unwrap());
    assert_eq!(
        &db[..da.len()],
        &da[..],
        "both logs wrote the same first batches"
    );
    fs::write(&seg_a, &db).unwrap();
    let log = common::open(a.path());
    check_exact(&log, 10);
    assert_eq!(fs::metadata(&seg_a).unwrap().len(), da.len() as u64);
    assert_eq!(
        log.metrics().recovery_truncated_bytes,
        (db.len() - da.len()) as u64
    );
}

/// Crash after the rename into place, before anything was written to the new segment
/// (or only unflushed data): the whole stale file is cut, the durable end stays.
#[test]
fn crash_right_after_the_rename_into_place() {
    let dir = tempfile::tempdir().unwrap();
    let log = common::open(dir.path());
    log.create_topic("t", topic_cfg()).unwrap();
    let mut next = 0;
    while pool_files(dir.path()).is_empty() {
        append(&log, next, next + 20, 20);
        next += 20;
        log.enforce_retention().unwrap();
    }
    // Fill the active segment to just below a roll, flushed; the next append rolls into
    // the pool file and is lost (no flush).
    let before = segment_files(dir.path());
    let mut rolled = None;
    for i in next..next + 1000 {
        append(&log, i, i + 1, 0);
        let now = segment_files(dir.path());
        if let Some(new) = now.iter().find(|p| !before.contains(p)) {
            rolled = Some((i, new.clone()));
            break;
        }
        log.flush(None).unwrap();
    }
    let (durable, new_seg) = rolled.expect("rolled");
    drop(log);
    assert!(
        fs::metadata(&new_seg).unwrap().len() > 0,
        "stale file in place"
    );
    let log = common::open(dir.path());
    check_exact(&log, durable);
    append(&log, durable, durable + 50, 10);
    check_exact(&log, durable + 50);
}

/// The recycled active segment (stale bytes after the data) truncated or overwritten at
/// random positions: open gives exactly the durable records (damage past the durable
/// end), or a precise `DurableDataLost` (damage inside it) — never a panic, never stale
/// or wrong records.
#[test]
fn damage_at_random_positions_of_a_recycled_active_segment() {
    let base = tempfile::tempdir().unwrap();
    let (durable, recycled) = build_recycled(base.path());
    let rel = recycled.strip_prefix(base.path()).unwrap().to_path_buf();
    let data_len = {
        // The durable data's length: what a clean reopen leaves (on a copy).
        let w = tempfile::tempdir().unwrap();
        copy_dir(base.path(), w.path());
        drop(common::open(w.path()));
        fs::metadata(w.path().join(&rel)).unwrap().len()
    };
    let len = fs::metadata(&recycled).unwrap().len();
    assert!(len > data_len, "stale bytes after the data");
    let iterations: u64 = std::env::var("CDC_LOG_CORRUPTION_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut rng = Rng(0x005e_ed0f_2ec7_c1ed);
    let (mut exact, mut lost) = (0, 0);
    for _ in 0..iterations {
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        let target = work.path().join(&rel);
        let mut bytes = fs::read(&target).unwrap();
        // Half the time aim past the data (the stale part), where nothing may be lost.
        let at = if rng.below(2) == 0 {
            data_len + rng.below(len - data_len)
        } else {
            rng.below(len)
        } as usize;
        let past_data = at as u64 >= data_len;
        if rng.below(2) == 0 {
            bytes.truncate(at);
        } else {
            let n = 1 + rng.below(16) as usize;
            for b in bytes.iter_mut().skip(at).take(n) {
                *b ^= 1 + (rng.next() % 255) as u8;
            }
        }
        fs::write(&target, &bytes).unwrap();
        match Log::open(work.path(), LogOptions::default()) {
            Ok(log) => {
                check_exact(&log, durable);
                exact += 1;
            }
            Err(e) => {
                assert!(
                    !past_data,
                    "damage past the durable data at byte {at} must not fail open: {e}"
                );
                assert!(
                    matches!(e, LogError::DurableDataLost { .. }),
                    "imprecise error for damage at byte {at}: {e}"
                );
                lost += 1;
            }
        }
    }
    eprintln!("recycled active segment damage: {exact} exact, {lost} durable data lost");
    assert!(exact > 0);
}

#[test]
fn recycling_disabled_deletes_dropped_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogOptions {
            recycle_segments: 0,
            ..LogOptions::default()
        },
    )
    .unwrap();
    log.create_topic("t", topic_cfg()).unwrap();
    append(&log, 0, 300, 5);
    let r = log.enforce_retention().unwrap();
    assert!(r.deleted_segments > 0);
    assert!(pool_files(dir.path()).is_empty());
    check_exact(&log, 300);
}

/// An in-process reader holding a segment keeps it from the pool: the file is deleted,
/// never overwritten under the reader, which then finds its offset out of range.
#[test]
fn a_segment_held_by_a_reader_is_not_recycled() {
    let dir = tempfile::tempdir().unwrap();
    let log = common::open(dir.path());
    log.create_topic("t", topic_cfg()).unwrap();
    append(&log, 0, 60, 5);
    let mut r = log.reader("t", 0, StartAt::Earliest).unwrap();
    assert_eq!(r.poll(1).unwrap()[0].offset, 0);
    let first = segment_files(dir.path())[0].clone();
    let first_name = first.file_name().unwrap().to_string_lossy().to_string();
    append(&log, 60, 300, 5);
    log.enforce_retention().unwrap();
    assert!(!first.exists(), "the first segment was dropped");
    assert!(
        !pool_files(dir.path())
            .iter()
            .any(|p| p.to_string_lossy().contains(&first_name)),
        "a file a reader holds went into the pool"
    );
    let err = r.poll(1 << 20).unwrap_err();
    assert!(
        matches!(err, LogError::OffsetOutOfRange { .. }),
        "unexpected {err}"
    );
}

/// A read-only process reading a segment the writer then drops and recycles: it reports
/// an out-of-range offset (or resets), never the new segment's records as the old ones.
#[test]
fn read_only_reader_of_a_recycled_segment_reports_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let log = common::open(dir.path());
    log.create_topic("t", topic_cfg()).unwrap();
    append(&log, 0, 30, 5);
    let ro = Log::open_read_only(dir.path()).unwrap();
    let mut r = ro.reader("t", 0, StartAt::Earliest).unwrap();
    let first = r.poll(1).unwrap();
    assert_eq!(first[0].offset, 0);
    let mut next = 30;
    let first_seg = segment_files(dir.path())[0].clone();
    let ino = fs::metadata(&first_seg).unwrap().ino();
    // Retention after every few records: the first segment is the first one dropped (and
    // pooled); write until a roll reuses its file.
    let reused = |d: &Path| {
        segment_files(d)
            .iter()
            .any(|p| *p != first_seg && fs::metadata(p).unwrap().ino() == ino)
    };
    while !reused(dir.path()) {
        append(&log, next, next + 5, 5);
        next += 5;
        log.enforce_retention().unwrap();
        assert!(next < 2_000, "the first file was never reused");
    }
    append(&log, next, next + 40, 5);
    next += 40;
    // The reader still holds the first file's descriptor and its old view of the log.
    match r.poll(1 << 20) {
        Err(LogError::OffsetOutOfRange { offset, .. }) => {
            assert_eq!(offset, 1);
            eprintln!("read-only reader: offset out of range, as expected");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(recs) => {
            // Only the old segment's own records, if its bytes were not overwritten yet
            // where the reader read.
            eprintln!(
                "read-only reader read {:?}",
                recs.iter().map(|r| r.offset).collect::<Vec<_>>()
            );
            for rec in recs {
                assert_eq!(rec.key.as_deref(), Some(&key(rec.offset)[..]));
                assert_eq!(rec.value.as_deref(), Some(&value(rec.offset)[..]));
            }
        }
    }
    check_exact(&log, next);
}

/// Pool files count in the disk usage, and budget relief deletes them before anything.
#[test]
fn pool_files_count_toward_the_budget_and_go_first() {
    let dir = tempfile::tempdir().unwrap();
    let (durable, _) = build_recycled(dir.path());
    let total = {
        let log = common::open(dir.path());
        log.enforce_retention().unwrap();
        // Make sure there is a pool file to count.
        let mut next = durable;
        while pool_files(dir.path()).is_empty() {
            append(&log, next, next + 10, 5);
            next += 10;
            log.enforce_retention().unwrap();
        }
        log.flush(None).unwrap();
        drop(log);
        let log = common::open(dir.path());
        let pool: u64 = pool_files(dir.path())
            .iter()
            .map(|p| fs::metadata(p).unwrap().len())
            .sum();
        let segs: u64 = segment_files(dir.path())
            .iter()
            .map(|p| fs::metadata(p).unwrap().len())
            .sum();
        let total = log.metrics().total_bytes;
        assert_eq!(total, segs + pool, "disk usage counts the pool files");
        (total, pool, next)
    };
    let (total, pool, next) = total;
    let log = Log::open(
        dir.path(),
        LogOptions {
            disk_budget_bytes: Some(total - pool / 2),
            ..LogOptions::default()
        },
    )
    .unwrap();
    // Over budget: the append frees the pool (no group is registered, so no segment may
    // be deleted for the budget) and goes through.
    append(&log, next, next + 1, 1);
    assert!(
        pool_files(dir.path()).is_empty(),
        "pool files deleted first"
    );
    check_exact(&log, next + 1);
}
