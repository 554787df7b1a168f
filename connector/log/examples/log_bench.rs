//! Throughput and tail-latency benchmark of the embedded log.
//!
//! ```text
//! cargo run --release -p cdc-log --example log_bench -- [--dir DIR] [--mb N] [--flush-kb N] [--tail N] [--sizes 100,1024]
//! ```
//!
//! For record sizes 100 B and 1 KiB (or `--sizes`): appends `--mb` MiB of values in batches of ~100 KiB
//! with a flush (fsync + ledger) every `--flush-kb` KiB (default 1024), then reads it all
//! back (page cache warm), then measures tail latency: the time from `flush` returning to
//! a reader blocked in `next_batch` on another thread holding the record (`--tail` runs;
//! `--tail 0` skips it).
//!
//! `--steady [--segment-mb N] [--retention-mb N]`: the steady state of a topic with size
//! retention, where segment files are recycled (`recycle.rs`). For each record size, an
//! untimed warm-up appends `retention + 3 segments` with the same flush interval, running
//! retention after every flush (as the maintenance thread would), so that from then on
//! every roll reuses a pool file; then the timed run appends `--mb` MiB the same way
//! (retention included in the time) and reports how many of its rolls reused a file.
//! Defaults: 64 MiB segments, 128 MiB retention. No read-back or tail measurement.
//!
//! `--no-write-behind`: the appending thread writes each full MiB itself
//! (`LogOptions::write_behind` off), for A/B runs with a large `--flush-kb`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use cdc_log::{Log, LogOptions, NewRecord, StartAt, TopicConfig};

struct Args {
    dir: std::path::PathBuf,
    mb: u64,
    flush_kb: u64,
    tail: usize,
    sizes: Vec<usize>,
    steady: bool,
    segment_mb: u64,
    retention_mb: u64,
    write_behind: bool,
}

