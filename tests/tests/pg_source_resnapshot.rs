//! Re-snapshots and crashes around snapshots, through the shipped CLI:
//! - a slot invalidated while the connector runs, under `snapshot.mode = "when_needed"`:
//!   the connector takes a new slot and a new snapshot by itself (one process, no manual
//!   restart), and the rows deleted while the slot was lost get a delete record (`before` =
//!   their last known row) and a tombstone, so the view built from the log — the newest
//!   record per key, tombstones and deletes removing — equals the table;
//! - SIGKILL inside the initial snapshot and inside a re-snapshot (killed while the
//!   connector's own progress gauges say the snapshot runs), then a restart: the view
//!   equals the table, and every key's history since its last snapshot read is gapless
//!   (each committed `v = v + 1` once, in order): no committed change missing or doubled;
//! - the same with `format.value = "avro"`: the deletes are Avro delete envelopes, read
//!   back with the writer schema the embedded registry serves for their id;
//! - SIGTERM under a running workload: the slot's `confirmed_flush_lsn` after the exit is
//!   the position of the log's durable checkpoint, exactly.

mod pg_source_util;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use cdc_log::{Log, StartAt};
use cdc_schemas::encode::redelete_avro::WriterSchema;
use cdc_schemas::{Checkpoint, Lsn, PgPosition, SourcePosition};
use pg_source_util::slot::*;
use pg_source_util::*;

const WHEN_NEEDED: &str = "\n[snapshot]\nmode = \"when_needed\"\n";

/// A row of the `acct` fixture, as the table holds it and as records carry it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
struct Row {
    id: i64,
    v: i64,
    pad: Option<String>,
}

/// A delete's `before`: a streamed delete (replica identity default) holds the key alone.
#[derive(Debug, serde::Deserialize)]
struct Before {
    id: i64,
    v: Option<i64>,
}

#[derive(Debug, serde::Deserialize)]
struct Envelope {
    op: String,
    before: Option<Before>,
    after: Option<Row>,
}

#[derive(Debug, serde::Deserialize)]
struct Key {
    id: i64,
}

/// One record of the `acct` topic, decoded into the fixture's types (much cheaper than
/// generic JSON for a log of hundreds of thousands of records).
#[derive(Debug)]
struct AcctRec {
    partition: u32,
    offset: u64,
    id: i64,
    /// `None`: a tombstone.
    value: Option<Envelope>,
}

/// Every durable record of the `acct` topic, per partition in offset order.
fn read_acct(c: &Connector) -> Vec<AcctRec> {
    let Ok(log) = Log::open_read_only(c.log_dir()) else {
        return Vec::new();
    };
    let Ok(d) = log.describe(ACCT_TOPIC) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in 0..d.partitions.len() as u32 {
        let mut r = log.reader(ACCT_TOPIC, p, StartAt::Earliest).unwrap();
        while r
            .poll_with(4 << 20, |rec| {
                out.push(AcctRec {
                    partition: p,
                    offset: rec.offset,
                    id: serde_json::from_slice::<Key>(rec.key.unwrap()).unwrap().id,
                    value: rec.value.map(|v| serde_json::from_slice(v).unwrap()),
                })
            })
            .unwrap()
            > 0
        {}
    }
    out
}

/// The table: id → row.
async fn table(pg: &PgServer, db: &str) -> BTreeMap<i64, Row> {
    let c = pg.superuser_client(db).await.unwrap();
    c.query("SELECT id, v, pad FROM acct", &[])
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            let id = r.get::<_, i32>(0) as i64;
            (
                id,
                Row {
                    id,
                    v: r.get(1),
                    pad: r.get(2),
                },
            )
        })
        .collect()
}

/// The view a keyed consumer builds from the log: the newest record per key, a tombstone
/// or a delete removing the key.
fn view(recs: &[AcctRec]) -> BTreeMap<i64, Row> {
    let mut m = BTreeMap::new();
    for r in recs {
        match r.value.as_ref().and_then(|v| v.after.as_ref()) {
            Some(after) if r.value.as_ref().is_some_and(|v| v.op != "d") => {
                m.insert(r.id, after.clone());
            }
            _ => {
                m.remove(&r.id);
            }
        }
    }
    m
}

