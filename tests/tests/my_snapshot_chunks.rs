//! The MySQL / MariaDB snapshot in primary-key chunks over several connections, through
//! the shipped CLI on a real MariaDB: under concurrent writes it hands off to the stream
//! without losing or duplicating a change (also when killed mid-snapshot), and tables
//! without a key, with a composite key, and larger than one chunk are read exactly once.
//! `[snapshot] connections` and `chunk_rows` are seen to take effect in the connector's log.

mod my_source_util;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdc_harness::MariaDbServer;
use my_source_util::*;
use mysql_async::prelude::Queryable;
use serde_json::Value as Json;

const T: Duration = Duration::from_secs(120);

/// The `key=value` field of the connector's "snapshot started" lines, one per snapshot.
fn started_field(c: &Connector, key: &str) -> Vec<u64> {
    // JSON lines: the log file is not a terminal.
    let log = std::fs::read_to_string(c.dir.join("connector.log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("snapshot started"))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?[key].as_u64())
        .collect()
}

/// `db.acct` with ids 1..=rows (v = 0), statistics fresh so the row estimate is close.
async fn big_acct(my: &MariaDbServer, rows: u64) -> String {
    let db = setup_acct(my, 0).await;
    my.execute(&format!(
        "INSERT INTO {db}.acct SELECT seq, 0, 'x' FROM {db}.seq_1_to_{rows}; ANALYZE TABLE {db}.acct;"
    ))
    .await
    .unwrap();
    db
}

fn spawn_writers(
    my: &'static MariaDbServer,
    db: &str,
    rows: i64,
    n: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..n)
        .map(|i| {
            tokio::spawn(workload(
                my,
                db.to_string(),
                rows + 1_000_000 * i as i64,
                stop.clone(),
                11 + i as u64,
                0,
            ))
        })
        .collect()
}

async fn stop_writers(stop: &Arc<AtomicBool>, w: Vec<tokio::task::JoinHandle<u64>>) -> u64 {
    stop.store(true, Ordering::Relaxed);
    let mut n = 0;
    for w in w {
        n += w.await.unwrap();
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_chunks_under_concurrent_writes_equal_the_table() {
    let my = MariaDbServer::shared();
    let db = big_acct(my, 40_000).await;
    let (_dir, mut c) = temp_connector(my, &db, "[snapshot]\nconnections = 3\nchunk_rows = 2000\n");
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(my, &db, 40_000, 2, &stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.start();
    c.wait_streaming(T).await;
    // Writes go on across the hand-off, then stop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = stop_writers(&stop, writers).await;
    assert!(n > 0);
    c.converge(my, &db, T).await;
    let recs = c.records();
    check_histories(&recs).unwrap();
    // Three readers shared the snapshot, and the table was read in ~20 key ranges.
    assert_eq!(started_field(&c, "connections"), vec![3], "{}", c.output());
    let chunks = started_field(&c, "chunks");
    assert!(
        chunks.len() == 1 && chunks[0] >= 10,
        "{chunks:?}\n{}",
        c.output()
    );
    let reads = recs
        .iter()
        .filter(|r| r.value.as_ref().is_some_and(|v| v["op"] == "r"))
        .count();
    assert!(reads >= 40_000 - 2_000, "{reads}");
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_mid_snapshot_the_next_run_loses_and_duplicates_nothing() {
    let my = MariaDbServer::shared();
    let db = big_acct(my, 150_000).await;
    let (_dir, mut c) = temp_connector(my, &db, "[snapshot]\nconnections = 2\nchunk_rows = 5000\n");
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(my, &db, 150_000, 1, &stop);
    c.start();
    let deadline = std::time::Instant::now() + T;
    while topic_len(&c.log_dir(), &c.topic) == 0 {
        c.assert_running();
        assert!(std::time::Instant::now() < deadline, "{}", c.output());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.start();
    c.wait_streaming(T).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop_writers(&stop, writers).await;
    c.converge(my, &db, T).await;
    check_histories(&c.records()).unwrap();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

/// Every record of `topic` is a snapshot read; returns key text → `after`, asserting that
/// no key was read twice.
fn reads_once(c: &Connector, topic: &str) -> BTreeMap<String, Json> {
    let mut out = BTreeMap::new();
    for r in read_topic(&c.log_dir(), topic) {
        let v = r.value.expect("no tombstones in a snapshot");
        assert_eq!(v["op"], "r", "{v}");
        let k = r
            .key
            .map(|k| k.to_string())
            .unwrap_or_else(|| v["after"].to_string());
        assert!(
            out.insert(k.clone(), v["after"].clone()).is_none(),
            "{k} read twice"
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn no_key_composite_key_and_many_chunks_each_row_once() {
    let my = MariaDbServer::shared();
    let db = my.create_database().await.unwrap();
    // `comp`: few distinct leading values, text with quotes and backslashes in the key,
    // so chunk boundaries fall inside a run of equal `a` and are written back as literals.
    my.execute(&format!(
        "CREATE TABLE {db}.nokey (a int, b varchar(20)) ENGINE=InnoDB;
         INSERT INTO {db}.nokey SELECT seq % 10, concat('n', seq) FROM {db}.seq_1_to_700;
         CREATE TABLE {db}.comp (a int NOT NULL, b varchar(30) NOT NULL, v bigint NOT NULL,
             PRIMARY KEY (a, b)) ENGINE=InnoDB DEFAULT CHARSET=latin1;
         INSERT INTO {db}.comp SELECT seq % 7, concat('k''', seq, '\\\\', char(228 using latin1)), seq
             FROM {db}.seq_1_to_3000;
         CREATE TABLE {db}.bin (id varbinary(8) PRIMARY KEY, v int NOT NULL) ENGINE=InnoDB;
         INSERT INTO {db}.bin SELECT unhex(lpad(hex(seq * 7919), 8, '0')), seq FROM {db}.seq_1_to_500;
         CREATE TABLE {db}.wide (id bigint unsigned PRIMARY KEY, v int NOT NULL) ENGINE=InnoDB;
         INSERT INTO {db}.wide SELECT seq * 1000003, seq FROM {db}.seq_1_to_2000;
         ANALYZE TABLE {db}.nokey, {db}.comp, {db}.bin, {db}.wide;"
    ))
    .await
    .unwrap();
    let (_dir, mut c) = temp_connector(
        my,
        &db,
        "[snapshot]\nmode = \"initial_only\"\nconnections = 2\nchunk_rows = 64\n",
    );
    let cfg = std::fs::read_to_string(&c.config).unwrap();
    std::fs::write(
        &c.config,
        cfg.replace(&format!("[\"{db}.acct\"]"), &format!("[\"{db}.*\"]")),
    )
    .unwrap();
    c.start();
    assert_eq!(
        c.wait_exit(T, "initial_only snapshot").await,
        Some(0),
        "{}",
        c.output()
    );

    let mut conn = my.root_conn().await.unwrap();
    let nokey = reads_once(&c, &format!("t.{db}.nokey"));
    assert_eq!(nokey.len(), 700);
    let comp = reads_once(&c, &format!("t.{db}.comp"));
    let want: Vec<(i32, String, i64)> = conn
        .query(format!("SELECT a, b, v FROM {db}.comp"))
        .await
        .unwrap();
    assert_eq!(comp.len(), want.len());
    for (a, b, v) in want {
        let k = serde_json::json!({ "a": a, "b": b }).to_string();
        assert_eq!(
            comp.get(&k),
            Some(&serde_json::json!({ "a": a, "b": b, "v": v })),
            "{k}"
        );
    }
    let bin = reads_once(&c, &format!("t.{db}.bin"));
    assert_eq!(bin.len(), 500);
    let wide = reads_once(&c, &format!("t.{db}.wide"));
    assert_eq!(wide.len(), 2000);
    let mut vs: Vec<i64> = wide.values().map(|a| a["v"].as_i64().unwrap()).collect();
    vs.sort();
    assert_eq!(vs, (1..=2000).collect::<Vec<_>>());
    // One chunk for the table without a key, many for the others: 700 / 64 would be 11.
    let chunks = started_field(&c, "chunks");
    assert!(
        chunks.len() == 1 && chunks[0] >= 1 + 40 + 5 + 10,
        "{chunks:?}\n{}",
        c.output()
    );
    let _ = conn.disconnect().await;
}
