//! Crash test: a child process (this test binary re-executed, see `crash_child`) appends
//! and flushes in a loop, printing each completed flush's checkpoint; the parent kills it
//! with SIGKILL at random moments, reopens the log and checks that
//! - the checkpoint is at least the last one the child printed (flushed = durable),
//! - every partition holds exactly the records the checkpoint covers, in order, at
//!   gapless offsets from its log start: nothing unflushed is reported durable, nothing
//!   flushed is missing (below the log start only what size retention dropped).
//!
//! The child also runs size retention now and then, so segments are dropped into the
//! recycle pool and rolls reuse them (`recycle.rs`): kills land in recycled active
//! segments with stale batches past the data.
//!
//! Now and then the child also appends a burst of 1.5-3 MiB to topic `w` (4 MiB segments)
//! before the flush, so full MiBs go to the background writer (`LogOptions::write_behind`)
//! and kills land while those writes are in flight. The checkpoint is 16 bytes: the
//! sequence end of `c`, then the number of `w` records.
//!
//! Default: 200 kills. Longer: `CDC_LOG_CRASH_KILLS=2000 cargo test -p cdc-log --test crash`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cdc_log::{Log, LogOptions, NewRecord, StartAt, TopicConfig};
use common::Rng;

const CHILD_ENV: &str = "CDC_LOG_CRASH_CHILD_DIR";
const SEED_ENV: &str = "CDC_LOG_CRASH_CHILD_SEED";
const PARTITIONS: u64 = 3;
/// Size of the records of the burst topic `w`.
const W_RECORD: usize = 48 * 1024;

fn burst_config() -> TopicConfig {
    TopicConfig {
        partitions: 1,
        segment_bytes: 4 << 20,
        retention_ms: None,
        retention_bytes: Some(8 << 20),
        segment_ms: None,
        ..TopicConfig::default()
    }
}

/// Record `j` of topic `w`.
fn burst_value(j: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&j.to_be_bytes());
    buf.extend(std::iter::repeat_n((j % 253) as u8 ^ 0x5a, W_RECORD - 8));
}

/// (sequence end of `c`, records of `w`) from a checkpoint.
fn parse_checkpoint(c: Option<Vec<u8>>) -> (u64, u64) {
    let Some(c) = c else { return (0, 0) };
    assert_eq!(c.len(), 16, "16-byte checkpoint");
    let n = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
    (n(&c[..8]), n(&c[8..]))
}

fn topic_config() -> TopicConfig {
    TopicConfig {
        partitions: PARTITIONS as u32,
        segment_bytes: 8 * 1024,
        retention_ms: None,
        // Small enough that retention drops (and recycles) segments during a run.
        retention_bytes: Some(24 * 1024),
        // Timestamps are the record numbers (1970): with the default `segment.ms` every
        // append would roll; size decides here, so segments fill, roll and get recycled.
        segment_ms: None,
        ..TopicConfig::default()
    }
}

/// Record `i` (global sequence) goes to partition `i % 3`, key = i, value = i + padding.
/// About one record in 200 is large (~70-80 KB), so its flush takes the write stage's
/// O_DIRECT path (the segment's last block padded with zeros) and the roll after it cuts
/// that padding off again.
fn value_for(i: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&i.to_be_bytes());
    let pad = if i % 199 == 0 {
        70_000 + (i % 10_007) as usize
    } else {
        (i.wrapping_mul(2654435761) % 300) as usize
    };
    buf.extend(std::iter::repeat_n((i % 251) as u8, pad));
}