/// Waits until [`view`] of the log equals the table; returns the records.
async fn converge_view(pg: &PgServer, db: &str, c: &Connector, timeout: Duration) -> Vec<AcctRec> {
    let deadline = Instant::now() + timeout;
    loop {
        let want = table(pg, db).await;
        let recs = read_acct(c);
        let got = view(&recs);
        if got == want {
            return recs;
        }
        assert!(
            Instant::now() < deadline,
            "the log's view has {} rows, the table {}; differing {:?}; kept by the log only {:?}\n{}",
            got.len(),
            want.len(),
            want.keys().filter(|k| got.get(*k) != want.get(*k)).take(5).collect::<Vec<_>>(),
            got.keys().filter(|k| !want.contains_key(*k)).take(5).collect::<Vec<_>>(),
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The records of key `id`, in log order.
fn history(recs: &[AcctRec], id: i64) -> Vec<&AcctRec> {
    recs.iter().filter(|r| r.id == id).collect()
}

/// Asserts that key `id` ends with a delete whose `before` holds `v` (its last known
/// value) and then a tombstone.
fn assert_deleted(recs: &[AcctRec], id: i64, v: i64) {
    let h = history(recs, id);
    let n = h.len();
    assert!(n >= 2, "key {id}: {h:?}");
    let d = h[n - 2]
        .value
        .as_ref()
        .expect("a delete record, not a tombstone");
    assert_eq!(d.op, "d", "key {id}: {d:?}");
    let before = d.before.as_ref().expect("before");
    assert_eq!(
        (before.id, before.v),
        (id, Some(v)),
        "the last known row: {d:?}"
    );
    assert!(d.after.is_none(), "{d:?}");
    assert!(
        h[n - 1].value.is_none(),
        "key {id}: a tombstone last: {h:?}"
    );
}

/// Every key's history is valid: a snapshot read (re)sets it, a create starts it (on an
/// absent key), each update adds exactly 1 to `v`, a delete ends it (on a present key).
/// So after each key's last snapshot read no change is missing, doubled or out of order.
fn check_histories(recs: &[AcctRec]) -> Result<usize, String> {
    let mut state: HashMap<i64, Option<i64>> = HashMap::new();
    let mut n = 0;
    for r in recs {
        let Some(v) = &r.value else { continue };
        let after = v.after.as_ref().map(|a| a.v);
        let cur = state.get(&r.id).copied().flatten();
        n += 1;
        match v.op.as_str() {
            "r" => {
                state.insert(r.id, after);
            }
            "c" if cur.is_none() => {
                state.insert(r.id, after);
            }
            "u" if cur.map(|c| c + 1) == after => {
                state.insert(r.id, after);
            }
            "d" if cur.is_some() => {
                state.insert(r.id, None);
            }
            op => {
                return Err(format!(
                    "{op} of id {} at {}:{}: v={after:?} after v={cur:?}",
                    r.id, r.partition, r.offset
                ))
            }
        }
    }
    Ok(n)
}

/// Updates (`v = v + 1`) of random rows among ids 1..=100, an insert now and then, until
/// `stop`.
async fn workload(pg: Arc<PgServer>, db: String, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    let c = pg.superuser_client(&db).await.unwrap();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut sql = String::from("BEGIN;");
        for i in 0..3 {
            let id = 1 + ((x >> (i * 8)) % 100) as i64;
            sql.push_str(&format!("UPDATE acct SET v = v + 1 WHERE id = {id};"));
        }
        if x % 5 == 0 {
            // Above the fixture's ids, and above what an earlier writer inserted.
            sql.push_str(
                "INSERT INTO acct SELECT greatest(max(id), 10000000) + 1, 0, 'w' FROM acct;",
            );
        }
        sql.push_str("COMMIT;");
        c.batch_execute(&sql).await.unwrap();
        done.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

/// A running [`workload`]; [`Writer::finish`] stops it and returns its commit count.
struct Writer {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    fn start(pg: &Arc<PgServer>, db: &str) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(workload(
            pg.clone(),
            db.to_string(),
            stop.clone(),
            done.clone(),
        ));
        Writer { stop, done, task }
    }

    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        self.done.load(Ordering::Relaxed)
    }
}

/// Waits until the connector's gauges say a snapshot runs and has read at least `rows`
/// rows (and not all of them); then SIGKILLs it. Returns the rows read at the kill.
async fn kill_inside_snapshot(c: &mut Connector, rows: f64, total: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        c.assert_running();
        if let Some(m) = admin_metrics(c) {
            let running = gauge(&m, "cdc_snapshot_running") == Some(1.0);
            let read = gauge(&m, "cdc_snapshot_rows").unwrap_or(0.0);
            if running && read >= rows {
                assert!(
                    read < total,
                    "the snapshot had read every row before the kill ({read})"
                );
                c.kill();
                return read;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot in progress seen\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slot_lost_while_running_resnapshots_by_itself_and_deletes_what_is_gone() {
    let pg = small_wal_keep_server();
    let db = setup_acct(&pg, 40).await;
    let (_dir, mut c) = temp_connector(&pg, &db, &["public.acct"], WHEN_NEEDED);
    c.start();
    pg.execute(&db, "UPDATE acct SET v = 1 WHERE id BETWEEN 1 AND 5;")
        .await
        .unwrap();
    converge_view(&pg, &db, &c, Duration::from_secs(30)).await;

    // A stalled connector: the server terminates its walsender and invalidates the slot.
    let pid = c.child.as_ref().unwrap().id() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    invalidate_slot(&pg, &db).await;
    // Changes nobody can stream any more: the slot is lost.
    pg.execute(
        &db,
        "DELETE FROM acct WHERE id IN (2, 4, 10, 11);
         UPDATE acct SET v = 9 WHERE id = 20;
         INSERT INTO acct VALUES (41, 7, 'while lost');",
    )
    .await
    .unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);

    // By itself: a new slot, a new snapshot, the deletes; the same process throughout.
    let recs = converge_view(&pg, &db, &c, Duration::from_secs(60)).await;
    c.assert_running();
    assert_eq!(c.starts, 1, "no manual restart");
    for (id, v) in [(2, 1), (4, 1), (10, 0), (11, 0)] {
        assert_deleted(&recs, id, v);
    }
    let out = c.output();
    assert_mentions(
        &out,
        &["dropping the existing slot", "re-snapshot reconciled"],
    );
    let st = slot_wal_status(&pg, &db).await;
    assert!(
        matches!(st.as_deref(), Some("reserved" | "extended")),
        "new slot's wal_status {st:?}"
    );

    // And it streams on from the new slot.
    pg.execute(
        &db,
        "INSERT INTO acct VALUES (42, 1, 'after'); DELETE FROM acct WHERE id = 3; UPDATE acct SET v = v + 1 WHERE id = 41;",
    )
    .await
    .unwrap();
    converge_view(&pg, &db, &c, Duration::from_secs(30)).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    check_histories(&read_acct(&c)).unwrap();
}

/// The `id` of an Avro-encoded `acct` key (the Confluent frame, then the `int` field).
fn avro_key_id(key: &[u8]) -> i64 {
    let mut z: u64 = 0;
    for (i, b) in key[5..].iter().enumerate() {
        z |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            break;
        }
    }
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

#[tokio::test(flavor = "multi_thread")]
async fn slot_lost_with_avro_values_gets_avro_delete_records() {
    let pg = small_wal_keep_server();
    let db = setup_acct(&pg, 20).await;
    let extra = format!("{WHEN_NEEDED}\n[format]\nvalue = \"avro\"\n");
    let (_dir, mut c) = temp_connector(&pg, &db, &["public.acct"], &extra);
    c.start();
    c.wait_records(ACCT_TOPIC, 20, Duration::from_secs(30))
        .await;
    let pid = c.child.as_ref().unwrap().id() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    invalidate_slot(&pg, &db).await;
    pg.execute(&db, "DELETE FROM acct WHERE id IN (3, 5, 8);")
        .await
        .unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    // 20 snapshot reads, 17 re-reads, 3 × (delete + tombstone).
    c.wait_records(ACCT_TOPIC, 20 + 17 + 6, Duration::from_secs(60))
        .await;
    c.assert_running();
    let addr = admin_addr(&c).unwrap();
    let log = Log::open_read_only(c.log_dir()).unwrap();
    let mut per_key: BTreeMap<i64, Vec<Option<Vec<u8>>>> = BTreeMap::new();
    for p in 0..3 {
        let mut r = log.reader(ACCT_TOPIC, p, StartAt::Earliest).unwrap();
        while r
            .poll_with(1 << 20, |rec| {
                per_key
                    .entry(avro_key_id(rec.key.unwrap()))
                    .or_default()
                    .push(rec.value.map(<[u8]>::to_vec))
            })
            .unwrap()
            > 0
        {}
    }
    assert_eq!(per_key.len(), 20);
    for (id, values) in &per_key {
        let n = values.len();
        if ![3, 5, 8].contains(id) {
            assert_eq!(n, 2, "key {id}: read twice");
            continue;
        }
        assert_eq!(n, 3, "key {id}: read, delete, tombstone");
        assert!(values[2].is_none(), "key {id}: a tombstone last");
        let d = values[1].as_ref().expect("a delete record");
        let schema_id = cdc_schemas::encode::redelete::avro_schema_id(d).unwrap();
        let (status, body) = http(&addr, "GET", &format!("/schemas/ids/{schema_id}"), None, "");
        assert_eq!(status, 200, "{body}");
        let w = WriterSchema::parse(body["schema"].as_str().unwrap()).unwrap();
        assert!(
            w.is_delete(&d[5..]).unwrap(),
            "key {id}: an Avro delete envelope"
        );
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_inside_a_snapshot_and_a_re_snapshot_loses_nothing() {
    let pg = Arc::new(small_wal_keep_server());
    let rows = 300_000i64;
    let db = setup_acct(&pg, rows).await;
    let (mut dir, mut c) = temp_connector(&pg, &db, &["public.acct"], WHEN_NEEDED);
    dir.disable_cleanup(true);
    eprintln!(
        "connector dir (kept if this test fails): {}",
        dir.path().display()
    );

    // The initial snapshot, killed inside, under a running workload.
    let w = Writer::start(&pg, &db);
    c.start();
    let read = kill_inside_snapshot(&mut c, rows as f64 * 0.2, rows as f64).await;
    eprintln!("killed inside the initial snapshot after {read} rows");
    c.start();
    converge_after(&pg, &db, &c, w).await;

    // A re-snapshot (the slot lost while stopped, rows deleted meanwhile), killed inside.
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    pg.execute(
        &db,
        "DELETE FROM acct WHERE id % 10000 = 7 OR id IN (1, 2, 3);",
    )
    .await
    .unwrap();
    invalidate_slot(&pg, &db).await;
    let w = Writer::start(&pg, &db);
    c.start();
    let read = kill_inside_snapshot(&mut c, rows as f64 * 0.2, rows as f64).await;
    eprintln!("killed inside the re-snapshot after {read} rows");
    c.start();
    let recs = converge_after(&pg, &db, &c, w).await;
    let deleted: Vec<i64> = (0..rows / 10000)
        .map(|k| k * 10000 + 7)
        .chain([1, 2, 3])
        .collect();
    for id in deleted {
        let h = history(&recs, id);
        // The last known value is what the log held: 0, or what the workload made it.
        let last_v = h
            .iter()
            .rev()
            .find_map(|r| r.value.as_ref().and_then(|v| v.after.as_ref()).map(|a| a.v))
            .unwrap();
        assert_deleted(&recs, id, last_v);
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    dir.disable_cleanup(false);
}

/// Stops the workload, waits until the view equals the table, checks every history;
/// returns the records.
async fn converge_after(pg: &PgServer, db: &str, c: &Connector, w: Writer) -> Vec<AcctRec> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let commits = w.finish().await;
    // Cheaply first (decoding the whole log is slow): until the log's checkpoint passes
    // the WAL written so far (the connector's heartbeats move it on a quiet database).
    let target: Lsn = pg
        .superuser_client(db)
        .await
        .unwrap()
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    while checkpoint_position(c).is_none_or(|p| p.lsn < target) {
        assert!(
            Instant::now() < deadline,
            "the log's checkpoint did not reach {target}\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let recs = converge_view(pg, db, c, Duration::from_secs(60)).await;
    let n = check_histories(&recs).unwrap_or_else(|e| panic!("{e}\nkept in {}", c.dir.display()));
    eprintln!("{commits} transactions committed meanwhile; {n} change records checked");
    for what in ["snapshot read every table", "re-snapshot reconciled"] {
        if let Some(l) = c.output().lines().rfind(|l| l.contains(what)) {
            eprintln!("{l}");
        }
    }
    recs
}

/// The log's durable checkpoint, when it is a Postgres position (not an unfinished
/// snapshot).
fn checkpoint_position(c: &Connector) -> Option<PgPosition> {
    let log = Log::open_read_only(c.log_dir()).ok()?;
    match Checkpoint::from_bytes(&log.checkpoint()?).unwrap() {
        Checkpoint::At(SourcePosition::Postgres(p)) => Some(p),
        _ => None,
    }
}

/// The log's durable checkpoint: its Postgres position's LSN as text.
fn checkpoint_lsn(c: &Connector) -> String {
    checkpoint_position(c)
        .expect("a Postgres position as the checkpoint")
        .lsn
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_confirms_exactly_the_durable_position() {
    // A server of its own: no other test's WAL moves the walsender's position.
    let pg = Arc::new(small_wal_keep_server());
    let (db, _dir, mut c) = running_acct(&pg, 100, &["public.acct"]).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    for round in 0..3 {
        let w = Writer::start(&pg, &db);
        c.start();
        tokio::time::sleep(Duration::from_millis(1500 + 500 * round)).await;
        // SIGTERM while transactions keep committing.
        assert_eq!(c.stop(), Some(0), "{}", c.output());
        w.finish().await;
        let durable = checkpoint_lsn(&c);
        let confirmed = confirmed_flush_lsn(&pg, &db).await.expect("the slot");
        assert_eq!(
            confirmed, durable,
            "round {round}: the slot confirms {confirmed}, the log's checkpoint is at {durable}\n{}",
            c.output()
        );
    }
    // Nothing committed was lost across the stops.
    c.start();
    converge_view(&pg, &db, &c, Duration::from_secs(60)).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    check_histories(&read_acct(&c)).unwrap();
}
