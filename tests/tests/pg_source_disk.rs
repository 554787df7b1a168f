//! Lack of disk is backpressure, through the shipped CLI: `cdc run` stops taking changes
//! while the log has no room, says so (`cdc_pipeline_waiting_for_disk` on `/metrics`,
//! "waiting for disk" on `/status`, a log line when the wait starts and one when it ends,
//! `/readyz` still ready), never restarts (one "log opened" line, no "restarting"), and
//! resumes by itself once space is freed, with every committed change in the log once:
//! - the disk budget (`[log] disk_budget_bytes`) filled, by many small transactions,
//!   faster than time retention (`retention_ms`) frees it (a single transaction or a
//!   snapshot larger than the budget can never fit: it is flushed only as a whole); a
//!   reader tailing the log from this process sees every record before retention deletes
//!   it, so it can tell a lost or repeated one;
//! - the spill of a large streamed transaction, which counts against the same budget:
//!   spilling waits while the log's records fill it;
//! - a real ENOSPC: the log directory is a small tmpfs (needs root: `mount`), filled up
//!   by a filler file that the test deletes to give the space back.

mod pg_source_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use cdc_log::{Log, LogError, StartAt};
use pg_source_util::*;

/// Rows inserted (ids 1..=ROWS), in transactions of `PER_TX` rows.
const ROWS: i64 = 3000;
const PER_TX: i64 = 10;

/// A fresh database with `acct`, whose rows carry ~130 bytes of hex that compresses
/// badly, and no rows yet.
async fn empty_acct(pg: &PgServer) -> String {
    database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE acct (id int PRIMARY KEY, v bigint NOT NULL, pad text);",
    )
    .await
}

