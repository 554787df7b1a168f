//! Writes the seed inputs of the `segment` fuzz target (`fuzz/fuzz_targets/segment.rs`,
//! which documents the input layout) from real log directories: a few records appended
//! and flushed through the public API (keys, tombstones, headers; no compression, lz4,
//! zstd; a roll, so one segment is closed with its index files), then the segment, index,
//! ledger, `topic.conf` and `groups` files packed as each mode of the target reads them.
//!
//! `cargo run -p cdc-log --example fuzz_seeds -- <out dir>` (run by `fuzz/seeds.py`).

use std::path::Path;

use cdc_log::{Compression, HeaderRef, Log, LogOptions, NewRecord, TopicConfig};

fn records(n: usize) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    (0..n)
        .map(|i| {
            let key = format!("key-{}", i % 5).into_bytes();
            // Every fourth record is a tombstone (no value).
            let value = (i % 4 != 3)
                .then(|| format!("{{\"id\":{i},\"v\":\"{}\"}}", "x".repeat(i % 40)).into_bytes());
            (key, value)
        })
        .collect()
}

/// Writes a one-partition topic `t` and returns the partition directory.
fn write_log(dir: &Path, compression: Compression, rolls: bool) -> std::path::PathBuf {
    let log = Log::open(dir, LogOptions::default()).expect("open");
    let config = TopicConfig {
        compression,
        segment_bytes: if rolls { 1024 } else { 1 << 20 },
        ..TopicConfig::with_partitions(1)
    };
    let topic = log.create_topic("t", config).expect("topic");
    let headers = [
        HeaderRef {
            key: "op",
            value: Some(b"c"),
        },
        HeaderRef {
            key: "null",
            value: None,
        },
    ];
    let recs = records(24);
    for (i, chunk) in recs.chunks(4).enumerate() {
        let batch: Vec<NewRecord<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(j, (k, v))| NewRecord {
                key: (j != 1).then_some(&k[..]),
                value: v.as_deref(),
                headers: if j % 2 == 0 { &headers } else { &[] },
                timestamp: 1_700_000_000_000 + (i * 4 + j) as i64,
            })
            .collect();
        topic.append(0, &batch).expect("append");
        log.flush(Some(format!("lsn:0/{i:X}").as_bytes()))
            .expect("flush");
    }
    log.commit("g", "t", 0, 3).expect("commit");
    log.close().expect("close");
    dir.join("topics").join("t").join("0")
}

/// A segment's base offset and its `.log`, `.index` and `.timeindex` bytes.
type SegmentFiles = (u64, Vec<u8>, Vec<u8>, Vec<u8>);

fn segments(pdir: &Path) -> Vec<SegmentFiles> {
    let mut bases: Vec<u64> = std::fs::read_dir(pdir)
        .expect("partition dir")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort();
    bases
        .into_iter()
        .map(|b| {
            let read =
                |ext: &str| std::fs::read(pdir.join(format!("{b:020}.{ext}"))).unwrap_or_default();
            (b, read("log"), read("index"), read("timeindex"))
        })
        .collect()
}

fn u16le(v: usize) -> [u8; 2] {
    (v.min(u16::MAX as usize) as u16).to_le_bytes()
}

fn main() {
    let out = std::env::args()
        .nth(1)
        .expect("usage: fuzz_seeds <out dir>");
    let out = Path::new(&out);
    std::fs::create_dir_all(out).expect("out dir");
    let mut n = 0;
    let mut put = |bytes: Vec<u8>| {
        std::fs::write(out.join(format!("seed-{n:03}")), bytes).expect("write seed");
        n += 1;
    };
    for (ci, c) in [Compression::None, Compression::Lz4, Compression::Zstd]
        .into_iter()
        .enumerate()
    {
        for rolls in [false, true] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let pdir = write_log(tmp.path(), c, rolls);
            let segs = segments(&pdir);
            let first = &segs[0];
            // Mode 0: the batches, as written and with the CRC fix-up flag.
            for flags in [0x00u8, 0x80] {
                let mut v = vec![flags];
                v.extend_from_slice(&first.1);
                put(v);
            }
            // Mode 1: scan (base, stop u16: 0xffff = none), gapless or not.
            for (flags, stop) in [(0x01u8, u16::MAX), (0xc1, 10), (0x41, u16::MAX)] {
                let mut v = vec![flags, first.0 as u8];
                v.extend_from_slice(&stop.to_le_bytes());
                v.extend_from_slice(&first.1);
                put(v);
            }
            // Mode 2: the directory; durable end = every record (24), or cut at 10.
            for (flags, durable) in [(0x42u8, 24usize), (0x22, 10), (0x02, 30)] {
                let mut v = vec![flags];
                v.extend_from_slice(&u16le(durable));
                v.push(0); // log start
                let ckpt = b"lsn:0/5";
                v.push(ckpt.len() as u8);
                v.extend_from_slice(ckpt);
                for (i, (base, log, index, time)) in segs.iter().take(2).enumerate() {
                    if i > 0 {
                        v.extend_from_slice(&u16le((base - segs[0].0) as usize));
                    }
                    for f in [log, index, time] {
                        v.extend_from_slice(&u16le(f.len()));
                        v.extend_from_slice(f);
                    }
                }
                put(v);
            }
            // Mode 3: the small files (once: they do not depend on the codec).
            if ci == 0 && rolls {
                let dir = tmp.path();
                let files = [
                    (0, std::fs::read(dir.join("ledger")).expect("ledger")),
                    (
                        0,
                        std::fs::read(dir.join("topics/t/topic.conf")).expect("topic.conf"),
                    ),
                    (0, std::fs::read(dir.join("groups")).expect("groups")),
                    (first.2.len(), [first.2.clone(), first.3.clone()].concat()),
                ];
                for (index_len, f) in files {
                    let mut v = vec![0x03];
                    v.extend_from_slice(&u16le(first.1.len()));
                    v.extend_from_slice(&u16le(index_len));
                    v.extend_from_slice(&f);
                    put(v);
                }
            }
        }
    }
    println!("{n} seeds in {}", out.display());
}
