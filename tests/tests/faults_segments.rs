//! Damaged segments of the embedded log, through the shipped CLI, under the Postgres
//! version-chain workload (the fault suite, `tests/faults/run.sh`):
//! - a **torn tail**: `cdc run` SIGKILLed, then bytes a crash in the middle of a write could
//!   leave appended to each partition's active segment (half a batch, a whole batch with
//!   stale offsets, garbage). The next start cuts them (the ledger says what is durable)
//!   and nothing is lost, repeated or reordered;
//! - **durable records damaged** while the connector is stopped: a bit flipped inside a
//!   segment, or the active segment truncated into fsynced data. `cdc log verify` names
//!   the damage (exit 1); `cdc run` refuses a log whose durable tail is gone, and says to
//!   run `cdc log repair`; `cdc log repair` cuts each damaged partition at its first bad
//!   batch and stores "snapshot incomplete", so the next `cdc run` snapshots again and the
//!   log's table equals the database — every key's history stays valid (a snapshot read
//!   resets it), versions that lived only in the cut records are not recovered (the
//!   database no longer has them).
//!
//! `CDC_TEST_SEGMENT_FAULTS` sets the number of faults per scenario (default 4).

mod pg_source_util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use pg_source_util::*;

fn faults() -> u32 {
    std::env::var("CDC_TEST_SEGMENT_FAULTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

/// `cdc log <args> --config <c>`: (exit code, stdout, stderr).
fn cdc_log(c: &Connector, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .arg("log")
        .args(args)
        .arg("--config")
        .arg(&c.config)
        .env("CDC_LOG_LEVEL", "warn")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The segment files (`*.log`) of each partition of the acct topic, oldest first.
fn segments(log_dir: &Path) -> Vec<Vec<PathBuf>> {
    let topic = log_dir.join("topics").join(ACCT_TOPIC);
    (0..3)
        .map(|p| {
            let mut v: Vec<PathBuf> = std::fs::read_dir(topic.join(p.to_string()))
                .map(|rd| {
                    rd.map(|e| e.unwrap().path())
                        .filter(|p| p.extension().is_some_and(|x| x == "log"))
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        })
        .collect()
}

/// Appends to each partition's active segment what a write torn by a crash could leave.
fn tear(log_dir: &Path, rng: &mut Rng) -> Vec<&'static str> {
    let mut kinds = Vec::new();
    for segs in segments(log_dir) {
        let Some(active) = segs.last() else { continue };
        let bytes = std::fs::read(active).unwrap();
        // A batch from the segment's start: valid CRC, but not the offsets that follow.
        let batch = &bytes[..bytes.len().min(200)];
        let (kind, tail): (&str, Vec<u8>) = match rng.next() % 3 {
            0 if !batch.is_empty() => ("half a batch", batch[..batch.len() / 2].to_vec()),
            1 if !batch.is_empty() => ("a stale batch", batch.to_vec()),
            _ => (
                "garbage",
                (0..1 + rng.next() % 3000)
                    .map(|_| rng.next() as u8)
                    .collect(),
            ),
        };
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(active)
            .unwrap();
        f.write_all(&tail).unwrap();
        kinds.push(kind);
    }
    kinds
}

/// A connector on the acct fixture with small segments (several per partition).
async fn setup(pg: &'static PgServer) -> (String, tempfile::TempDir, Connector) {
    let db = setup_acct(pg, 200).await;
    let (dir, c) = temp_connector(pg, &db, &["public.acct"], "");
    c.edit_config(|t| {
        t.replace(
            "partitions = 3\n",
            "partitions = 3\nsegment_bytes = 32768\n",
        )
    });
    (db, dir, c)
}

#[tokio::test(flavor = "multi_thread")]
async fn torn_segment_tails_after_sigkill_are_cut_and_nothing_is_lost() {
    let n = faults();
    let pg = PgServer::shared();
    let (db, _dir, mut c) = setup(pg).await;
    let w = Running::start(pg, &db, 200, 0x5851f42d4c957f2d);
    let mut rng = Rng(0xd1b54a32d192ed03);
    let mut max_retained = 0i64;
    let mut kinds = Vec::new();
    for _ in 0..n {
        c.start();
        tokio::time::sleep(Duration::from_millis(500 + rng.next() % 1500)).await;
        c.assert_running();
        c.kill();
        kinds.extend(tear(&c.log_dir(), &mut rng));
        max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
    }
    let transactions = w.finish().await;
    let recovering = Instant::now();
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    let recovered = recovering.elapsed();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    let cut: u64 = out
        .lines()
        .filter(|l| l.contains("recovery cut bytes past the durable end"))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["truncated_bytes"].as_u64())
        .sum();
    assert!(cut > 0, "recovery cut the torn tails\n{}", c.output());
    let (code, stdout, stderr) = cdc_log(&c, &["verify"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    eprintln!("torn tails: {kinds:?}; {cut} bytes cut by recovery");
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    cdc_harness::faults::Run {
        scenario: "Postgres: torn segment tails after SIGKILL (half batch, stale batch, garbage)"
            .into(),
        faults: n.into(),
        transactions: Some(transactions),
        tally: tally(&recs),
        max_retained_wal_bytes: Some(max_retained),
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    drop_slot(pg, &db).await;
}

/// Damages durable records of the stopped connector's log: a flipped bit inside a
/// segment (`flip`), or the active segment of a partition truncated into its data.
/// Returns what it did. Retries a flip until `cdc log verify` sees it (a bit in the zero
/// padding after the last batch of a flush is not damage).
fn damage(c: &Connector, flip: bool, rng: &mut Rng) -> String {
    for _ in 0..50 {
        let parts = segments(&c.log_dir());
        let p = (rng.next() % 3) as usize;
        let segs: Vec<_> = parts[p]
            .iter()
            .filter(|s| std::fs::metadata(s).unwrap().len() > 64)
            .collect();
        let Some(&file) = segs.get((rng.next() % segs.len().max(1) as u64) as usize) else {
            continue;
        };
        let mut bytes = std::fs::read(file).unwrap();
        let what = if flip {
            let at = (rng.next() % bytes.len() as u64) as usize;
            let bit = 1u8 << (rng.next() % 8);
            bytes[at] ^= bit;
            std::fs::write(file, &bytes).unwrap();
            format!("bit {bit:#04x} of byte {at} flipped in {}", file.display())
        } else {
            let Some(active) = parts[p].last() else {
                continue;
            };
            let len = std::fs::metadata(active).unwrap().len();
            if len < 256 {
                continue;
            }
            let to = len / 4 + rng.next() % (len / 4);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(active)
                .unwrap();
            f.set_len(to).unwrap();
            format!("{} truncated from {len} to {to} bytes", active.display())
        };
        let (code, stdout, stderr) = cdc_log(c, &["verify"]);
        if code == Some(1) {
            assert!(
                stdout.contains("DAMAGED") && stderr.contains("cdc log repair"),
                "verify names the damage and the fix\n{stdout}{stderr}"
            );
            return what;
        }
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        if !flip {
            panic!("a truncation into durable data went unnoticed: {what}\n{stdout}");
        }
    }
    panic!("no damage that verify could see was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn damaged_durable_segments_are_found_repaired_and_snapshotted_again() {
    let n = faults();
    let pg = PgServer::shared();
    let (db, _dir, mut c) = setup(pg).await;
    let w = Running::start(pg, &db, 200, 0x2127599bf4325c37);
    let mut rng = Rng(0x9fb21c651e98df25);
    let mut max_retained = 0i64;
    let mut refused = 0;
    c.start();
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(1000 + rng.next() % 2000)).await;
        c.assert_running();
        assert_eq!(c.stop(), Some(0), "{}", c.output());
        let what = damage(&c, i % 2 == 0, &mut rng);
        eprintln!("damage {i}: {what}");
        max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
        // A log whose durable tail is gone does not open for writing: `cdc run` stops
        // with a definite error that says what to run (damage inside a closed segment is
        // not read at start: the connector would run on, and verify finds it).
        c.start();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if c.child.as_mut().unwrap().try_wait().unwrap().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if let Some(status) = c.child.as_mut().unwrap().try_wait().unwrap() {
            c.child = None;
            assert_eq!(status.code(), Some(1), "{}", c.output());
            let out = c.output();
            assert!(
                out.contains("cdc log repair"),
                "the refusal says what to run\n{out}"
            );
            refused += 1;
        } else {
            assert_eq!(c.stop(), Some(0), "{}", c.output());
        }
        let (code, stdout, stderr) = cdc_log(&c, &["repair"]);
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        assert!(
            stdout.contains("cut") && stdout.contains("snapshot"),
            "repair says what it cut and what follows\n{stdout}"
        );
        let (code, stdout, stderr) = cdc_log(&c, &["verify"]);
        assert_eq!(code, Some(0), "intact after repair\n{stdout}{stderr}");
        c.start();
    }
    let transactions = w.finish().await;
    let recovering = Instant::now();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(90))
        .await;
    let recovered = recovering.elapsed();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let snapshots = std::fs::read_to_string(c.dir.join("connector.log"))
        .unwrap()
        .matches("snapshot complete")
        .count();
    eprintln!("{n} damages, {refused} refused by cdc run, snapshots taken: {snapshots}");
    assert!(
        n == 1 || refused > 0,
        "a truncation made cdc run refuse the log"
    );
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    cdc_harness::faults::Run {
        scenario: "Postgres: durable segments damaged while stopped (bit flip, truncation): found by `cdc log verify`, cut by `cdc log repair`, snapshotted again".into(),
        faults: n.into(),
        transactions: Some(transactions),
        tally: tally(&recs),
        max_retained_wal_bytes: Some(max_retained),
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    drop_slot(pg, &db).await;
}
