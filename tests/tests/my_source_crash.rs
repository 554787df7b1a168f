//! Crash safety and snapshot consistency of the MySQL / MariaDB source, through the
//! shipped CLI (`cdc-e2e run --config …`) into the embedded log, on a real MariaDB:
//!
//! - a snapshot taken while transactions commit: every table rebuilt from the log equals
//!   the table, and each key's history is exactly its committed versions;
//! - the connector SIGKILLed at random moments (inside the initial snapshot, then while
//!   streaming, also inside transactions large enough to go out in chunks) and restarted,
//!   under a workload of multi-statement transactions over three tables that update the
//!   same hot keys again and again: every committed change exactly once, in commit order
//!   per key, no transaction ever half durable, and the rebuilt tables equal the database.
//!
//! "Exactly once" is checked per key: every update adds 1 to the version column `v` and
//! rewrites `pad`, so the log's history of a key must be its snapshot read (or its
//! insert at v = 0), then one update per version with `before` equal to the previous
//! `after`, then at most its delete. A duplicate, a gap or a reordering breaks the chain.
//!
//! The default run does 6 kills. The soak, and the replay of a failed run (its seed is
//! printed at the start and in every failure):
//!
//! ```text
//! MY_CRASH_KILLS=200 cargo test -p cdc-harness --test my_source_crash -- --nocapture
//! MY_CRASH_SEED=0x… cargo test -p cdc-harness --test my_source_crash -- --nocapture
//! ```

mod my_source_util;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::MariaDbServer;
use my_source_util::*;
use mysql_async::prelude::Queryable;
use serde_json::Value as Json;

/// The captured tables, all of `acct`'s columns (`id` key, `v` version, `pad`).
const TABLES: [&str; 3] = ["a", "b", "c"];
/// Rows of `a`: enough for its snapshot to be killed part-way.
const BIG_ROWS: i64 = 20_000;
/// Rows of `b` and `c`.
const SMALL_ROWS: i64 = 300;
/// Keys 1..=HOT of every table get most updates: long per-key histories.
const HOT: u64 = 30;
/// Ids inserted by the workload start here (worker `w` at `INSERT_BASE * (w + 1)`).
const INSERT_BASE: i64 = 10_000_000;

fn rows_of(table: &str) -> i64 {
    if table == "a" {
        BIG_ROWS
    } else {
        SMALL_ROWS
    }
}

