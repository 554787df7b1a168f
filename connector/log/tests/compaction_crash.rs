//! A crash at every step of the cleaner's swap (`compaction.rs`): a child process (this
//! test binary re-executed, see `swap_child`) compacts a copy of a closed log with
//! `CDC_LOG_FAILPOINT=<step>[:<n>]`, which aborts it the n-th time it reaches that step,
//! leaving the files exactly as the steps before left them (as a SIGKILL there would).
//! The parent then reopens the copy and checks:
//! - nothing durable is lost: the high watermark, the checkpoint and every record the
//!   full compaction keeps are there, each equal to what was written, in offset order,
//!   with no duplicate, and no `.cleaned` file is left;
//! - each segment holds either its original records or exactly the compaction's result
//!   for it, never a mix;
//! - compacting again gives exactly what one uninterrupted compaction gives.

mod common;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use cdc_log::{CleanupPolicy, Log, LogOptions, NewRecord, TopicConfig};
use common::{copy_dir, read_all};

const CHILD_ENV: &str = "CDC_LOG_SWAP_CHILD_DIR";
const PARTITIONS: u32 = 2;
const KEYS: u64 = 30;
const RECORDS: u64 = 2_000;

/// Record `i` (global): partition `i % 2`, key `i % KEYS`; every 17th is a tombstone.
fn record(i: u64) -> (Vec<u8>, Option<Vec<u8>>) {
    let key = format!("key-{}", i % KEYS).into_bytes();
    let value = (i % 17 != 0).then(|| {
        let mut v = i.to_be_bytes().to_vec();
        v.extend(std::iter::repeat_n((i % 241) as u8, (i % 70) as usize));
        v
    });
    (key, value)
}

/// Per partition, the global record number at each offset.
fn layout() -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new(); PARTITIONS as usize];
    for i in 0..RECORDS {
        out[(i % PARTITIONS as u64) as usize].push(i);
    }
    out
}

fn build(dir: &Path) {
    let log = Log::open(dir, LogOptions::default()).unwrap();
    let t = log
        .create_topic(
            "t",
            TopicConfig {
                partitions: PARTITIONS,
                segment_bytes: 4096,
                retention_ms: None,
                segment_ms: None,
                cleanup_policy: CleanupPolicy::COMPACT,
                compression: cdc_log::Compression::None,
                ..TopicConfig::default()
            },
        )
        .unwrap();
    for i in 0..RECORDS {
        let (k, v) = record(i);
        t.append(
            (i % PARTITIONS as u64) as u32,
            &[NewRecord::new(Some(&k), v.as_deref(), i as i64)],
        )
        .unwrap();
        if i % 300 == 299 {
            log.flush(None).unwrap();
        }
    }
    log.flush(Some(b"written")).unwrap();
    log.close().unwrap();
}

/// The compacting child. A no-op unless the parent set `CDC_LOG_SWAP_CHILD_DIR`.
#[test]
fn swap_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let log = Log::open(&dir, LogOptions::default()).expect("child open");
    log.compact("t").expect("child compaction");
    println!("compaction completed");
}

/// Per partition, the offsets that survive.
fn offsets(log: &Log) -> Vec<BTreeSet<u64>> {
    (0..PARTITIONS)
        .map(|p| read_all(log, "t", p).iter().map(|r| r.offset).collect())
        .collect()
}

/// Per partition, the base offsets of the segments (`.log` file names).
fn bases(dir: &Path) -> Vec<Vec<u64>> {
    (0..PARTITIONS)
        .map(|p| {
            let mut b: Vec<u64> = std::fs::read_dir(dir.join("topics/t").join(p.to_string()))
                .unwrap()
                .filter_map(|e| {
                    let name = e.ok()?.file_name().to_string_lossy().to_string();
                    name.strip_suffix(".log")?.parse().ok()
                })
                .collect();
            b.sort_unstable();
            b
        })
        .collect()
}