/// The writer child. A no-op unless the parent set `CDC_LOG_CRASH_CHILD_DIR`.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = Rng(seed | 1);
    let log = Log::open(&dir, LogOptions::default()).expect("child open");
    let topic = log.topic_or_create("c", topic_config()).expect("topic");
    let burst = log.topic_or_create("w", burst_config()).expect("topic");
    let (mut next, mut w_next) = parse_checkpoint(log.checkpoint());
    let mut vals: Vec<Vec<u8>> = Vec::new();
    let mut wvals: Vec<Vec<u8>> = vec![Vec::new(); 4];
    loop {
        let n = 1 + rng.below(40);
        let end = next + n;
        // One batch per partition (sometimes split in two) covering [next, end).
        for p in 0..PARTITIONS {
            let ids: Vec<u64> = (next..end).filter(|i| i % PARTITIONS == p).collect();
            if ids.is_empty() {
                continue;
            }
            vals.resize(ids.len(), Vec::new());
            let keys: Vec<[u8; 8]> = ids.iter().map(|i| i.to_be_bytes()).collect();
            for (v, &i) in vals.iter_mut().zip(&ids) {
                value_for(i, v);
            }
            let recs: Vec<NewRecord<'_>> = ids
                .iter()
                .enumerate()
                .map(|(j, &i)| NewRecord::new(Some(&keys[j]), Some(&vals[j]), i as i64))
                .collect();
            let split = if recs.len() > 1 && rng.below(2) == 0 {
                recs.len() / 2
            } else {
                recs.len()
            };
            topic.append(p as u32, &recs[..split]).expect("append");
            if split < recs.len() {
                topic.append(p as u32, &recs[split..]).expect("append");
            }
        }
        if rng.below(6) == 0 {
            // 1.5-3 MiB in batches of 4 records (192 KiB): full MiBs go behind.
            let w_end = w_next + 32 + rng.below(32);
            while w_next < w_end {
                let n = (w_end - w_next).min(4);
                for (k, v) in wvals.iter_mut().take(n as usize).enumerate() {
                    burst_value(w_next + k as u64, v);
                }
                let keys: Vec<[u8; 8]> = (w_next..w_next + n).map(|j| j.to_be_bytes()).collect();
                let recs: Vec<NewRecord<'_>> = (0..n as usize)
                    .map(|k| NewRecord::new(Some(&keys[k]), Some(&wvals[k]), 0))
                    .collect();
                burst.append(0, &recs).expect("append");
                w_next += n;
            }
        }
        let mut cp = [0u8; 16];
        cp[..8].copy_from_slice(&end.to_be_bytes());
        cp[8..].copy_from_slice(&w_next.to_be_bytes());
        log.flush(Some(&cp)).expect("flush");
        next = end;
        println!(
            "flushed {end} recycled {} burst {w_next}",
            log.metrics().recycled_segments
        );
        if rng.below(8) == 0 {
            log.enforce_retention().expect("retention");
        }
    }
}

/// Recycle-pool files now in `dir` (all partitions).
fn pool_files(dir: &std::path::Path) -> usize {
    let mut n = 0;
    for p in 0..PARTITIONS {
        if let Ok(rd) = std::fs::read_dir(dir.join("topics/c").join(p.to_string())) {
            n += rd
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log.recycle"))
                })
                .count();
        }
    }
    n
}

/// Topic `w` holds exactly records `[log start, w_count)`, each intact.
fn verify_burst(log: &Log, w_count: u64) {
    let Ok(_) = log.topic("w") else {
        assert_eq!(w_count, 0);
        return;
    };
    let d = log.describe("w").unwrap();
    let part = &d.partitions[0];
    assert_eq!(part.log_end_offset, w_count, "w: log end vs checkpoint");
    assert_eq!(part.high_watermark, w_count);
    let mut r = log.reader("w", 0, StartAt::Earliest).unwrap();
    let mut want = part.log_start_offset;
    let mut buf = Vec::new();
    loop {
        let recs = r.poll(1 << 20).expect("read w after recovery");
        if recs.is_empty() {
            break;
        }
        for rec in recs {
            assert_eq!(rec.offset, want, "w: offsets not gapless");
            burst_value(want, &mut buf);
            assert!(
                rec.value.as_deref() == Some(&buf[..]),
                "w: record {want} damaged"
            );
            want += 1;
        }
    }
    assert_eq!(want, w_count, "w: flushed records missing");
}

