//! Files of a closed log truncated or overwritten at random byte positions: open (and a
//! full read) must either succeed with a gapless prefix of what was written (offsets
//! contiguous from the log start, the records equal to the first N written, N the high
//! watermark), or fail with a precise error naming the damaged file — never panic, never
//! return wrong data, never skip a batch.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use cdc_log::{Log, LogError, LogOptions, StartAt, TopicConfig};
use common::{copy_dir, Rng};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            files(&e.path(), out);
        } else if e.file_name() != ".lock" {
            out.push(e.path());
        }
    }
}

/// (key, value) per offset, per partition, as written.
type Truth = Vec<Vec<(Vec<u8>, Vec<u8>)>>;

fn build(dir: &Path) -> Truth {
    let log = Log::open(dir, LogOptions::default()).unwrap();
    let t = log
        .create_topic(
            "t",
            TopicConfig {
                partitions: 2,
                segment_bytes: 2048,
                retention_ms: None,
                compression: cdc_log::Compression::None,
                ..TopicConfig::default()
            },
        )
        .unwrap();
    let mut truth: Truth = vec![Vec::new(), Vec::new()];
    for i in 0..120u32 {
        let p = i % 2;
        let k = format!("key-{i}").into_bytes();
        let v = format!("value-{i}-{}", "z".repeat((i % 97) as usize)).into_bytes();
        t.append(p, &[common::rec(&k, &v, i as i64)]).unwrap();
        truth[p as usize].push((k, v));
        if i % 7 == 0 {
            log.flush(Some(&i.to_be_bytes())).unwrap();
        }
    }
    // A flush large enough for the write stage's O_DIRECT path: the active segment of
    // partition 0 then ends with zero padding up to a block boundary.
    let k = b"key-big".to_vec();
    let v: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    t.append(0, &[common::rec(&k, &v, 120)]).unwrap();
    truth[0].push((k, v));
    log.flush(Some(b"end")).unwrap();
    log.commit("g", "t", 0, 5).unwrap();
    truth
}

/// Opens and reads everything; Ok(()) if what is read is exactly a gapless prefix of what
/// was written: offsets contiguous from the log start (0: no retention here), each record
/// equal to the one written at that offset, and the read ending at the high watermark
/// (a skipped batch or a reader that stops early is wrong data, not a valid prefix).
/// Err(error) for a precise rejection.
fn check(dir: &Path, truth: &Truth) -> Result<(), LogError> {
    let log = Log::open(dir, LogOptions::default())?;
    let d = log.describe("t")?;
    for p in 0..2u32 {
        let part = &d.partitions[p as usize];
        assert_eq!(part.log_start_offset, 0, "log start moved at {p}");
        let mut r = log.reader("t", p, StartAt::Earliest)?;
        let mut next = 0u64;
        loop {
            let recs = r.poll(4096)?;
            if recs.is_empty() {
                break;
            }
            for rec in recs {
                assert_eq!(rec.offset, next, "gap or reordering at {p}/{next}");
                let (k, v) = truth[p as usize]
                    .get(rec.offset as usize)
                    .unwrap_or_else(|| panic!("record {p}/{} was never written", rec.offset));
                assert_eq!(
                    rec.key.as_deref(),
                    Some(&k[..]),
                    "wrong data at {p}/{}",
                    rec.offset
                );
                assert_eq!(
                    rec.value.as_deref(),
                    Some(&v[..]),
                    "wrong data at {p}/{}",
                    rec.offset
                );
                next += 1;
            }
        }
        // The first `next` records written, and all the log says it holds.
        assert_eq!(
            next, part.high_watermark,
            "partition {p}: read {next} records, the log holds {}",
            part.high_watermark
        );
    }
    log.verify("t")?;
    Ok(())
}

#[test]
fn random_truncation_and_overwrite() {
    let base = tempfile::tempdir().unwrap();
    let truth = build(base.path());
    let mut all = Vec::new();
    files(base.path(), &mut all);
    all.sort();
    let iterations: u64 = std::env::var("CDC_LOG_CORRUPTION_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let (mut ok, mut rejected) = (0, 0);
    for _ in 0..iterations {
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        let rel = all[rng.below(all.len() as u64) as usize]
            .strip_prefix(base.path())
            .unwrap()
            .to_path_buf();
        let target = work.path().join(&rel);
        let len = fs::metadata(&target).unwrap().len();
        let mut bytes = fs::read(&target).unwrap();
        if rng.below(2) == 0 {
            bytes.truncate(rng.below(len + 1) as usize);
        } else if len > 0 {
            let at = rng.below(len) as usize;
            let n = 1 + rng.below(8) as usize;
            for b in bytes.iter_mut().skip(at).take(n) {
                *b ^= 1 + (rng.next() % 255) as u8;
            }
        }
        fs::write(&target, &bytes).unwrap();
        match check(work.path(), &truth) {
            Ok(()) => ok += 1,
            Err(e) => {
                rejected += 1;
                let msg = e.to_string();
                assert!(
                    matches!(
                        e,
                        LogError::CorruptSegment { .. }
                            | LogError::CorruptFile { .. }
                            | LogError::DurableDataLost { .. }
                    ),
                    "imprecise error for damaged {rel:?}: {msg}"
                );
                // The message names the damaged file (or the partition for lost data).
                let name = rel.file_name().unwrap().to_string_lossy().to_string();
                let stem = name.split('.').next().unwrap().to_string();
                assert!(
                    msg.contains(&stem)
                        || matches!(e, LogError::DurableDataLost { .. })
                        || msg.contains("index"),
                    "error for damaged {rel:?} does not name it: {msg}"
                );
            }
        }
    }
    eprintln!("corruption: {ok} recovered to a valid state, {rejected} rejected precisely");
}
