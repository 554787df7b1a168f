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
    let mut next: u64 = log
        .checkpoint()
        .map(|c| u64::from_be_bytes(c.try_into().expect("8-byte checkpoint")))
        .unwrap_or(0);
    let mut vals: Vec<Vec<u8>> = Vec::new();
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
        log.flush(Some(&end.to_be_bytes())).expect("flush");
        next = end;
        println!("flushed {end} recycled {}", log.metrics().recycled_segments);
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

fn verify(dir: &std::path::Path, min_checkpoint: u64) -> u64 {
    let log = Log::open(dir, LogOptions::default()).expect("reopen after kill");
    let cp = log
        .checkpoint()
        .map(|c| u64::from_be_bytes(c.try_into().expect("8-byte checkpoint")))
        .unwrap_or(0);
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
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // "flushed <checkpoint> recycled <rolls into pool files so far>"
                let f: Vec<&str> = line.split_whitespace().collect();
                if let ["flushed", n, "recycled", r] = f[..] {
                    if let (Ok(n), Ok(r)) = (n.parse::<u64>(), r.parse::<u64>()) {
                        max = max.max(n);
                        recycled = recycled.max(r);
                        count += 1;
                    }
                }
            }
            (max, count, recycled)
        });
        // Kill at a random moment: sometimes during open/recovery, mostly mid-stream;
        // every tenth child lives longer, so that flushes complete even when a loaded
        // machine makes start-up take most of the short window.
        let window = if k % 10 == 9 { 400_000 } else { 60_000 };
        std::thread::sleep(Duration::from_micros(2_000 + rng.below(window)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (printed, count, recycled) = reader.join().unwrap();
        total_flushes += count;
        total_recycled += recycled;
        last_printed = last_printed.max(printed);
        saw_pool += (pool_files(dir.path()) > 0) as u64;
        let cp = verify(dir.path(), last_printed);
        last_printed = last_printed.max(cp);
    }
    eprintln!(
        "crash test: {kills} kills, {total_flushes} completed flushes observed, recycle-pool files present at {saw_pool} kills, {total_recycled} rolls into recycled files, {:?}",
        started.elapsed()
    );
    assert!(total_flushes > 0, "the child never completed a flush");
    assert!(
        saw_pool > 0 && total_recycled > 0,
        "no segment was recycled during the run: recycling not exercised"
    );
}