fn verify(dir: &Path, point: &str, full: &[BTreeSet<u64>], seg_bases: &[Vec<u64>]) {
    let layout = layout();
    let log = Log::open(dir, LogOptions::default())
        .unwrap_or_else(|e| panic!("{point}: reopen after the crash: {e}"));
    assert_eq!(
        log.checkpoint().as_deref(),
        Some(&b"written"[..]),
        "{point}"
    );
    for p in 0..PARTITIONS as usize {
        let pdir = dir.join("topics/t").join(p.to_string());
        for e in std::fs::read_dir(&pdir).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            assert!(!name.ends_with(".cleaned"), "{point}: {name} left behind");
        }
        let d = log.describe("t").unwrap();
        assert_eq!(
            d.partitions[p].high_watermark,
            layout[p].len() as u64,
            "{point}: partition {p} lost its end"
        );
        let recs = read_all(&log, "t", p as u32);
        let mut last = None;
        for r in &recs {
            assert!(
                last.is_none_or(|l| r.offset > l),
                "{point}: partition {p}: offset {} out of order or duplicated",
                r.offset
            );
            last = Some(r.offset);
            let (k, v) = record(layout[p][r.offset as usize]);
            assert_eq!(r.key.as_deref(), Some(&k[..]), "{point}: {p}/{}", r.offset);
            assert_eq!(
                r.value.as_deref(),
                v.as_deref(),
                "{point}: {p}/{}",
                r.offset
            );
        }
        let got: BTreeSet<u64> = recs.iter().map(|r| r.offset).collect();
        assert!(
            full[p].is_subset(&got),
            "{point}: partition {p}: records the compaction keeps are missing"
        );
        // Segment by segment: the original, or exactly the compacted result.
        let b = &seg_bases[p];
        for (i, &start) in b.iter().enumerate() {
            let end = b.get(i + 1).copied().unwrap_or(layout[p].len() as u64);
            let here: BTreeSet<u64> = got.range(start..end).copied().collect();
            let original: BTreeSet<u64> = (start..end).collect();
            let compacted: BTreeSet<u64> = full[p].range(start..end).copied().collect();
            assert!(
                here == original || here == compacted,
                "{point}: partition {p} segment {start}..{end} is a mix: {} records, original {}, compacted {}",
                here.len(),
                original.len(),
                compacted.len()
            );
        }
    }
    log.verify("t").unwrap();
    log.compact("t").unwrap();
    assert_eq!(
        offsets(&log),
        full,
        "{point}: finishing the compaction differs from one full run"
    );
}

#[test]
fn crash_at_each_step_of_the_compaction_swap() {
    let base = tempfile::tempdir().unwrap();
    build(base.path());
    let seg_bases = bases(base.path());
    assert!(seg_bases.iter().all(|b| b.len() > 20), "{seg_bases:?}");
    let full = {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(base.path(), copy.path());
        let log = Log::open(copy.path(), LogOptions::default()).unwrap();
        let r = log.compact("t").unwrap();
        assert!(r.removed_records > 0);
        offsets(&log)
    };
    let exe = std::env::current_exe().unwrap();
    // Each step of the swap (compaction.rs), at the first segment rewritten, deeper in
    // the first partition, and in the second one (about 27 segments are rewritten per
    // partition); the checkpoint write of the first and of the second partition.
    let steps = [
        "compact.cleaned_partial",
        "compact.cleaned_written",
        "compact.index_removed",
        "compact.renamed",
        "compact.index_written",
        "compact.swapped",
    ];
    let mut points: Vec<String> = Vec::new();
    for s in steps {
        for n in [1, 7, 40] {
            points.push(format!("{s}:{n}"));
        }
    }
    points.push("compact.checkpoint_tmp:1".into());
    points.push("compact.checkpoint_tmp:2".into());
    for point in &points {
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        let out = Command::new(&exe)
            .args(["--exact", "swap_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, work.path())
            .env("CDC_LOG_FAILPOINT", point)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "{point}: the child did not crash there (status {:?}): {stderr}",
            out.status
        );
        assert!(stderr.contains("failpoint"), "{point}: {stderr}");
        verify(work.path(), point, &full, &seg_bases);
    }
    eprintln!(
        "compaction swap crash: {} crash points, each reopened consistent",
        points.len()
    );
}
