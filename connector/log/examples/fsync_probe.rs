//! What the disk charges for the pieces of a flush, to put `log_bench` against `dd`.
//!
//! ```text
//! cargo run --release -p cdc-log --example fsync_probe -- [--dir DIR] [--n N]
//! ```
//!
//! Per operation, p10 / p50 / p90 over `--n` repetitions (default 200), in a scratch file
//! under `--dir` (default `target-log/fsync-probe`, i.e. the same file system as the bench):
//!
//! - the ledger's step: a 4 KiB overwrite + `fdatasync`; `fdatasync` with nothing dirty;
//! - `dd oflag=direct bs=1M`'s step: one 1 MiB `O_DIRECT` write at the end of the file;
//!   the same + `fdatasync` (the segment's step); the same into already written blocks,
//!   and into blocks reserved by `fallocate` (unwritten extents);
//! - the log's flush pattern with no CPU work: ~1.1 MiB per flush written by one `O_DIRECT`
//!   write (last block padded and written again by the next) + `fdatasync`, then the
//!   ledger's 4 KiB overwrite + `fdatasync` ("two syncs"); and the same without the ledger
//!   write ("one sync": what a design with a single fsync per flush could reach).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

const MIB: usize = 1 << 20;
const BLOCK: usize = 4096;

/// A zero-initialised buffer whose usable part starts at a 4 KiB-aligned address.
struct Aligned {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, fill: u8) -> Aligned {
        let mut buf = vec![fill; len + BLOCK];
        let off = (BLOCK - buf.as_mut_ptr() as usize % BLOCK) % BLOCK;
        Aligned { buf, off, len }
    }
    fn get(&self, n: usize) -> &[u8] {
        assert!(n <= self.len);
        &self.buf[self.off..self.off + n]
    }
}

fn open(path: &Path, direct: bool) -> File {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path).expect("open scratch file")
}

fn report(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    println!(
        "{name:<56} p10 {:6.3}  p50 {:6.3}  p90 {:6.3} ms",
        v[n / 10] * 1e3,
        v[n / 2] * 1e3,
        v[n * 9 / 10] * 1e3
    );
}

fn timed(n: usize, mut f: impl FnMut(usize)) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let t = Instant::now();
            f(i);
            t.elapsed().as_secs_f64()
        })
        .collect()
}

/// `n` times: a 1 MiB write at MiB `i` of `f` + fdatasync; the seconds of each.
fn write_and_sync(f: &File, mib: &Aligned, n: usize) -> Vec<f64> {
    timed(n, |i| {
        f.write_all_at(mib.get(MIB), (i * MIB) as u64)
            .expect("write");
        f.sync_data().expect("fdatasync");
    })
}

/// The log's flush pattern; returns MB/s.
fn flush_pattern(dir: &Path, n: usize, ledger: bool) -> f64 {
    let path = dir.join("segment");
    let _ = std::fs::remove_file(&path);
    let seg = open(&path, true);
    let led = open(&dir.join("ledger"), false);
    led.write_all_at(&[1u8; 2 * BLOCK], 0).expect("ledger");
    led.sync_all().expect("sync");
    let data = Aligned::new(2 * MIB, 0x5a);
    let per = 1_153_000u64; // what log_bench appends between two flushes of 1 MiB
    let mut end = 0u64;
    let t = Instant::now();
    for i in 0..n {
        let start = end / BLOCK as u64 * BLOCK as u64;
        end += per;
        let to = end.div_ceil(BLOCK as u64) * BLOCK as u64;
        seg.write_all_at(data.get((to - start) as usize), start)
            .expect("direct write");
        seg.sync_data().expect("fdatasync");
        if ledger {
            led.write_all_at(&[i as u8; BLOCK], (i % 2 * BLOCK) as u64)
                .expect("ledger write");
            led.sync_data().expect("fdatasync");
        }
    }
    let mbs = end as f64 / t.elapsed().as_secs_f64() / 1e6;
    let _ = std::fs::remove_file(&path);
    mbs
}

fn main() {
    let mut dir = PathBuf::from("target-log/fsync-probe");
    let mut n = 200usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for w in args.chunks(2) {
        match (w[0].as_str(), w.get(1)) {
            ("--dir", Some(v)) => dir = v.into(),
            ("--n", Some(v)) => n = v.parse().expect("--n N"),
            _ => panic!("usage: fsync_probe [--dir DIR] [--n N]"),
        }
    }
    std::fs::create_dir_all(&dir).expect("create --dir");
    let scratch = dir.join("scratch");
    let mib = Aligned::new(MIB, 0x5a);

    let _ = std::fs::remove_file(&scratch);
    let f = open(&scratch, false);
    f.write_all_at(&[0u8; 2 * BLOCK], 0).expect("write");
    f.sync_all().expect("sync");
    report(
        "4 KiB overwrite + fdatasync (the ledger's step)",
        timed(n, |i| {
            f.write_all_at(&[i as u8; BLOCK], (i % 2 * BLOCK) as u64)
                .expect("write");
            f.sync_data().expect("fdatasync");
        }),
    );
    report(
        "fdatasync, nothing dirty (a cache flush)",
        timed(n, |_| f.sync_data().expect("fdatasync")),
    );
    drop(f);

    let _ = std::fs::remove_file(&scratch);
    let f = open(&scratch, true);
    report(
        "O_DIRECT 1 MiB write at the end (dd's step)",
        timed(n, |i| {
            f.write_all_at(mib.get(MIB), (i * MIB) as u64)
                .expect("write")
        }),
    );
    report(
        "O_DIRECT 1 MiB overwrite of written blocks + fdatasync",
        write_and_sync(&f, &mib, n),
    );
    drop(f);
    let _ = std::fs::remove_file(&scratch);
    let f = open(&scratch, true);
    report(
        "O_DIRECT 1 MiB write at the end + fdatasync",
        write_and_sync(&f, &mib, n),
    );
    drop(f);
    let _ = std::fs::remove_file(&scratch);
    let f = open(&scratch, true);
    // SAFETY: fallocate on an owned, open descriptor; no memory is passed.
    let rc =
        unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, (n * MIB) as i64) };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
    f.sync_all().expect("sync");
    report(
        "O_DIRECT 1 MiB write into fallocated blocks + fdatasync",
        write_and_sync(&f, &mib, n),
    );
    drop(f);
    let _ = std::fs::remove_file(&scratch);

    let flushes = n.max(100) * 4;
    println!(
        "flush pattern, {flushes} flushes of 1.1 MiB, two syncs (segment + ledger): {:7.1} MB/s",
        flush_pattern(&dir, flushes, true)
    );
    println!(
        "flush pattern, {flushes} flushes of 1.1 MiB, one sync (segment only):     {:7.1} MB/s",
        flush_pattern(&dir, flushes, false)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
