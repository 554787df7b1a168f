//! The Postgres source end to end, through the shipped CLI (`cdc-e2e run --config …`) into
//! the embedded log: streaming, snapshot + concurrent writes with 1/4/8 snapshot
//! connections, SIGKILL crash safety (exactly once, commit order per key), Postgres
//! restarted mid-stream.
//!
//! `CDC_TEST_KILLS` sets the number of SIGKILL/restart cycles of the crash test (default 20).

mod pg_source_util;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdc_harness::PgServer;
use pg_source_util::*;
use serde_json::Value as Json;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Random transactions: updates (v = v + 1), inserts of new ids, deletes. Returns the
/// number of committed transactions when `stop` is set.
async fn workload(
    pg: &'static PgServer,
    db: String,
    first_id: i64,
    stop: Arc<AtomicBool>,
    seed: u64,
    done: Arc<AtomicU64>,
) {
    let mut rng = Rng(seed | 1);
    let mut next_id = first_id;
    let mut c = pg.superuser_client(&db).await.unwrap();
    while !stop.load(Ordering::Relaxed) {
        let mut sql = String::from("BEGIN;");
        for _ in 0..(1 + rng.next() % 4) {
            let id = 1 + (rng.next() % next_id as u64) as i64;
            sql.push_str(&format!("UPDATE acct SET v = v + 1 WHERE id = {id};"));
        }
        if rng.next() % 3 == 0 {
            next_id += 1;
            sql.push_str(&format!("INSERT INTO acct VALUES ({next_id}, 0, 'new');"));
        }
        if rng.next() % 7 == 0 {
            let id = 1 + (rng.next() % next_id as u64) as i64;
            sql.push_str(&format!("DELETE FROM acct WHERE id = {id};"));
        }
        sql.push_str("COMMIT;");
        match c.batch_execute(&sql).await {
            Ok(()) => {
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                // The server restarted: reconnect (the transaction did not commit).
                let _ = c.batch_execute("ROLLBACK").await;
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Ok(n) = pg.superuser_client(&db).await {
                    c = n;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Every key's history in the log is a valid sequence: a snapshot read (re)sets it, a
/// create starts it, each update adds exactly 1 to v, a delete ends it — so no change is
/// duplicated or missing and they are in commit order.
fn check_histories(recs: &[Rec]) -> Result<usize, String> {
    let mut state: HashMap<String, Option<i64>> = HashMap::new();
    let mut n = 0;
    for r in recs {
        let (Some(k), Some(v)) = (&r.key, &r.value) else {
            continue;
        };
        let key = k.to_string();
        let op = v["op"].as_str().unwrap();
        let after = v["after"]["v"].as_i64();
        let cur = state.get(&key).copied().flatten();
        n += 1;
        match op {
            "r" => {
                state.insert(key, after);
            }
            "c" => {
                if cur.is_some() {
                    return Err(format!(
                        "create of existing key {key} at {}:{}",
                        r.partition, r.offset
                    ));
                }
                state.insert(key, after);
            }
            "u" => {
                if cur.map(|c| c + 1) != after {
                    return Err(format!(
                        "key {key} at {}:{}: update to v={after:?} after v={cur:?} (duplicate or missing change)",
                        r.partition, r.offset
                    ));
                }
                state.insert(key, after);
            }
            "d" => {
                if cur.is_none() {
                    return Err(format!(
                        "delete of absent key {key} at {}:{}",
                        r.partition, r.offset
                    ));
                }
                state.insert(key, None);
            }
            other => return Err(format!("unexpected op {other}")),
        }
    }
    Ok(n)
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_changes_and_stops_cleanly() {
    let pg = PgServer::shared();
    let db = setup_acct(pg, 10).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = connector(pg, &db, dir.path(), &["public.acct"], "");
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;
    pg.execute(
        &db,
        "BEGIN; INSERT INTO acct VALUES (100, 5, 'a'); UPDATE acct SET v = 1 WHERE id = 1; DELETE FROM acct WHERE id = 2; COMMIT;
         UPDATE acct SET id = 200 WHERE id = 3;",
    )
    .await
    .unwrap();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    let ops: Vec<&str> = recs
        .iter()
        .filter_map(|r| r.value.as_ref().map(|v| v["op"].as_str().unwrap()))
        .collect();
    assert_eq!(ops.iter().filter(|o| **o == "r").count(), 10, "{ops:?}");
    let v = recs
        .iter()
        .filter_map(|r| r.value.as_ref())
        .find(|v| v["op"] == "c" && v["after"]["id"] == 100)
        .unwrap();
    assert_eq!(v["source"]["table"], "acct");
    assert_eq!(v["source"]["connector"], "postgresql");
    assert!(v["source"]["ts_ms"].as_i64().unwrap() > 1_600_000_000_000);
    // Tombstones follow deletes; the key change is delete + tombstone + create.
    assert!(recs.iter().any(|r| r.value.is_none()));
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    // Restart: nothing is emitted twice.
    let before = read_topic(&c.log_dir(), ACCT_TOPIC).len();
    c.start();
    pg.execute(&db, "UPDATE acct SET v = v + 1 WHERE id = 1")
        .await
        .unwrap();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;
    assert_eq!(read_topic(&c.log_dir(), ACCT_TOPIC).len(), before + 1);
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_at_random_moments_loses_and_duplicates_nothing() {
    let kills: u32 = std::env::var("CDC_TEST_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let pg = PgServer::shared();
    let db = setup_acct(pg, 200).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = connector(pg, &db, dir.path(), &["public.acct"], "");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let w = tokio::spawn(workload(
        pg,
        db.clone(),
        200,
        stop.clone(),
        0x9e3779b97f4a7c15,
        done.clone(),
    ));
    let mut rng = Rng(12345);
    for _ in 0..kills {
        c.start();
        let ms = 200 + rng.next() % 1300;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        c.assert_running();
        c.kill();
    }
    stop.store(true, Ordering::Relaxed);
    w.await.unwrap();
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    let n = check_histories(&recs).unwrap_or_else(|e| panic!("{e}"));
    drop_slot(pg, &db).await;
    eprintln!(
        "{kills} SIGKILLs, {} transactions committed, {n} change records checked",
        done.load(Ordering::Relaxed)
    );
}

async fn snapshot_with_concurrent_writes(connections: usize) {
    let pg = PgServer::shared();
    let db = setup_acct(pg, 30_000).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = connector(
        pg,
        &db,
        dir.path(),
        &["public.acct"],
        &format!("[snapshot]\nconnections = {connections}\nchunk_pages = 16\n"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let w = tokio::spawn(workload(
        pg,
        db.clone(),
        30_000,
        stop.clone(),
        77 + connections as u64,
        done.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.start();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    w.await.unwrap();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    check_histories(&recs).unwrap_or_else(|e| panic!("{e}"));
    drop_slot(pg, &db).await;
    let reads = recs
        .iter()
        .filter(|r| r.value.as_ref().map(|v| v["op"] == "r").unwrap_or(false))
        .count();
    assert!(reads >= 29_000, "{reads} snapshot records");
    let markers: Vec<Json> = recs
        .iter()
        .filter_map(|r| r.value.as_ref())
        .filter(|v| v["op"] == "r")
        .map(|v| v["source"]["snapshot"].clone())
        .filter(|m| m != "true")
        .collect();
    assert!(
        markers.contains(&Json::from("first_in_data_collection")),
        "{markers:?}"
    );
    assert!(
        markers.contains(&Json::from("last_in_data_collection")),
        "{markers:?}"
    );
    eprintln!(
        "{connections} connections: {reads} snapshot rows, {} concurrent transactions",
        done.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_consistent_with_concurrent_writes_1_connection() {
    snapshot_with_concurrent_writes(1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_consistent_with_concurrent_writes_4_connections() {
    snapshot_with_concurrent_writes(4).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_consistent_with_concurrent_writes_8_connections() {
    snapshot_with_concurrent_writes(8).await;
}
