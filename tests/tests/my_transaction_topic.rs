//! `format.provide_transaction_metadata` end to end on a MariaDB source, through the
//! shipped CLI (`cdc-e2e run --config …`) into the embedded log — the MySQL counterpart
//! of `pg_transaction_topic.rs`. With the key on, every binlog transaction that changed a
//! captured table has one BEGIN and one END record on `t.transaction` (one partition),
//! whose id is the transaction's GTID (the server's `@@last_gtid` for the session that
//! committed it) and its change records' `transaction.id`, and whose END counts per table
//! are those change records (a key change counts twice; a transaction in chunks of
//! `max_batch_events` gets one pair, also one whose last chunk is exactly full; an XA
//! transaction gets its pair at its `XA PREPARE`, its `XA COMMIT` none). Snapshot rows,
//! transactions that changed no captured table, and DDL get none; with the key off no
//! such topic is written. SIGKILLed at random moments while transactions (some in
//! chunks, some changing keys, some across both tables) stream, it still writes exactly
//! one pair per committed transaction, with its GTID and exact counts.
//!
//! `CDC_TEST_KILLS` sets the number of SIGKILL/restart cycles (default 4).

mod golden_tx;
mod my_source_util;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::MariaDbServer;
use my_source_util::*;
use mysql_async::prelude::Queryable;
use serde_json::{json, Value as Json};

const TX_TOPIC: &str = "t.transaction";
const ON: &str = "\n[format]\nprovide_transaction_metadata = true\n";
const T: Duration = Duration::from_secs(60);