fn args() -> Args {
    let mut a = Args {
        dir: std::path::PathBuf::from("target-log/bench-log"),
        mb: 1024,
        flush_kb: 1024,
        tail: 2000,
        sizes: vec![100, 1024],
        steady: false,
        segment_mb: 64,
        retention_mb: 128,
        write_behind: true,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let val = v.get(i + 1).cloned().unwrap_or_default();
        if v[i] == "--steady" || v[i] == "--no-write-behind" {
            a.steady |= v[i] == "--steady";
            a.write_behind &= v[i] != "--no-write-behind";
            i += 1;
            continue;
        }
        match v[i].as_str() {
            "--segment-mb" => a.segment_mb = val.parse().expect("--segment-mb N"),
            "--retention-mb" => a.retention_mb = val.parse().expect("--retention-mb N"),
            "--dir" => a.dir = val.into(),
            "--mb" => a.mb = val.parse().expect("--mb N"),
            "--flush-kb" => a.flush_kb = val.parse().expect("--flush-kb N"),
            "--tail" => a.tail = val.parse().expect("--tail N"),
            "--sizes" => {
                a.sizes = val
                    .split(',')
                    .map(|s| s.parse().expect("--sizes 100,1024"))
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

/// Appends `mb` MiB of `size`-byte records to partition 0 of `topic` in ~100 KiB batches,
/// flushing every `flush_kb` KiB; with `retention`, runs retention after every flush.
/// Returns (records, bytes on disk, seconds, flush seconds).
fn append_run(
    log: &Log,
    topic: &cdc_log::Topic,
    size: usize,
    mb: u64,
    flush_kb: u64,
    retention: bool,
) -> Result<(u64, u64, f64, f64), cdc_log::LogError> {
    let value = vec![0x5au8; size];
    let key_bytes: Vec<[u8; 8]> = (0..100_000u64).map(|i| i.to_be_bytes()).collect();
    let per_batch = (100 * 1024 / size).max(1);
    let total_records = mb * 1024 * 1024 / size as u64;
    let mut recs: Vec<NewRecord<'_>> = Vec::with_capacity(per_batch);
    let flush_every = flush_kb * 1024;
    let mut since_flush = 0u64;
    let mut written = 0u64;
    let mut disk_bytes = 0u64;
    let mut flush_time = Duration::ZERO;
    let t0 = Instant::now();
    while written < total_records {
        recs.clear();
        let n = per_batch.min((total_records - written) as usize);
        let ts = cdc_log::now_ms();
        for j in 0..n {
            let k = &key_bytes[(written as usize + j) % key_bytes.len()];
            recs.push(NewRecord::new(Some(k), Some(&value), ts));
        }
        let info = topic.append(0, &recs)?;
        written += n as u64;
        since_flush += info.bytes;
        disk_bytes += info.bytes;
        if since_flush >= flush_every || written == total_records {
            let f = Instant::now();
            log.flush(Some(&written.to_be_bytes()))?;
            flush_time += f.elapsed();
            since_flush = 0;
            if retention {
                log.enforce_retention()?;
            }
        }
    }
    Ok((
        written,
        disk_bytes,
        t0.elapsed().as_secs_f64(),
        flush_time.as_secs_f64(),
    ))
}

fn open_log(a: &Args) -> Result<Log, cdc_log::LogError> {
    Log::open(
        &a.dir,
        LogOptions {
            write_behind: a.write_behind,
            ..LogOptions::default()
        },
    )
}

/// `--steady`: see the module docs.
fn steady(a: &Args) -> Result<(), cdc_log::LogError> {
    let log = open_log(a)?;
    println!(
        "cdc-log bench (steady state, recycled segments): dir {}, {} MiB timed per size, flush every {} KiB, segment {} MiB, retention {} MiB",
        a.dir.display(),
        a.mb,
        a.flush_kb,
        a.segment_mb,
        a.retention_mb
    );
    for &size in &a.sizes {
        let name = format!("steady-{size}");
        let topic = log.create_topic(
            &name,
            TopicConfig {
                partitions: 1,
                retention_ms: None,
                retention_bytes: Some(a.retention_mb << 20),
                segment_bytes: a.segment_mb << 20,
                segment_ms: None,
                ..TopicConfig::default()
            },
        )?;
        let warm_mb = a.retention_mb + 3 * a.segment_mb;
        let (_, _, wel, _) = append_run(&log, &topic, size, warm_mb, a.flush_kb, true)?;
        let recycled0 = log.metrics().recycled_segments;
        let (written, disk_bytes, el, flush_time) =
            append_run(&log, &topic, size, a.mb, a.flush_kb, true)?;
        let recycled = log.metrics().recycled_segments - recycled0;
        let payload = written as f64 * size as f64;
        println!(
            "steady append {size:>5} B records: {:>9.0} rec/s, payload {:>7.1} MB/s, on disk {:>7.1} MB/s ({:.2} s, of which flush {:.2} s; rolls into recycled files during the timed run: {recycled}, expected about {}; warm-up {warm_mb} MiB in {wel:.2} s)",
            written as f64 / el,
            payload / el / 1e6,
            disk_bytes as f64 / el / 1e6,
            el,
            flush_time,
            disk_bytes / (a.segment_mb << 20),
        );
    }
    drop(log);
    let _ = std::fs::remove_dir_all(&a.dir);
    Ok(())
}

fn main() -> Result<(), cdc_log::LogError> {
    let a = args();
    let _ = std::fs::remove_dir_all(&a.dir);
    if a.steady {
        return steady(&a);
    }
    let log = open_log(&a)?;
    println!(
        "cdc-log bench: dir {}, {} MiB per size, flush every {} KiB",
        a.dir.display(),
        a.mb,
        a.flush_kb
    );
    for &size in &a.sizes {
        let name = format!("bench-{size}");
        let topic = log.create_topic(
            &name,
            TopicConfig {
                partitions: 1,
                retention_ms: None,
                ..TopicConfig::default()
            },
        )?;
        let (written, disk_bytes, el, flush_time) =
            append_run(&log, &topic, size, a.mb, a.flush_kb, false)?;
        let payload = written as f64 * size as f64;
        println!(
            "append {size:>5} B records: {:>9.0} rec/s, payload {:>7.1} MB/s, on disk {:>7.1} MB/s ({:.2} s, of which flush {:.2} s, {} flushes)",
            written as f64 / el,
            payload / el / 1e6,
            disk_bytes as f64 / el / 1e6,
            el,
            flush_time,
            log.metrics().flushes
        );
        // Read back: the borrowing path (`poll_with`, no allocation per record) twice (the
        // first pass may still fault pages in), then the owned path (`poll`, a `Record`
        // with refcounted `Bytes` per record) once for comparison.
        for pass in 0..3 {
            let mut r = log.reader(&name, 0, StartAt::Earliest)?;
            let t0 = Instant::now();
            let mut n = 0u64;
            let mut bytes = 0u64;
            let owned = pass == 2;
            loop {
                let got = if owned {
                    let got = r.poll(1 << 20)?;
                    bytes += got
                        .iter()
                        .map(|r| r.value.as_ref().map_or(0, |v| v.len()) as u64)
                        .sum::<u64>();
                    got.len()
                } else {
                    r.poll_with(1 << 20, |rec| {
                        bytes += rec.value.map_or(0, |v| v.len()) as u64;
                    })?
                };
                if got == 0 {
                    break;
                }
                n += got as u64;
            }
            assert_eq!(n, written);
            let el = t0.elapsed().as_secs_f64();
            println!(
                "read   {size:>5} B records ({}): {:>9.0} rec/s, payload {:>7.1} MB/s, on disk {:>7.1} MB/s",
                if owned { "poll, owned     " } else if pass == 0 { "poll_with pass 0" } else { "poll_with pass 1" },
                n as f64 / el,
                bytes as f64 / el / 1e6,
                disk_bytes as f64 / el / 1e6
            );
        }
    }

    if a.tail == 0 {
        drop(log);
        let _ = std::fs::remove_dir_all(&a.dir);
        return Ok(());
    }
    // Tail latency: flush return -> tailing reader holds the record.
    let topic = log.create_topic("bench-tail", TopicConfig::with_partitions(1))?;
    let mut reader = log.reader("bench-tail", 0, StartAt::Latest)?;
    let (tx, rx) = mpsc::channel::<Instant>();
    let n = a.tail;
    let th = std::thread::spawn(move || {
        let mut seen = 0;
        while seen < n {
            let got = reader
                .next_batch(1 << 20, Duration::from_secs(5))
                .expect("tail read");
            let at = Instant::now();
            for _ in &got {
                tx.send(at).expect("send");
            }
            seen += got.len();
        }
    });
    let mut lat = Vec::with_capacity(n);
    let value = [1u8; 100];
    for i in 0..n {
        topic.append(0, &[NewRecord::new(None, Some(&value), i as i64)])?;
        log.flush(None)?;
        let flushed = Instant::now();
        let seen = rx.recv().expect("reader alive");
        lat.push(seen.saturating_duration_since(flushed));
    }
    th.join().expect("tail thread");
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "tail latency (flush return -> reader has record), {n} runs: p50 {:?}, p99 {:?}, max {:?} (0 = reader had it before flush returned)",
        pct(0.5),
        pct(0.99),
        lat[lat.len() - 1]
    );
    drop(log);
    let _ = std::fs::remove_dir_all(&a.dir);
    Ok(())
}
