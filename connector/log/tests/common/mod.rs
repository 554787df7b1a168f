#![allow(dead_code)]

use std::time::Duration;

use cdc_log::{Log, LogOptions, NewRecord, Reader, Record, StartAt, Topic, TopicConfig};

/// xorshift64: deterministic randomness for the tests (seeded, no dependency).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Copies a directory tree (a log, to damage or replay a copy of it).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

pub fn open(dir: &std::path::Path) -> Log {
    Log::open(dir, LogOptions::default()).expect("open log")
}

pub fn small_topic(partitions: u32) -> TopicConfig {
    TopicConfig {
        partitions,
        segment_bytes: 1024,
        retention_ms: None,
        ..TopicConfig::default()
    }
}

/// Reads everything durable from `start`.
pub fn read_all(log: &Log, topic: &str, partition: u32) -> Vec<Record> {
    let mut r: Reader = log
        .reader(topic, partition, StartAt::Earliest)
        .expect("reader");
    let mut out = Vec::new();
    loop {
        let got = r.poll(64 << 10).expect("poll");
        if got.is_empty() {
            break;
        }
        out.extend(got);
    }
    out
}

/// A log at `dir` with topic `t` (one partition, small segments, 2048 retention bytes)
/// holding 100 flushed records of 100 bytes: keys 0..100 (big-endian u32), timestamps the
/// same; retention has segments to drop.
pub fn hundred_records(dir: &std::path::Path) -> (Log, Topic) {
    let log = open(dir);
    let t = log
        .create_topic(
            "t",
            TopicConfig {
                retention_bytes: Some(2048),
                ..small_topic(1)
            },
        )
        .unwrap();
    for i in 0..100u32 {
        t.append(0, &[rec(&i.to_be_bytes(), &[7u8; 100], i as i64)])
            .unwrap();
    }
    log.flush(None).unwrap();
    (log, t)
}

pub fn rec<'a>(key: &'a [u8], value: &'a [u8], ts: i64) -> NewRecord<'a> {
    NewRecord::new(Some(key), Some(value), ts)
}

pub const SHORT: Duration = Duration::from_millis(50);