/// `(from, 0, 'pad'), …, (to, 0, 'pad')`: rows of `acct` / `other`.
fn rows(from: i64, to: i64, pad: &str) -> String {
    (from..=to)
        .map(|i| format!("({i}, 0, '{pad}')"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A fresh database: `acct` (20 rows) and `other` (1 row) captured, `ignored` not.
async fn setup(my: &MariaDbServer) -> String {
    let db = my.create_database().await.unwrap();
    my.execute(&format!(
        "CREATE TABLE {db}.acct (id int PRIMARY KEY, v bigint NOT NULL, pad varchar(50)) ENGINE=InnoDB;
         CREATE TABLE {db}.other (id int PRIMARY KEY, v bigint NOT NULL, pad varchar(50)) ENGINE=InnoDB;
         CREATE TABLE {db}.ignored (id int PRIMARY KEY) ENGINE=InnoDB;
         INSERT INTO {db}.acct VALUES {};
         INSERT INTO {db}.other VALUES (1, 0, 'o');",
        rows(1, 20, "x")
    ))
    .await
    .unwrap();
    db
}

/// A connector capturing `acct` and `other` with chunks of 50 events; `extra` appended.
fn connector(my: &MariaDbServer, db: &str, extra: &str) -> (tempfile::TempDir, Connector) {
    let (dir, c) = temp_connector_tables(my, db, &["acct", "other"], extra);
    c.source_key("max_batch_events = 50");
    (dir, c)
}

/// Runs `sql` (one or more statements) on `conn`; the GTID of the session's last
/// transaction after it.
async fn commit(conn: &mut mysql_async::Conn, sql: &str) -> String {
    conn.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let gtid: Option<String> = conn.query_first("SELECT @@last_gtid").await.unwrap();
    gtid.filter(|g| !g.is_empty()).expect("a GTID")
}

/// Both change topics' and the transaction topic's records, by topic.
fn topics(c: &Connector, db: &str) -> BTreeMap<String, Vec<cdc_harness::golden::Record>> {
    [
        format!("t.{db}.acct"),
        format!("t.{db}.other"),
        TX_TOPIC.into(),
    ]
    .into_iter()
    .map(|t| {
        let recs = cdc_harness::golden::read_topic(&c.log_dir(), &t);
        (t, recs)
    })
    .collect()
}

/// A MySQL change record's data collection: `db.table`.
fn collection(_topic: &str, p: &Json) -> String {
    format!(
        "{}.{}",
        p["source"]["db"].as_str().unwrap_or_default(),
        p["source"]["table"].as_str().unwrap_or_default()
    )
}

/// Checks the transaction topic against the change records (`golden_tx`: alternation,
/// ids, exact counts, every transaction of a change record has its END); panics with
/// what differs.
fn check_consistent(what: &str, got: &BTreeMap<String, Vec<cdc_harness::golden::Record>>) {
    let mut cmp = cdc_harness::golden::Comparison::new(&[]);
    golden_tx::check_consistent(what, got, TX_TOPIC, collection, &mut cmp);
    cmp.finish([], Instant::now());
}

#[tokio::test(flavor = "multi_thread")]
async fn begin_and_end_per_binlog_transaction_only_when_on() {
    let my = MariaDbServer::shared();
    let db = setup(my).await;
    let (_on_dir, mut on) = connector(my, &db, ON);
    // The default is off: the key is not given.
    let (_off_dir, mut off) = connector(my, &db, "");
    on.start();
    off.start();
    for c in [&mut on, &mut off] {
        c.converge(my, &db, T).await;
        c.wait_streaming(T).await;
    }

    let (acct, other) = (format!("{db}.acct"), format!("{db}.other"));
    let mut conn = my.root_conn().await.unwrap();
    // Per transaction that changed a captured table: its GTID and END's counts.
    let mut want: Vec<(String, Vec<(&str, u64)>)> = Vec::new();
    let sql = format!(
        "START TRANSACTION; INSERT INTO {db}.acct VALUES {}; INSERT INTO {db}.other VALUES (2, 1, 'b'); COMMIT;",
        rows(100, 101, "a")
    );
    want.push((
        commit(&mut conn, &sql).await,
        vec![(acct.as_str(), 2), (other.as_str(), 1)],
    ));
    // A key change: a delete and a create.
    let sql = format!("UPDATE {db}.acct SET id = 1000 WHERE id = 1");
    want.push((commit(&mut conn, &sql).await, vec![(acct.as_str(), 2)]));
    // 320 rows in four statements (four rows events): a chunk goes to the pipeline after
    // each rows event that brings the transaction to 50 events or more, so three chunks
    // of 100 before the commit's batch of 20; one pair.
    let sql = format!(
        "START TRANSACTION; INSERT INTO {db}.acct VALUES {}; INSERT INTO {db}.acct VALUES {}; INSERT INTO {db}.acct VALUES {}; INSERT INTO {db}.acct VALUES {}; COMMIT;",
        rows(200, 299, "big"),
        rows(300, 399, "big"),
        rows(400, 499, "big"),
        rows(500, 519, "big")
    );
    want.push((commit(&mut conn, &sql).await, vec![(acct.as_str(), 320)]));
    // 50 rows in one rows event: the chunk is full and goes out without the commit,
    // which then comes in a batch of no events: still one pair, with its 50.
    let sql = format!("INSERT INTO {db}.acct VALUES {}", rows(600, 649, "fifty"));
    want.push((commit(&mut conn, &sql).await, vec![(acct.as_str(), 50)]));
    // Nothing captured: a GTID, no pair.
    commit(&mut conn, &format!("INSERT INTO {db}.ignored VALUES (1)")).await;
    // Only what is captured is counted.
    let sql = format!(
        "START TRANSACTION; INSERT INTO {db}.ignored VALUES (2); UPDATE {db}.other SET v = v + 1 WHERE id = 1; COMMIT;"
    );
    want.push((commit(&mut conn, &sql).await, vec![(other.as_str(), 1)]));
    // DDL: no pair; the changes after it are counted under the new schema.
    commit(
        &mut conn,
        &format!("ALTER TABLE {db}.other ADD COLUMN note varchar(10)"),
    )
    .await;
    let sql = format!(
        "START TRANSACTION; INSERT INTO {db}.other VALUES (3, 0, 'c', 'n'); DELETE FROM {db}.acct WHERE id = 5; COMMIT;"
    );
    want.push((
        commit(&mut conn, &sql).await,
        vec![(other.as_str(), 1), (acct.as_str(), 1)],
    ));
    // XA: the changes go out at the prepare, under its GTID; the XA COMMIT's group
    // changes no row.
    let sql = format!(
        "XA START 'x1'; DELETE FROM {db}.acct WHERE id IN (2, 3, 4); XA END 'x1'; XA PREPARE 'x1';"
    );
    want.push((commit(&mut conn, &sql).await, vec![(acct.as_str(), 3)]));
    commit(&mut conn, "XA COMMIT 'x1'").await;
    // A transaction after all of them: once its pair is in, every earlier one's is.
    let sql = format!("UPDATE {db}.acct SET v = v + 1 WHERE id = 6");
    want.push((commit(&mut conn, &sql).await, vec![(acct.as_str(), 1)]));
    let _ = conn.disconnect().await;

    let n = want.len() as u64;
    if !wait_topic_len(&on.log_dir(), TX_TOPIC, 2 * n, T).await {
        let recs: Vec<_> = read_topic(&on.log_dir(), TX_TOPIC)
            .into_iter()
            .map(|r| r.value)
            .collect();
        panic!("{recs:#?}\n{}", on.output());
    }
    for c in [&mut on, &mut off] {
        c.converge(my, &db, T).await;
    }
    // The other table's last change is in the log too (`off` has no END to wait for).
    let (off_log, other_topic) = (off.log_dir(), format!("t.{db}.other"));
    off.wait_until(T, |_| {
        read_topic(&off_log, &other_topic)
            .iter()
            .any(|r| r.value.as_ref().is_some_and(|v| v["after"]["id"] == 3))
    })
    .await;
    assert_eq!(on.stop(), Some(0), "{}", on.output());
    assert_eq!(off.stop(), Some(0), "{}", off.output());

    let got = topics(&on, &db);
    let recs = &got[TX_TOPIC];
    assert_eq!(recs.len() as u64, 2 * n, "{recs:#?}");
    assert!(read_topic(&on.log_dir(), TX_TOPIC)
        .iter()
        .all(|r| r.partition == 0));
    check_consistent("on", &got);
    let snapshot_with_block = got
        .values()
        .flatten()
        .filter_map(|r| r.value.as_ref())
        .filter(|v| v["op"] == "r" && !v["transaction"].is_null())
        .count();
    assert_eq!(
        snapshot_with_block, 0,
        "snapshot rows are in no transaction"
    );
    for (pair, (gtid, counts)) in recs.chunks(2).zip(&want) {
        let (b, e) = (
            pair[0].value.as_ref().unwrap(),
            pair[1].value.as_ref().unwrap(),
        );
        assert_eq!(
            (&b["status"], &b["id"]),
            (&json!("BEGIN"), &json!(gtid)),
            "{b}"
        );
        assert_eq!(
            (&b["event_count"], &b["data_collections"]),
            (&Json::Null, &Json::Null)
        );
        assert_eq!(
            (&e["status"], &e["id"]),
            (&json!("END"), &json!(gtid)),
            "{e}"
        );
        let dcs: Vec<Json> = counts
            .iter()
            .map(|(c, n)| json!({"data_collection": c, "event_count": n}))
            .collect();
        assert_eq!(e["data_collections"], json!(dcs), "{e}");
        assert_eq!(
            e["event_count"].as_u64(),
            Some(counts.iter().map(|(_, n)| n).sum())
        );
    }

    // Off: the same change records (with their `transaction` blocks), no transaction topic.
    let ids = |got: &BTreeMap<String, Vec<cdc_harness::golden::Record>>| {
        let mut ids: Vec<String> = got
            .iter()
            .filter(|(t, _)| *t != TX_TOPIC)
            .flat_map(|(_, recs)| recs)
            .filter_map(|r| {
                r.value.as_ref()?["transaction"]["id"]
                    .as_str()
                    .map(String::from)
            })
            .collect();
        ids.sort();
        ids.dedup();
        ids
    };
    let off_got = topics(&off, &db);
    assert_eq!(ids(&off_got), ids(&got));
    let log = cdc_log::Log::open_read_only(off.log_dir()).unwrap();
    assert!(
        !log.topics().iter().any(|t| t == TX_TOPIC),
        "{:?}",
        log.topics()
    );
}

/// Transactions on one session until `stop`: 1 to 120 inserted rows of `acct` (more than
/// a 50-event chunk in about half of them), an update, every fifth a key change, every
/// third a change of `other`. Returns each committed transaction's GTID, in commit order.
async fn workload(my: &'static MariaDbServer, db: String, stop: Arc<AtomicBool>) -> Vec<String> {
    let mut conn = my.root_conn().await.unwrap();
    let mut rng = Rng(0x2545f4914f6cdd1d);
    let mut next = 1000i64;
    let mut gtids = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let x = rng.next();
        let n = 1 + (x % 120) as i64;
        let mut sql = format!(
            "START TRANSACTION; INSERT INTO {db}.acct VALUES {}; UPDATE {db}.acct SET v = v + 1 WHERE id = {};",
            rows(next, next + n - 1, "w"),
            1 + (x >> 8) % 20
        );
        if x % 5 == 0 {
            sql.push_str(&format!(
                "UPDATE {db}.acct SET id = id + 1000000 WHERE id = {next};"
            ));
        }
        if x % 3 == 0 {
            sql.push_str(&format!("UPDATE {db}.other SET v = v + 1 WHERE id = 1;"));
        }
        sql.push_str("COMMIT;");
        // Only the connector is killed: every transaction commits.
        gtids.push(commit(&mut conn, &sql).await);
        next += n;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = conn.disconnect().await;
    gtids
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_leaves_one_whole_pair_per_transaction() {
    let kills: u32 = std::env::var("CDC_TEST_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let my = MariaDbServer::shared();
    let db = setup(my).await;
    let (_dir, mut c) = connector(my, &db, ON);
    c.start();
    c.converge(my, &db, T).await;
    let stop = Arc::new(AtomicBool::new(false));
    let w = tokio::spawn(workload(my, db.clone(), stop.clone()));
    let mut rng = Rng(88172645463325252);
    for i in 0..kills {
        if i > 0 {
            c.start();
        }
        tokio::time::sleep(Duration::from_millis(300 + rng.next() % 1200)).await;
        c.assert_running();
        c.kill();
    }
    stop.store(true, Ordering::Relaxed);
    let gtids = w.await.unwrap();
    c.start();
    c.converge(my, &db, T).await;
    // Every transaction's pair is in (the last one's END is durable with its changes).
    let want = 2 * gtids.len() as u64;
    if !wait_topic_len(&c.log_dir(), TX_TOPIC, want, T).await {
        panic!(
            "{} transaction records, {want} wanted\n{}",
            topic_len(&c.log_dir(), TX_TOPIC),
            c.output()
        );
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let got = topics(&c, &db);
    assert_eq!(
        got[TX_TOPIC].len() as u64,
        want,
        "one pair per committed transaction"
    );
    check_consistent("sigkill", &got);
    let ends: Vec<&str> = got[TX_TOPIC]
        .iter()
        .filter_map(|r| r.value.as_ref())
        .filter(|v| v["status"] == "END")
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ends, gtids,
        "the pairs are the transactions, in commit order"
    );
    eprintln!(
        "{kills} SIGKILLs, {} transactions, {} transaction records checked",
        gtids.len(),
        got[TX_TOPIC].len()
    );
}

/// Waits (cheaply, without decoding records) until `topic` holds at least `n` records.
async fn wait_topic_len(log_dir: &std::path::Path, topic: &str, n: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while topic_len(log_dir, topic) < n {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    true
}
