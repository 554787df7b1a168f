//! Fuzz target `segment`: the embedded log's on-disk decoding (`connector/log`).
//!
//! The first input byte picks a mode (low 2 bits) and flags (high bits); the rest is
//! the mode's data:
//!
//! - 0 batches: the bytes as a segment's batches, each validated and its records decoded
//!   (`fuzz_decode_segment`: `verify_batch`, `decode_into`, record iteration);
//! - 1 scan: the bytes written as a segment file, read by the `BatchScanner` and by
//!   recovery's `scan_segment` (params: base offset, stop offset, contiguous flag);
//! - 2 open: a whole log directory — a ledger with fuzzed marks, `topic.conf`, and up to
//!   two segments with their `.index` / `.timeindex` files from the input — opened
//!   read-only, then by a writer (recovery cuts and rebuilds), every record read, the
//!   log verified and closed; a directory a writer opened must open again;
//! - 3 files: (segment size u16, offset index length u16) then the bytes as ledger,
//!   `topic.conf`, `groups`, and offset + time index files.
//!
//! Flag 0x80: before decoding, every batch's CRC is recomputed (a random mutation
//! otherwise never gets past the CRC to the record decoder). Seeds: real segments the
//! log's own writer produced (`fuzz/seeds.sh`).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cdc_log::{Log, LogOptions, StartAt};
use libfuzzer_sys::fuzz_target;

const FIX_CRC: u8 = 0x80;

/// Recomputes the CRC-32C of every batch that parses far enough to have one.
fn fix_crcs(data: &mut [u8]) {
    let mut pos = 0usize;
    while pos + 61 <= data.len() {
        let len = i32::from_be_bytes(data[pos + 8..pos + 12].try_into().unwrap());
        let Some(total) = usize::try_from(len).ok().map(|l| l + 12) else {
            return;
        };
        if total < 61 || pos + total > data.len() {
            return;
        }
        let crc = crc32c::crc32c(&data[pos + 21..pos + total]);
        data[pos + 17..pos + 21].copy_from_slice(&crc.to_be_bytes());
        pos += total;
    }
}

/// A scratch directory for this process (on tmpfs when there is one), emptied per input.
fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            if let Ok(d) = tempfile::Builder::new().prefix("cdc-fuzz-").tempdir_in(shm) {
                return d;
            }
        }
        tempfile::tempdir().expect("a temporary directory")
    })
    .path()
}

fn fresh(name: &str) -> PathBuf {
    let d = scratch().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Reads `n` bytes off the front of `data` (fewer at its end).
fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (a, b) = data.split_at(n.min(data.len()));
    *data = b;
    a
}

fn u16_of(data: &mut &[u8]) -> u16 {
    let b = take(data, 2);
    match b {
        [x, y] => u16::from_le_bytes([*x, *y]),
        [x] => *x as u16,
        _ => 0,
    }
}

fn read_all(log: &Log) {
    for t in log.topics() {
        let Ok(d) = log.describe(&t) else { continue };
        for p in 0..d.partitions.len() as u32 {
            let Ok(mut r) = log.reader(&t, p, StartAt::Earliest) else {
                continue;
            };
            // Bounded: each poll advances, or the reader is at the end.
            for _ in 0..64 {
                match r.poll(1 << 20) {
                    Ok(v) if !v.is_empty() => {}
                    _ => break,
                }
            }
        }
        let _ = log.verify(&t);
    }
}

fn open_dir(flags: u8, mut data: &[u8]) {
    let dir = fresh("log");
    let durable_end = u16_of(&mut data) as u64;
    let log_start = take(&mut data, 1).first().copied().unwrap_or(0) as u64;
    let ckpt_len = take(&mut data, 1).first().copied().unwrap_or(0) as usize % 16;
    let checkpoint = take(&mut data, ckpt_len).to_vec();
    let ledger = cdc_log::fuzzing::ledger_file(
        (flags & 0x40 != 0).then_some(&checkpoint[..]),
        &[("t", 0, log_start, durable_end)],
    );
    std::fs::write(dir.join("ledger"), ledger).unwrap();
    let tdir = dir.join("topics").join("t");
    let pdir = tdir.join("0");
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::write(
        tdir.join("topic.conf"),
        cdc_log::TopicConfig::with_partitions(1).encode(),
    )
    .unwrap();
    // Up to two segments: base u16, then .log, .index and .timeindex, each u16-length
    // prefixed (the last segment's .log takes the rest when its length runs past it).
    let mut base = 0u64;
    for i in 0..2 {
        if data.is_empty() {
            break;
        }
        if i > 0 {
            base += u16_of(&mut data) as u64;
        }
        let n = u16_of(&mut data) as usize;
        let mut log = take(&mut data, n).to_vec();
        if flags & FIX_CRC != 0 {
            fix_crcs(&mut log);
        }
        let stem = format!("{base:020}");
        std::fs::write(pdir.join(format!("{stem}.log")), &log).unwrap();
        if !data.is_empty() {
            let n = u16_of(&mut data) as usize;
            std::fs::write(pdir.join(format!("{stem}.index")), take(&mut data, n)).unwrap();
            let n = u16_of(&mut data) as usize;
            std::fs::write(pdir.join(format!("{stem}.timeindex")), take(&mut data, n)).unwrap();
        }
    }
    if let Ok(log) = cdc_log::fuzzing::open_read_only_once(&dir) {
        read_all(&log);
        let _ = log.close();
    }
    let options = || LogOptions {
        accept_damaged_tail: flags & 0x20 != 0,
        write_behind: false,
        ..LogOptions::default()
    };
    let opened = match Log::open(&dir, options()) {
        Ok(log) => {
            read_all(&log);
            log.close().is_ok()
        }
        Err(_) => false,
    };
    if opened {
        // Recovery made the directory consistent: opening it again must work.
        match Log::open(&dir, options()) {
            Ok(log) => {
                read_all(&log);
                let _ = log.close();
            }
            Err(e) => panic!("a directory a writer opened and closed does not reopen: {e}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let flags = head & 0xfc;
    match head & 3 {
        0 => {
            let mut v = rest.to_vec();
            if flags & FIX_CRC != 0 {
                fix_crcs(&mut v);
            }
            let _ = cdc_log::fuzz_decode_segment(&v);
        }
        1 => {
            let mut rest = rest;
            let base = take(&mut rest, 1).first().copied().unwrap_or(0) as u64;
            let stop = match u16_of(&mut rest) {
                u16::MAX => u64::MAX,
                s => s as u64,
            };
            let mut v = rest.to_vec();
            if flags & FIX_CRC != 0 {
                fix_crcs(&mut v);
            }
            let dir = fresh("scan");
            let path = dir.join(format!("{base:020}.log"));
            std::fs::write(&path, &v).unwrap();
            let _ = cdc_log::fuzzing::scan_segment_file(&path, base, stop, flags & 0x40 != 0);
        }
        2 => open_dir(flags, rest),
        _ => {
            let mut rest = rest;
            let log_size = u16_of(&mut rest) as u64;
            let index_len = u16_of(&mut rest) as usize;
            let _ = cdc_log::fuzzing::decode_files(rest, index_len, log_size);
        }
    }
});