/// Waits until the connector streams (its snapshot is done): the rows inserted from then
/// on arrive as transactions, not inside the snapshot (which is flushed only as a whole).
async fn until_streaming(c: &mut Connector) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(c.dir.join("connector.log"))
        .unwrap_or_default()
        .contains("replication stream started")
    {
        c.assert_running();
        assert!(Instant::now() < deadline, "not streaming\n{}", c.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Inserts ids `from..from + n` in transactions of `PER_TX` rows.
async fn insert_rows(pg: &PgServer, db: &str, from: i64, n: i64) {
    let c = pg.superuser_client(db).await.unwrap();
    let mut id = from;
    while id < from + n {
        let last = (id + PER_TX - 1).min(from + n - 1);
        c.batch_execute(&format!(
            "INSERT INTO acct SELECT g, 0, md5(g::text) || md5((g * 7)::text) || md5((g * 13)::text) || md5((g * 31)::text) FROM generate_series({id}, {last}) g"
        ))
        .await
        .unwrap();
        id = last + 1;
    }
}

/// The admin server's answer to `GET path`: status and body text.
fn admin_get(addr: &str, path: &str) -> (u16, String) {
    if std::net::TcpStream::connect(addr).is_err() {
        return (0, String::new()); // not listening yet
    }
    let (status, body) = http(addr, "GET", path, None, "");
    let text = match body {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    };
    (status, text)
}

/// The value of the un-labelled metric `name` on `/metrics`.
fn metric(addr: &str, name: &str) -> Option<u64> {
    let (_, m) = admin_get(addr, "/metrics");
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// Polls until the connector says it waits for disk: the gauge is 1, `/status` says so
/// and `/readyz` stays ready — or, for a wait shorter than a poll (retention freeing
/// room within milliseconds), until the count of waits says one happened. Panics with
/// the connector's output after `timeout`.
async fn until_waiting_for_disk(c: &mut Connector, admin: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        c.assert_running();
        if metric(admin, "cdc_pipeline_waiting_for_disk") == Some(1) {
            let (_, status) = admin_get(admin, "/status");
            let (ready, _) = admin_get(admin, "/readyz");
            // The wait may end between the two reads; the next round looks again.
            if status.contains("waiting for disk") {
                assert_eq!(ready, 200, "/readyz stays ready while waiting for disk");
                return;
            }
        }
        if metric(admin, "cdc_pipeline_disk_waits_total").unwrap_or(0) >= 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the connector never waited for disk\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The connector waited and resumed without a restart: one open of the log, the wait's
/// first and last lines, no retry.
fn assert_waited_without_restart(c: &Connector) {
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    assert_eq!(
        out.matches("log opened").count(),
        1,
        "the log was closed and opened again\n{}",
        c.output()
    );
    for bad in ["restarting from the log's checkpoint", "will retry"] {
        assert!(!out.contains(bad), "{bad:?} in the output\n{}", c.output());
    }
    for needle in ["waiting for disk", "disk has room again"] {
        assert!(out.contains(needle), "{needle:?} missing\n{}", c.output());
    }
}

/// The ids of `acct` records (op `c` or `r`) a reader saw, checking that each partition's
/// offsets had no gap (a gap is a record deleted before it was read, or skipped).
#[derive(Default)]
struct Seen {
    ids: Vec<i64>,
    next: BTreeMap<u32, u64>,
}

/// Tails `topic` in `log_dir` (read-only, from another process than the writer) until
/// `stop`, recording every record (`count`: the rows so far); fails on a gap.
fn tail(log_dir: &Path, topic: &str, stop: &AtomicBool, count: &AtomicUsize) -> Seen {
    let log = loop {
        if let Ok(l) = Log::open_read_only(log_dir) {
            if l.topics().iter().any(|t| t == topic) {
                break l;
            }
        }
        assert!(!stop.load(Ordering::Relaxed), "the topic never appeared");
        std::thread::sleep(Duration::from_millis(10));
    };
    let parts = log.describe(topic).unwrap().partitions.len() as u32;
    let mut readers: Vec<_> = (0..parts)
        .map(|p| log.reader(topic, p, StartAt::Earliest).unwrap())
        .collect();
    let mut seen = Seen::default();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let mut any = false;
        for (p, r) in readers.iter_mut().enumerate() {
            let batch = match r.poll(4 << 20) {
                Ok(b) => b,
                Err(e @ LogError::OffsetOutOfRange { .. }) => {
                    panic!("retention deleted records before they were read: {e}")
                }
                Err(e) => panic!("reading {topic}-{p}: {e}"),
            };
            for rec in batch {
                any = true;
                let next = seen.next.entry(p as u32).or_insert(0);
                assert_eq!(rec.offset, *next, "gap in {topic}-{p}");
                *next += 1;
                let v: serde_json::Value = serde_json::from_slice(&rec.value.unwrap()).unwrap();
                // `r`: rows the snapshot read (the first inserts may race it).
                if v["op"] == "c" || v["op"] == "r" {
                    seen.ids.push(v["after"]["id"].as_i64().unwrap());
                    count.store(seen.ids.len(), Ordering::Relaxed);
                }
            }
        }
        if stopping && !any {
            return seen;
        }
        if !any {
            // Catch up with the writer (new durable ends, retention's new log starts).
            let _ = log.wait_for_change(Duration::from_millis(20));
            if let Err(e) = log.refresh() {
                panic!("refreshing the read-only view: {e}");
            }
        }
    }
}

/// Each of 1..=n exactly once.
fn assert_each_once(ids: &[i64], n: i64) {
    let mut count: BTreeMap<i64, u32> = BTreeMap::new();
    for &i in ids {
        *count.entry(i).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, &c)| c > 1).take(5).collect();
    assert!(twice.is_empty(), "records appended twice: {twice:?}");
    let missing: Vec<_> = (1..=n).filter(|i| !count.contains_key(i)).take(5).collect();
    assert!(missing.is_empty(), "records missing: {missing:?}");
    assert_eq!(ids.len() as i64, n);
}

/// A reader tailing the connector's log on a thread of this process (see [`tail`]).
struct Tail {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<Seen>>,
}

impl Tail {
    fn start(c: &Connector) -> Tail {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (log_dir, stop, count) = (c.log_dir(), stop.clone(), count.clone());
            std::thread::spawn(move || tail(&log_dir, ACCT_TOPIC, &stop, &count))
        };
        Tail {
            stop,
            count,
            thread: Some(thread),
        }
    }

    /// Waits until the reader saw `rows` rows and the connector no longer waits for
    /// disk; then stops the reader and returns what it saw.
    async fn until_caught_up(mut self, c: &mut Connector, admin: &str, rows: i64) -> Seen {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            c.assert_running();
            let thread = self.thread.as_ref().unwrap();
            if thread.is_finished() {
                // It failed (a gap, a read error): say why.
                if let Err(e) = self.thread.take().unwrap().join() {
                    std::panic::resume_unwind(e);
                }
                unreachable!("the tailing reader ends only when told");
            }
            if self.count.load(Ordering::Relaxed) >= rows as usize
                && metric(admin, "cdc_pipeline_waiting_for_disk") == Some(0)
                && admin_get(admin, "/status").1.contains("running")
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the connector did not catch up ({} of {rows} rows seen)\n{}",
                self.count.load(Ordering::Relaxed),
                c.output()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .unwrap()
            .join()
            .expect("the tailing reader failed")
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The `[log]` settings of the budget tests: `budget` bytes, small segments rolled often,
/// time retention of 3 s run every 200 ms.
fn with_budget(c: &Connector, budget: u64) {
    c.edit_config(|t| {
        t.replace(
            "partitions = 3\n",
            &format!("partitions = 3\ndisk_budget_bytes = {budget}\nsegment_bytes = 8192\nsegment_ms = 500\nretention_ms = 3000\nmaintenance_interval_ms = 200\n"),
        )
    });
}

/// After a budget test: retention did free space, the connector stops cleanly, and it
/// waited without a restart.
async fn finish_budget_test(pg: &PgServer, db: &str, c: &mut Connector, admin: &str) {
    assert!(metric(admin, "cdc_pipeline_disk_waits_total").unwrap_or(0) >= 1);
    let log = Log::open_read_only(c.log_dir()).unwrap();
    let d = log.describe(ACCT_TOPIC).unwrap();
    assert!(
        d.partitions.iter().any(|p| p.log_start_offset > 0),
        "retention freed the space"
    );
    drop(log);
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    assert_waited_without_restart(c);
    drop_slot(pg, db).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn full_disk_budget_waits_and_resumes_when_retention_frees_space() {
    let pg = PgServer::shared();
    let db = empty_acct(pg).await;
    // About 1.5 MB of records against a budget of 192 KiB: retention (3 s) frees the
    // oldest segments while appends wait.
    let (_dir, mut c) = temp_connector(pg, &db, &["public.acct"], "");
    with_budget(&c, 192 << 10);
    let admin = c.fixed_admin_port();
    c.start();
    let tail = Tail::start(&c);
    until_streaming(&mut c).await;
    insert_rows(pg, &db, 1, ROWS / 2).await;
    until_waiting_for_disk(&mut c, &admin, Duration::from_secs(60)).await;
    insert_rows(pg, &db, ROWS / 2 + 1, ROWS - ROWS / 2).await;
    // Resumes by itself: every row reaches the log, once.
    let seen = tail.until_caught_up(&mut c, &admin, ROWS).await;
    assert_each_once(&seen.ids, ROWS);
    finish_budget_test(pg, &db, &mut c, &admin).await;
}

/// The spill of a large open transaction (streamed by the server) counts against the
/// same budget: while the log's records fill it, spilling waits (the source stops
/// reading), and resumes when retention frees space; the transaction arrives whole, once.
#[tokio::test(flavor = "multi_thread")]
async fn the_spill_of_a_streamed_transaction_shares_the_disk_budget() {
    // Transactions past 64 kB of changes are streamed while open, and so spilled.
    let pg = PgServer::start(
        cdc_harness::PgOptions::default().config("logical_decoding_work_mem = '64kB'"),
    )
    .unwrap();
    let db = empty_acct(&pg).await;
    let (_dir, mut c) = temp_connector(&pg, &db, &["public.acct"], "");
    with_budget(&c, 384 << 10);
    let admin = c.fixed_admin_port();
    c.start();
    let tail = Tail::start(&c);
    until_streaming(&mut c).await;
    // Small transactions fill the log to its budget and keep it there for a while (the
    // pipeline has a backlog)…
    insert_rows(&pg, &db, 1, ROWS).await;
    until_waiting_for_disk(&mut c, &admin, Duration::from_secs(60)).await;
    // …while one large transaction is spilled.
    const LARGE: i64 = 500;
    pg.execute(
        &db,
        &format!(
            "INSERT INTO acct SELECT g, 0, md5(g::text) || md5((g * 7)::text) FROM generate_series({}, {}) g",
            ROWS + 1,
            ROWS + LARGE
        ),
    )
    .await
    .unwrap();
    let seen = tail.until_caught_up(&mut c, &admin, ROWS + LARGE).await;
    assert_each_once(&seen.ids, ROWS + LARGE);
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    assert!(
        out.contains("spilling of a streamed transaction waits"),
        "the spill did not wait for the budget\n{}",
        c.output()
    );
    assert!(out.contains("spilling resumes"), "{}", c.output());
    assert_eq!(
        metric(&admin, "cdc_pg_spill_waiting_for_disk"),
        Some(0),
        "the spill's gauge is exported, and back to 0"
    );
    finish_budget_test(&pg, &db, &mut c, &admin).await;
}

/// A tmpfs mounted on a directory for the test's life (unmounted on drop).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. "24m") on `dir`; `None` if this process may not.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }

    /// Bytes free for an unprivileged write.
    fn free(&self) -> u64 {
        let c = std::ffi::CString::new(self.0.to_str().unwrap()).unwrap();
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and a zeroed statvfs to fill.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_bavail as u64 * st.f_frsize as u64
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// True if this process may mount a tmpfs; else says loudly that `test` is skipped.
fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    eprintln!("\n\n*** SKIPPED {test}: mounting a tmpfs needs root (CI runs as root) ***\n\n");
    false
}

/// ENOSPC under `cdc run`: the log directory is a 24 MiB tmpfs; after the first rows, a
/// filler file leaves 256 KiB free and `write` (ids from `PER_TX + 1` to `rows`) needs
/// more. The connector waits (naming the cause), keeps waiting without a restart, resumes once the filler is deleted, and the log then holds
/// every row once, checks clean and opens without recovery cutting anything.
async fn enospc_scenario(
    scenario: &str,
    partitions: u32,
    rows: i64,
    write: impl AsyncFnOnce(&PgServer, &str),
) {
    let pg = PgServer::shared();
    let db = empty_acct(pg).await;
    let (_dir, mut c) = temp_connector(pg, &db, &["public.acct"], "");
    c.edit_config(|t| t.replace("partitions = 3\n", &format!("partitions = {partitions}\n")));
    let fs = Tmpfs::mount(&c.log_dir(), "24m").expect("mount -t tmpfs (as root)");
    let admin = c.fixed_admin_port();
    c.start();
    until_streaming(&mut c).await;
    // The first rows create the topic and register the schemas.
    insert_rows(pg, &db, 1, PER_TX).await;
    c.wait_records(ACCT_TOPIC, PER_TX as u64, Duration::from_secs(30))
        .await;
    let filler = c.log_dir().join("filler");
    let room = fs.free().saturating_sub(256 << 10);
    std::fs::write(&filler, vec![0xa5u8; room as usize]).unwrap();
    write(pg, &db).await;
    until_waiting_for_disk(&mut c, &admin, Duration::from_secs(60)).await;
    let out = c.output();
    assert!(out.contains("disk full"), "the wait names the cause\n{out}");
    assert!(
        // JSON lines (stderr is not a terminal), so no terminal colours either.
        out.contains("\"mid_transaction\":false"),
        "the wait comes at a transaction's end (a flush) or before the next one\n{out}"
    );
    // Still waiting a little later: no restart, no exit.
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.assert_running();
    assert_eq!(metric(&admin, "cdc_pipeline_waiting_for_disk"), Some(1));
    // What the wait costs the database: the WAL the slot holds meanwhile.
    let retained = retained_wal(pg, &db).await;
    // Space returns: the connector resumes by itself.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    let recovered = freed.elapsed();
    let ids: Vec<i64> = read_topic(&c.log_dir(), ACCT_TOPIC)
        .iter()
        .filter_map(|r| r.value.as_ref())
        .filter(|v| v["op"] == "c" || v["op"] == "r")
        .map(|v| v["after"]["id"].as_i64().unwrap())
        .collect();
    // The fault suite's figures (tests/faults/run.sh): each id is one create.
    let distinct: std::collections::BTreeSet<i64> = ids.iter().copied().collect();
    cdc_harness::faults::Run {
        scenario: scenario.into(),
        faults: 1,
        transactions: None,
        tally: cdc_harness::faults::Tally {
            changes: ids.len() as u64,
            lost: (1..=rows).filter(|i| !distinct.contains(i)).count() as u64,
            duplicated: (ids.len() - distinct.len()) as u64,
            reordered: 0,
        },
        max_retained_wal_bytes: retained,
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    assert_each_once(&ids, rows);
    assert_eq!(metric(&admin, "cdc_pipeline_waiting_for_disk"), Some(0));
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    assert_waited_without_restart(&c);
    // No corruption: every batch checks, and a writer opens the log cleanly.
    let log = Log::open(c.log_dir(), cdc_log::LogOptions::default()).unwrap();
    log.verify(ACCT_TOPIC).unwrap();
    assert_eq!(log.metrics().recovery_truncated_bytes, 0, "nothing torn");
    drop(log);
    drop_slot(pg, &db).await;
    drop(fs);
}

/// Many small transactions: the refused call is a flush or the first append of a
/// transaction.
#[tokio::test(flavor = "multi_thread")]
async fn enospc_in_the_log_waits_and_resumes_when_space_returns() {
    if !root_or_skip("enospc_in_the_log_waits_and_resumes_when_space_returns") {
        return;
    }
    enospc_scenario(
        "Postgres: the log's file system full (ENOSPC on a tmpfs) under small transactions, then freed",
        3,
        ROWS,
        async |pg, db| {
        insert_rows(pg, db, PER_TX + 1, ROWS - PER_TX).await
    })
    .await;
}

/// One large transaction into one partition: the stage goes to the file in 1 MiB chunks
/// (written behind, by the log's writer thread, where the file system takes `O_DIRECT`:
/// tmpfs does on recent kernels), which fail for lack of space; the error surfaces by the
/// transaction's flush at the latest, which waits, and the failed chunks are written again
/// from the stage once there is room.
#[tokio::test(flavor = "multi_thread")]
async fn enospc_in_a_large_transaction_written_behind_waits_and_resumes() {
    if !root_or_skip("enospc_in_a_large_transaction_written_behind_waits_and_resumes") {
        return;
    }
    // About 4 MB of lz4 batches: several 1 MiB chunks before the commit.
    const LARGE: i64 = 4 * ROWS;
    enospc_scenario(
        "Postgres: the log's file system full (ENOSPC on a tmpfs) inside a large transaction, then freed",
        1,
        LARGE,
        async |pg, db| {
        pg.execute(
            db,
            &format!(
                "INSERT INTO acct SELECT g, 0, md5(g::text) || md5((g * 7)::text) || md5((g * 13)::text) || md5((g * 31)::text) FROM generate_series({}, {LARGE}) g",
                PER_TX + 1
            ),
        )
        .await
        .unwrap()
    })
    .await;
}
