//! A read-only view (`Log::open_read_only` + `Log::refresh`, what `cdc sink` and
//! `cdc log tail` use) of a log that a writer in another thread rolls, recycles and
//! trims all the time: every refresh succeeds and every record read is the one written
//! at its offset. Tiny segments and variable batch sizes make the writer's rolls cut
//! recycled files' stale tails (and retention recycle segment files) while the view
//! lists, stats and scans them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_log::{Log, LogError, LogOptions, NewRecord, StartAt, TopicConfig};

mod common;
use common::Rng;

/// The value of the record at `offset`, `len` bytes long (checked by the reader).
fn value(offset: u64, len: usize) -> Vec<u8> {
    let mut v = offset.to_be_bytes().to_vec();
    v.resize(len.max(8), (offset % 251) as u8);
    v
}

#[test]
fn read_only_refresh_keeps_up_with_rolls_recycling_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let w = Log::open(dir.path(), LogOptions::default()).unwrap();
    let t = w
        .create_topic(
            "t",
            TopicConfig {
                partitions: 1,
                segment_bytes: 2048,
                retention_ms: None,
                retention_bytes: Some(24 << 10),
                segment_ms: None,
                ..TopicConfig::default()
            },
        )
        .unwrap();
    t.append(0, &[NewRecord::new(None, Some(&value(0, 8)), 0)])
        .unwrap();
    w.flush(None).unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(1));
    let reader = {
        let (dir, done, written) = (dir.path().to_path_buf(), done.clone(), written.clone());
        std::thread::spawn(move || {
            let ro = Log::open_read_only(&dir).unwrap();
            let mut r = ro.reader("t", 0, StartAt::Earliest).unwrap();
            let (mut refreshes, mut read, mut resets) = (0u64, 0u64, 0u64);
            loop {
                let finished = done.load(Ordering::Acquire);
                match r.poll(64 << 10) {
                    Ok(recs) => {
                        for rec in recs {
                            let v = rec.value.as_deref().unwrap();
                            assert_eq!(&v[..8], &rec.offset.to_be_bytes(), "wrong record");
                            assert_eq!(v, &value(rec.offset, v.len())[..], "wrong bytes");
                            read += 1;
                        }
                    }
                    // Retention outran this reader: start again at the log start.
                    Err(LogError::OffsetOutOfRange { .. }) => {
                        resets += 1;
                        r = ro.reader("t", 0, StartAt::Earliest).unwrap();
                    }
                    Err(e) => panic!("read-only reader: {e}"),
                }
                if let Err(e) = ro.refresh() {
                    panic!("read-only refresh {refreshes}: {e}");
                }
                refreshes += 1;
                if finished {
                    let end = ro.describe("t").unwrap().partitions[0].high_watermark;
                    assert_eq!(end, written.load(Ordering::Acquire), "the view caught up");
                    return (refreshes, read, resets);
                }
            }
        })
    };

    let mut rng = Rng(0x5eed_f00d);
    let mut next = 1u64;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rounds = 0u64;
    while Instant::now() < deadline && !reader.is_finished() {
        // Batches of 1..=6 records of 20..=700 bytes: segments close at very different
        // sizes, so a recycled file is often longer than the segment it then holds.
        let n = 1 + rng.below(6) as usize;
        let vals: Vec<Vec<u8>> = (0..n)
            .map(|i| value(next + i as u64, 20 + rng.below(680) as usize))
            .collect();
        let recs: Vec<NewRecord> = vals
            .iter()
            .map(|v| NewRecord::new(None, Some(&v[..]), 0))
            .collect();
        t.append(0, &recs).unwrap();
        next += n as u64;
        if rng.below(3) == 0 {
            w.flush(None).unwrap();
            written.store(next, Ordering::Release);
        }
        if rng.below(8) == 0 {
            w.enforce_retention().unwrap();
        }
        rounds += 1;
    }
    w.flush(None).unwrap();
    written.store(next, Ordering::Release);
    done.store(true, Ordering::Release);
    let (refreshes, read, resets) = reader.join().expect("the read-only reader failed");
    let m = w.metrics();
    eprintln!(
        "{rounds} writer rounds, {next} records, {} recycled rolls, {} segments dropped; \
         {refreshes} refreshes, {read} records read, {resets} resets",
        m.recycled_segments, m.retention_deleted_segments
    );
    assert!(
        m.recycled_segments > 10,
        "the writer recycled segment files"
    );
}