/// The seed: `MY_CRASH_SEED` (decimal or 0x-hex) to replay a run, else from the clock.
fn seed() -> u64 {
    match std::env::var("MY_CRASH_SEED") {
        Ok(s) => {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            }
            .expect("MY_CRASH_SEED: a decimal or 0x-hex number")
        }
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

/// A fresh database with the tables of [`TABLES`], ids 1..=rows at v = 0.
async fn setup(my: &MariaDbServer) -> String {
    let db = my.create_database().await.unwrap();
    let mut sql = String::new();
    for t in TABLES {
        sql.push_str(&format!(
            "CREATE TABLE {db}.{t} (id int PRIMARY KEY, v bigint NOT NULL, pad varchar(50)) ENGINE=InnoDB;
             INSERT INTO {db}.{t} SELECT seq, 0, 'x' FROM {db}.seq_1_to_{};",
            rows_of(t)
        ));
    }
    // Not captured: transactions on it only move the position.
    sql.push_str(&format!(
        "CREATE TABLE {db}.x (id int PRIMARY KEY, v bigint NOT NULL) ENGINE=InnoDB; INSERT INTO {db}.x VALUES (1, 0);"
    ));
    my.execute(&sql).await.unwrap();
    db
}

/// One workload connection: transactions of 1–4 statements over random tables — updates
/// of hot keys and of any key, inserts of new ids, updates and deletes of ids it
/// inserted — and now and then one statement updating 100 rows of `a` (several chunks of
/// `max_batch_events`), a transaction on an uncaptured table, a binlog rotation. Two workers update the same hot keys, so commit order matters; a
/// deadlock between them rolls one transaction back, which the log must not show.
async fn worker(
    my: &'static MariaDbServer,
    db: String,
    w: u64,
    seed: u64,
    pause: Duration,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
) {
    let mut rng = Rng((seed ^ (w + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
    let first = INSERT_BASE * (w as i64 + 1);
    let mut next = [first; 3];
    let mut conn = my.root_conn().await.unwrap();
    let mut sql = String::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        sql.clear();
        if w == 0 && n % 150 == 0 {
            // A new binlog file now and then: positions resume across rotations.
            sql.push_str("FLUSH BINARY LOGS;");
        }
        sql.push_str("START TRANSACTION;");
        if rng.next() % 6 == 0 {
            // Only the uncaptured table: a transaction the source filters out.
            sql.push_str(&format!("UPDATE {db}.x SET v = v + 1; COMMIT;"));
            if conn.query_drop(&sql).await.is_err() {
                let _ = conn.query_drop("ROLLBACK").await;
            }
            continue;
        }
        for _ in 0..1 + rng.next() % 4 {
            let ti = (rng.next() % 3) as usize;
            let t = TABLES[ti];
            let pad = format!("w{w}-{}", rng.next() % 10_000);
            let upd =
                |id: i64| format!("UPDATE {db}.{t} SET v = v + 1, pad = '{pad}' WHERE id = {id};");
            let s = match rng.next() % 10 {
                0..=4 => upd(1 + (rng.next() % HOT) as i64),
                5 => upd(1 + (rng.next() % rows_of(t) as u64) as i64),
                6 | 7 => {
                    next[ti] += 1;
                    format!("INSERT INTO {db}.{t} VALUES ({}, 0, '{pad}');", next[ti])
                }
                _ if next[ti] == first => continue,
                8 => upd(next[ti] - (rng.next() % 4) as i64),
                _ => {
                    let id = first + 1 + (rng.next() % (next[ti] - first) as u64) as i64;
                    format!("DELETE FROM {db}.{t} WHERE id = {id};")
                }
            };
            sql.push_str(&s);
        }
        if rng.next() % 15 == 0 {
            let from = HOT as i64 + 1 + (rng.next() % (BIG_ROWS as u64 - 400)) as i64;
            sql.push_str(&format!(
                "UPDATE {db}.a SET v = v + 1 WHERE id BETWEEN {from} AND {};",
                from + 99
            ));
        }
        sql.push_str("COMMIT;");
        match conn.query_drop(&sql).await {
            Ok(()) => {
                done.fetch_add(1, Ordering::Relaxed);
            }
            // A deadlock (or lock wait timeout) stopped the statements half-way: roll back
            // what is left open. Inserted ids are never reused either way.
            Err(_) => {
                if conn.query_drop("ROLLBACK").await.is_err() {
                    conn = my.root_conn().await.unwrap();
                }
            }
        }
        tokio::time::sleep(pause).await;
    }
    let _ = conn.disconnect().await;
}

/// Two [`worker`]s until [`Workload::finish`].
struct Workload {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Workload {
    /// `pause` between a worker's transactions.
    fn start(my: &'static MariaDbServer, db: &str, seed: u64, pause: Duration) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let tasks = (0..2)
            .map(|w| {
                tokio::spawn(worker(
                    my,
                    db.to_string(),
                    w,
                    seed,
                    pause,
                    stop.clone(),
                    done.clone(),
                ))
            })
            .collect();
        Workload { stop, done, tasks }
    }

    /// Stops the workers; returns the committed transactions.
    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        self.done.load(Ordering::Relaxed)
    }
}

fn topic(db: &str, t: &str) -> String {
    format!("t.{db}.{t}")
}

/// The durable records of every table's topic, read incrementally: durable records never
/// change (a crash only cuts what was not yet durable), and decoding the whole log again
/// at every look costs seconds in a debug build. The final checks read it afresh.
struct Tail {
    log_dir: std::path::PathBuf,
    /// Topic → per partition, every record so far (offsets 0..len).
    parts: BTreeMap<String, Vec<Vec<Rec>>>,
    /// Streamed records per GTID so far.
    per_gtid: HashMap<String, usize>,
    /// GTIDs that had records durable at a kill ([`Tail::seal`]): a transaction is durable
    /// whole or not at all, so none of them may get another record.
    sealed: std::collections::HashSet<String>,
    /// Records of sealed GTIDs: a transaction half durable at a kill (or one repeated).
    half_durable: Vec<String>,
}

impl Tail {
    fn new(c: &Connector, db: &str) -> Tail {
        Tail {
            log_dir: c.log_dir(),
            parts: TABLES.iter().map(|t| (topic(db, t), Vec::new())).collect(),
            per_gtid: HashMap::new(),
            sealed: Default::default(),
            half_durable: Vec::new(),
        }
    }

    /// After a kill: every transaction with durable records is complete in the log.
    fn seal(&mut self) {
        self.refresh();
        self.sealed.extend(self.per_gtid.keys().cloned());
    }

    /// Reads the records made durable since the last call.
    fn refresh(&mut self) {
        let Ok(log) = cdc_log::Log::open_read_only(&self.log_dir) else {
            return;
        };
        let topics = log.topics();
        for (topic, parts) in &mut self.parts {
            if !topics.iter().any(|t| t == topic) {
                continue;
            }
            let n = log.describe(topic).unwrap().partitions.len();
            parts.resize_with(n, Vec::new);
            for (p, recs) in parts.iter_mut().enumerate() {
                let from = cdc_log::StartAt::Offset(recs.len() as u64);
                let mut r = log.reader(topic, p as u32, from).unwrap();
                loop {
                    let batch = r.poll(4 << 20).unwrap();
                    if batch.is_empty() {
                        break;
                    }
                    for rec in batch {
                        assert_eq!(
                            rec.offset,
                            recs.len() as u64,
                            "{topic}/{p}: offsets not gapless"
                        );
                        let r = Rec {
                            partition: p as u32,
                            offset: rec.offset,
                            key: rec.key.map(|k| serde_json::from_slice(&k).unwrap()),
                            value: rec.value.map(|v| serde_json::from_slice(&v).unwrap()),
                            headers: Vec::new(),
                        };
                        if let Some(g) = r.value.as_ref().and_then(|v| v["source"]["gtid"].as_str())
                        {
                            if self.sealed.contains(g) {
                                self.half_durable
                                    .push(format!("{g} ({topic}/{p} offset {})", r.offset));
                            }
                            *self.per_gtid.entry(g.to_string()).or_default() += 1;
                        }
                        recs.push(r);
                    }
                }
            }
        }
    }

    /// `topic`'s records, each partition's in offset order.
    fn records(&self, topic: &str) -> Vec<Rec> {
        self.parts[topic].iter().flatten().cloned().collect()
    }
}

/// A connector capturing every table of [`TABLES`], with small batches so that the
/// workload's 100-row statements go out in chunks.
fn connector(my: &MariaDbServer, db: &str) -> (tempfile::TempDir, Connector) {
    let (dir, c) = temp_connector_tables(my, db, &TABLES, "");
    c.source_key("max_batch_events = 32");
    (dir, c)
}

/// Waits until every table rebuilt from the log equals the table.
async fn converge_all(c: &mut Connector, tail: &mut Tail, my: &MariaDbServer, db: &str, seed: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    'wait: loop {
        c.assert_running();
        tail.refresh();
        for t in TABLES {
            let want = table_rows_of(my, db, t).await;
            let got = rebuild(&tail.records(&topic(db, t)));
            if got != want {
                if Instant::now() > deadline {
                    let k = want
                        .keys()
                        .chain(got.keys())
                        .find(|k| got.get(*k) != want.get(*k));
                    panic!(
                        "seed {seed:#x}: table {t}: log has {} rows, table {}; first difference {k:?}: log {:?} table {:?}\n{}",
                        got.len(),
                        want.len(),
                        k.and_then(|k| got.get(k)),
                        k.and_then(|k| want.get(k)),
                        c.output()
                    );
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue 'wait;
            }
        }
        return;
    }
}

/// Checks that each key's history in `recs` (one topic) is exactly its committed versions
/// (see the module documentation). Returns the number of change records.
fn check_exactly_once(recs: &[Rec]) -> Result<usize, String> {
    // Key → the last after-image (`None` once deleted).
    let mut state: HashMap<String, Option<&Json>> = HashMap::new();
    let mut n = 0;
    for r in recs {
        let (Some(k), Some(v)) = (&r.key, &r.value) else {
            continue; // a delete's tombstone
        };
        n += 1;
        let key = k.to_string();
        let at = format!("partition {} offset {}", r.partition, r.offset);
        let op = v["op"].as_str().unwrap_or("?");
        let after = &v["after"];
        let prev = state.get(&key).copied();
        match (op, prev) {
            ("r", None) => {}
            ("r", Some(_)) => {
                return Err(format!("key {key} at {at}: a snapshot read after its history began (a second snapshot, or one out of order)"))
            }
            ("c", None) if after["v"] == 0 => {}
            ("c", _) => return Err(format!("key {key} at {at}: create {after} of a key already seen, or not at v = 0")),
            (_, None) => return Err(format!("key {key} at {at}: {op} of a key never read or created (its create is missing)")),
            (_, Some(None)) => return Err(format!("key {key} at {at}: {op} after its delete")),
            ("u", Some(Some(p))) => {
                if v["before"] != *p {
                    return Err(format!("key {key} at {at}: update's before {} is not the previous after {p} (a change missing, duplicated or reordered)", v["before"]));
                }
                if after["v"].as_i64() != p["v"].as_i64().map(|x| x + 1) {
                    return Err(format!("key {key} at {at}: update to {after} after {p}: not the next version (duplicate or missing change)"));
                }
            }
            ("d", Some(Some(p))) => {
                if v["before"] != *p {
                    return Err(format!("key {key} at {at}: delete's before {} is not the previous after {p}", v["before"]));
                }
                state.insert(key, None);
                continue;
            }
            (other, _) => return Err(format!("key {key} at {at}: unexpected op {other}")),
        }
        state.insert(key, Some(after));
    }
    Ok(n)
}

/// Every topic's records read afresh from the log (not through a [`Tail`]), checked with
/// [`check_exactly_once`]; returns them and the number of change records.
fn check_all(c: &Connector, db: &str, seed: u64) -> (Vec<Rec>, usize) {
    let mut all = Vec::new();
    let mut n = 0;
    for t in TABLES {
        let recs = read_topic(&c.log_dir(), &topic(db, t));
        n += check_exactly_once(&recs).unwrap_or_else(|e| {
            panic!(
                "seed {seed:#x}: table {t}: {e}\nconnector log and embedded log kept in {}",
                c.dir.display()
            )
        });
        all.extend(recs);
    }
    (all, n)
}

/// Streamed records per GTID (to compare a fresh read with the [`Tail`]'s).
fn records_per_gtid<'a>(recs: impl Iterator<Item = &'a Rec>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in recs {
        if let Some(g) = r.value.as_ref().and_then(|v| v["source"]["gtid"].as_str()) {
            *m.entry(g.to_string()).or_default() += 1;
        }
    }
    m
}

/// The connector's admin address (the newest in its output).
fn admin_addr(c: &Connector) -> Option<String> {
    let log = std::fs::read_to_string(c.dir.join("connector.log")).ok()?;
    let line = log
        .lines()
        .rfind(|l| l.contains("admin server listening"))?;
    let at = line.find("127.0.0.1:")?;
    Some(
        line[at..]
            .chars()
            .take_while(|ch| ch.is_ascii_digit() || *ch == '.' || *ch == ':')
            .collect(),
    )
}

/// A gauge of the running connector's `/metrics`; None while it does not answer.
fn gauge(c: &Connector, name: &str) -> Option<f64> {
    let addr = admin_addr(c)?;
    let mut s = std::net::TcpStream::connect(&addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// How often `what` occurs in the connector's output (all its runs).
fn count_in_output(c: &Connector, what: &str) -> usize {
    std::fs::read_to_string(c.dir.join("connector.log"))
        .unwrap_or_default()
        .matches(what)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_with_concurrent_writes_rebuilds_every_table() {
    let seed = seed();
    eprintln!("seed {seed:#x} (replay: MY_CRASH_SEED={seed:#x})");
    let my = MariaDbServer::shared();
    let db = setup(my).await;
    let (_dir, mut c) = connector(my, &db);
    // As fast as they go: as many commits as possible while the snapshot reads.
    let load = Workload::start(my, &db, seed, Duration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.start();
    // Writes go on through the snapshot and a while after it.
    let deadline = Instant::now() + Duration::from_secs(120);
    while count_in_output(&c, "snapshot complete") == 0 {
        c.assert_running();
        assert!(
            Instant::now() < deadline,
            "seed {seed:#x}: no snapshot\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let committed = load.finish().await;
    let mut tail = Tail::new(&c, &db);
    converge_all(&mut c, &mut tail, my, &db, seed).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let (recs, n) = check_all(&c, &db, seed);
    let reads = recs
        .iter()
        .filter(|r| r.value.as_ref().is_some_and(|v| v["op"] == "r"))
        .count();
    // Only rows the workers deleted before the snapshot are missing from it, and they
    // delete only ids they inserted themselves.
    let initial = (BIG_ROWS + 2 * SMALL_ROWS) as usize;
    assert!(reads >= initial, "seed {seed:#x}: {reads} snapshot reads");
    eprintln!(
        "{committed} concurrent transactions, {reads} snapshot reads, {n} change records checked"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_at_random_moments_every_change_exactly_once() {
    let kills: u32 = std::env::var("MY_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let seed = seed();
    eprintln!("seed {seed:#x} (replay: MY_CRASH_SEED={seed:#x}), {kills} kills");
    let mut rng = Rng(seed | 1);
    let t0 = Instant::now();
    let my = MariaDbServer::shared();
    let db = setup(my).await;
    let (mut dir, mut c) = connector(my, &db);
    // A failure is a lost or duplicated change: keep the connector's output and the
    // embedded log for the post-mortem (removed below on success).
    dir.disable_cleanup(true);
    eprintln!(
        "connector dir (kept if this test fails): {}",
        c.dir.display()
    );
    // Paced: the log's volume (read back in a debug build) stays small.
    let load = Workload::start(my, &db, seed, Duration::from_millis(15));
    let mut tail = Tail::new(&c, &db);

    // Inside the initial snapshot: killed after a random share of `a` was read (the
    // snapshot starts over each time).
    let snapshot_kills = kills.div_ceil(3).min(5);
    let mut inside = 0;
    for _ in 0..snapshot_kills {
        let at = (BIG_ROWS as u64 * (5 + rng.next() % 45) / 100) as f64;
        c.start();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            c.assert_running();
            if count_in_output(&c, "snapshot complete") > 0 {
                break; // too late: this one is a kill while streaming
            }
            let running = gauge(&c, "cdc_snapshot_running") == Some(1.0);
            if running && gauge(&c, "cdc_snapshot_rows").unwrap_or(0.0) >= at {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "seed {seed:#x}: no snapshot seen\n{}",
                c.output()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        c.kill();
        tail.seal();
        eprintln!("{:?}: killed in the snapshot phase", t0.elapsed());
        // The snapshot may have finished between the gauge and the kill.
        if count_in_output(&c, "snapshot complete") > 0 {
            break;
        }
        inside += 1;
    }
    assert!(
        inside > 0,
        "seed {seed:#x}: no kill landed inside the snapshot"
    );

    // While streaming: the snapshot is durable first (its rows are flushed with its end
    // position, so records in `a` mean both), then kills at random moments of the runs
    // (while resuming, between and inside transactions, inside chunked ones).
    c.start();
    let deadline = Instant::now() + Duration::from_secs(120);
    while topic_len(&c.log_dir(), &topic(&db, "a")) == 0 {
        c.assert_running();
        assert!(
            Instant::now() < deadline,
            "seed {seed:#x}: no snapshot\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in snapshot_kills..kills {
        if i > snapshot_kills {
            c.start();
        }
        tokio::time::sleep(Duration::from_millis(50 + rng.next() % 1500)).await;
        c.assert_running();
        c.kill();
        tail.seal();
        eprintln!("{:?}: killed while streaming", t0.elapsed());
    }
    let committed = load.finish().await;
    let recovering = Instant::now();
    // Still running when every kill fell inside the snapshot (KILLS=1).
    if kills > snapshot_kills {
        c.start();
    }
    converge_all(&mut c, &mut tail, my, &db, seed).await;
    let recovered = recovering.elapsed();
    eprintln!("{:?}: converged", t0.elapsed());
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let (recs, n) = check_all(&c, &db, seed);
    eprintln!("{:?}: checked", t0.elapsed());
    assert!(
        tail.half_durable.is_empty(),
        "seed {seed:#x}: transactions with records durable at a kill got more later (half durable): {:?}",
        &tail.half_durable[..tail.half_durable.len().min(5)]
    );
    // The incremental reads saw what a fresh read sees.
    assert_eq!(
        records_per_gtid(recs.iter()),
        tail.per_gtid.into_iter().collect::<BTreeMap<_, _>>()
    );
    let resumes = count_in_output(&c, "resuming from the stored position");
    assert!(
        resumes > 0 || kills == snapshot_kills,
        "seed {seed:#x}: never resumed from a stored position"
    );
    // The suite's figures, per table (keys repeat across tables).
    let mut t = cdc_harness::faults::Tally::default();
    for table in TABLES {
        t += cdc_harness::faults::tally(&read_topic(&c.log_dir(), &topic(&db, table)));
    }
    cdc_harness::faults::Run {
        scenario:
            "MariaDB: SIGKILL of cdc run at random moments (snapshot and streaming), restarted"
                .into(),
        faults: kills.into(),
        transactions: Some(committed),
        tally: t,
        max_retained_wal_bytes: None,
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    dir.disable_cleanup(false);
    eprintln!(
        "{kills} SIGKILLs ({inside} inside the snapshot), {committed} transactions committed, {n} change records checked, {} transactions durable at a kill",
        tail.sealed.len()
    );
}