fn verify(dir: &std::path::Path, min_checkpoint: u64) -> u64 {
    let log = Log::open(dir, LogOptions::default()).expect("reopen after kill");
    let (cp, w_count) = parse_checkpoint(log.checkpoint());
    verify_burst(&log, w_count);
    assert!(
        cp >= min_checkpoint,
        "checkpoint {cp} is behind the last completed flush {min_checkpoint}"
    );
    let Ok(_) = log.topic("c") else {
        assert_eq!(cp, 0);
        return cp;
    };
    let mut buf = Vec::new();
    for p in 0..PARTITIONS {
        let expected: Vec<u64> = (0..cp).filter(|i| i % PARTITIONS == p).collect();
        let mut r = log.reader("c", p as u32, StartAt::Earliest).unwrap();
        let log_start = log.describe("c").unwrap().partitions[p as usize].log_start_offset;
        let mut got = log_start as usize;
        loop {
            let recs = r.poll(1 << 20).expect("read after recovery");
            if recs.is_empty() {
                break;
            }
            for rec in recs {
                assert!(
                    got < expected.len(),
                    "partition {p}: record at offset {} beyond checkpoint {cp}",
                    rec.offset
                );
                let i = expected[got];
                assert_eq!(rec.offset, got as u64, "partition {p}: offsets not gapless");
                value_for(i, &mut buf);
                assert_eq!(rec.key.as_deref(), Some(&i.to_be_bytes()[..]));
                assert_eq!(
                    rec.value.as_deref(),
                    Some(&buf[..]),
                    "partition {p} offset {}",
                    rec.offset
                );
                got += 1;
            }
        }
        assert_eq!(
            got,
            expected.len(),
            "partition {p}: flushed records missing (checkpoint {cp})"
        );
        let d = log.describe("c").unwrap();
        assert_eq!(
            d.partitions[p as usize].high_watermark,
            expected.len() as u64
        );
        assert_eq!(
            d.partitions[p as usize].log_end_offset,
            expected.len() as u64
        );
    }
    cp
}

#[test]
fn sigkill_during_append_and_flush() {
    let kills: u64 = std::env::var("CDC_LOG_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ std::process::id() as u64);
    let started = Instant::now();
    let mut dir = tempfile::tempdir().unwrap();
    let mut last_printed = 0u64;
    let mut total_flushes = 0u64;
    let mut saw_pool = 0u64;
    let mut total_recycled = 0u64;
    let mut max_burst = 0u64;
    for k in 0..kills {
        // A fresh directory now and then keeps verification cheap.
        if k % 25 == 0 && k > 0 {
            dir = tempfile::tempdir().unwrap();
            last_printed = 0;
        }
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .env(SEED_ENV, rng.next().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut max = 0u64;
            let mut count = 0u64;
            let mut recycled = 0u64;
            let mut burst = 0u64;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // "flushed <checkpoint> recycled <rolls into pool files so far> burst <w>"
                let f: Vec<&str> = line.split_whitespace().collect();
                if let ["flushed", n, "recycled", r, "burst", w] = f[..] {
                    if let (Ok(n), Ok(r), Ok(w)) =
                        (n.parse::<u64>(), r.parse::<u64>(), w.parse::<u64>())
                    {
                        max = max.max(n);
                        recycled = recycled.max(r);
                        burst = burst.max(w);
                        count += 1;
                    }
                }
            }
            (max, count, recycled, burst)
        });
        // Kill at a random moment: sometimes during open/recovery, mostly mid-stream;
        // every tenth child lives longer, so that flushes complete even when a loaded
        // machine makes start-up take most of the short window.
        let window = if k % 10 == 9 { 400_000 } else { 60_000 };
        std::thread::sleep(Duration::from_micros(2_000 + rng.below(window)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (printed, count, recycled, burst) = reader.join().unwrap();
        max_burst = max_burst.max(burst);
        total_flushes += count;
        total_recycled += recycled;
        last_printed = last_printed.max(printed);
        saw_pool += (pool_files(dir.path()) > 0) as u64;
        let cp = verify(dir.path(), last_printed);
        last_printed = last_printed.max(cp);
    }
    eprintln!(
        "crash test: {kills} kills, {total_flushes} completed flushes observed, recycle-pool files present at {saw_pool} kills, {total_recycled} rolls into recycled files, up to {max_burst} burst records flushed in one directory, {:?}",
        started.elapsed()
    );
    assert!(
        max_burst > 0,
        "no burst was flushed: write-behind not exercised"
    );
    assert!(total_flushes > 0, "the child never completed a flush");
    assert!(
        saw_pool > 0 && total_recycled > 0,
        "no segment was recycled during the run: recycling not exercised"
    );
}
