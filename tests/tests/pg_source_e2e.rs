//! The Postgres source end to end, through the shipped CLI (`cdc-e2e run --config …`) into
//! the embedded log: streaming, snapshot + concurrent writes with 1/4/8 snapshot
//! connections, SIGKILL crash safety (exactly once, commit order per key), Postgres
//! restarted mid-stream.
//!
//! `CDC_TEST_KILLS` sets the number of SIGKILL/restart cycles of the crash test (default 20).

mod pg_source_util;

use std::collections::HashMap;
use std::time::Duration;

use cdc_harness::PgServer;
use pg_source_util::*;
use serde_json::Value as Json;

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
    let (db, _dir, mut c) = running_acct(pg, 10, &["public.acct"]).await;
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
    let (mut dir, mut c) = temp_connector(pg, &db, &["public.acct"], "");
    // A failure here is a lost or duplicated change: keep the connector's log and the
    // embedded log of every attempt for the post-mortem (removed below on success).
    dir.disable_cleanup(true);
    eprintln!(
        "connector dir (kept if this test fails): {}",
        dir.path().display()
    );
    let w = Running::start(pg, &db, 200, 0x9e3779b97f4a7c15);
    let mut rng = Rng(12345);
    let mut max_retained = 0i64;
    for _ in 0..kills {
        c.start();
        let ms = 200 + rng.next() % 1300;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        c.assert_running();
        c.kill();
        max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
    }
    let transactions = w.finish().await;
    let recovering = std::time::Instant::now();
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    let recovered = recovering.elapsed();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    let n = check_histories(&recs).unwrap_or_else(|e| {
        panic!(
            "{e}\nconnector log and embedded log kept in {}",
            c.dir.display()
        )
    });
    cdc_harness::faults::Run {
        scenario: "Postgres: SIGKILL of cdc run at random moments, restarted".into(),
        faults: kills.into(),
        transactions: Some(transactions),
        tally: tally(&recs),
        max_retained_wal_bytes: Some(max_retained),
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    drop_slot(pg, &db).await;
    dir.disable_cleanup(false);
    eprintln!(
        "{kills} SIGKILLs, {} transactions committed, {n} change records checked",
        transactions
    );
}

async fn snapshot_with_concurrent_writes(connections: usize) {
    let pg = PgServer::shared();
    let db = setup_acct(pg, 30_000).await;
    let (_dir, mut c) = temp_connector(
        pg,
        &db,
        &["public.acct"],
        &format!("[snapshot]\nconnections = {connections}\nchunk_pages = 16\n"),
    );
    let w = Running::start(pg, &db, 30_000, 77 + connections as u64);
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.start();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let transactions = w.finish().await;
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
    let mut markers: Vec<String> = recs
        .iter()
        .filter_map(|r| r.value.as_ref())
        .filter(|v| v["op"] == "r")
        .map(|v| v["source"]["snapshot"].as_str().unwrap_or("?").to_string())
        .filter(|m| m != "true")
        .collect();
    markers.sort();
    // One table: its first record is the snapshot's `first`, its last the snapshot's
    // `last` (Debezium's precedence over *_in_data_collection); pg_snapshot_markers.rs
    // checks the markers in detail.
    assert_eq!(markers, ["first", "last"], "{markers:?}");
    eprintln!(
        "{connections} connections: {reads} snapshot rows, {} concurrent transactions",
        transactions
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

/// Unchanged TOASTed values: the placeholder by default; the row's value with
/// `source.toast = "reselect"` (also for a table keyed by REPLICA IDENTITY FULL's primary
/// key, and after the row changed again).
#[tokio::test(flavor = "multi_thread")]
async fn unchanged_toast_is_a_placeholder_or_reselected() {
    let pg = PgServer::shared();
    for mode in ["placeholder", "reselect"] {
        let db = database_with(
            pg,
            "SET ROLE cdc;
             CREATE TABLE doc (id int PRIMARY KEY, n int, body text);
             ALTER TABLE doc ALTER COLUMN body SET STORAGE EXTERNAL;
             INSERT INTO doc SELECT g, 0, repeat(md5(g::text), 200) || 'it''s \\ end' FROM generate_series(1, 3) g;",
        )
        .await;
        let (_dir, mut c) = temp_connector(pg, &db, &["public.doc"], "");
        c.edit_config(|text| {
            text.replace(
                "heartbeat_interval_ms = 1000\n",
                &format!("heartbeat_interval_ms = 1000\ntoast = \"{mode}\"\n"),
            )
        });
        c.start();
        c.converge(pg, &db, "doc", "t.public.doc", Duration::from_secs(30))
            .await;
        pg.execute(
            &db,
            "UPDATE doc SET n = 1 WHERE id = 1;
             BEGIN; UPDATE doc SET n = 2 WHERE id = 2; DELETE FROM doc WHERE id = 2; COMMIT;",
        )
        .await
        .unwrap();
        let topic = "t.public.doc";
        c.wait_records(topic, 3 + 2 + 2, Duration::from_secs(30))
            .await;
        assert_eq!(c.stop(), Some(0), "{}", c.output());
        drop_slot(pg, &db).await;
        let values: Vec<Json> = read_topic(&c.log_dir(), topic)
            .into_iter()
            .filter_map(|r| r.value)
            .collect();
        let snap2 = values
            .iter()
            .find(|v| v["op"] == "r" && v["after"]["id"] == 2)
            .unwrap()["after"]["body"]
            .clone();
        let updates: Vec<Json> = values.into_iter().filter(|v| v["op"] == "u").collect();
        assert_eq!(updates.len(), 2, "{updates:?}");
        let u1 = updates.iter().find(|v| v["after"]["id"] == 1).unwrap();
        let u2 = updates.iter().find(|v| v["after"]["id"] == 2).unwrap();
        let full1: String = pg
            .superuser_client(&db)
            .await
            .unwrap()
            .query_one("SELECT body FROM doc WHERE id = 1", &[])
            .await
            .unwrap()
            .get(0);
        assert!(full1.ends_with("it's \\ end") && full1.len() > 6000);
        if mode == "placeholder" {
            assert_eq!(u1["after"]["body"], "__debezium_unavailable_value");
        } else {
            assert_eq!(u1["after"]["body"].as_str().unwrap(), full1);
            // Row 2 was deleted in the update's transaction: nothing to re-select, the
            // placeholder stays (Postgres 16 sends this value itself: then it is real).
            assert!(
                u2["after"]["body"] == "__debezium_unavailable_value"
                    || u2["after"]["body"] == snap2,
                "{}",
                u2["after"]["body"]
            );
        }
    }
}

/// A table added to the publication while the connector runs is captured from then on
/// (pgoutput sends its Relation and changes once the ALTER PUBLICATION is decoded).
#[tokio::test(flavor = "multi_thread")]
async fn table_added_to_the_publication_later_is_picked_up() {
    let pg = PgServer::shared();
    let (db, _dir, mut c) = running_acct(pg, 3, &["public.*"]).await;
    pg.execute(
        &db,
        "SET ROLE cdc; CREATE TABLE later (id int PRIMARY KEY, v bigint NOT NULL);
         RESET ROLE; ALTER PUBLICATION cdc_t ADD TABLE later;
         INSERT INTO later VALUES (1, 10), (2, 20); UPDATE later SET v = 21 WHERE id = 2;",
    )
    .await
    .unwrap();
    c.converge(pg, &db, "later", "t.public.later", Duration::from_secs(30))
        .await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}

/// A schema change inside a transaction: the records before it keep the old version,
/// those after it carry the new one (one batch, two versions of the table).
#[tokio::test(flavor = "multi_thread")]
async fn schema_change_inside_a_transaction() {
    let pg = PgServer::shared();
    let (db, _dir, mut c) = running_acct(pg, 3, &["public.acct"]).await;
    pg.execute(
        &db,
        "BEGIN; INSERT INTO acct VALUES (10, 1, 'before');
         ALTER TABLE acct ADD COLUMN note text;
         INSERT INTO acct VALUES (11, 2, 'after', 'new column'); COMMIT;",
    )
    .await
    .unwrap();
    c.wait_records(ACCT_TOPIC, 5, Duration::from_secs(30)).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
    let values: Vec<Json> = read_topic(&c.log_dir(), ACCT_TOPIC)
        .into_iter()
        .filter_map(|r| r.value)
        .filter(|v| v["op"] == "c")
        .collect();
    let v10 = values.iter().find(|v| v["after"]["id"] == 10).unwrap();
    let v11 = values.iter().find(|v| v["after"]["id"] == 11).unwrap();
    assert!(v10["after"].get("note").is_none(), "{v10}");
    assert_eq!(v11["after"]["note"], "new column", "{v11}");
}

/// `cdc log topics` of the connector's log, through the binary.
fn log_topics(c: &Connector) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(["log", "topics", "--data-dir"])
        .arg(c.log_dir())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The subjects of the embedded registry (its `_schemas` topic in `<log>/registry`).
fn registry_subjects(c: &Connector) -> std::collections::BTreeSet<String> {
    read_topic(&c.log_dir().join("registry"), "_schemas")
        .into_iter()
        .filter_map(|r| r.key)
        .filter(|k| k["keytype"] == "SCHEMA")
        .map(|k| k["subject"].as_str().unwrap().to_string())
        .collect()
}

/// `[[routing]]`: two tables (of different shapes) routed to one topic. Their records —
/// snapshot and streamed — land there and nowhere else, `cdc log topics` lists it, and each
/// table has its own subjects on it (`<topic>-<record name>`).
#[tokio::test(flavor = "multi_thread")]
async fn routing_sends_two_tables_to_one_topic() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc;
         CREATE TABLE orders_1 (id int PRIMARY KEY, v bigint NOT NULL);
         CREATE TABLE orders_2 (id int PRIMARY KEY, v bigint NOT NULL, region text NOT NULL);
         INSERT INTO orders_1 SELECT g, g FROM generate_series(1, 5) g;
         INSERT INTO orders_2 SELECT g, g, 'eu' FROM generate_series(101, 105) g;",
    )
    .await;
    let (_dir, mut c) = temp_connector(
        pg,
        &db,
        &["public.orders_*"],
        "[[routing]]\nregex = 't\\.public\\.orders_\\d+'\nreplacement = 't.orders'\n",
    );
    c.start();
    // The snapshot first, so that the changes below are streamed.
    c.wait_records("t.orders", 10, Duration::from_secs(30))
        .await;
    pg.execute(
        &db,
        "INSERT INTO orders_1 VALUES (6, 6); INSERT INTO orders_2 VALUES (106, 6, 'us');
         UPDATE orders_1 SET v = 60 WHERE id = 6;",
    )
    .await
    .unwrap();
    c.wait_records("t.orders", 13, Duration::from_secs(30))
        .await;
    let topics = log_topics(&c);
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
    assert!(topics.lines().any(|l| l == "t.orders\t3"), "{topics}");
    assert!(!topics.contains("t.public.orders_"), "{topics}");
    let recs = read_topic(&c.log_dir(), "t.orders");
    let count = |table: &str, op: &str| {
        recs.iter()
            .filter_map(|r| r.value.as_ref())
            .filter(|v| v["source"]["table"] == table && v["op"] == op)
            .count()
    };
    assert_eq!((count("orders_1", "r"), count("orders_2", "r")), (5, 5));
    assert_eq!((count("orders_1", "c"), count("orders_2", "c")), (1, 1));
    assert_eq!(count("orders_1", "u"), 1);
    let subjects = registry_subjects(&c);
    for s in [
        "t.orders-t.public.orders_1.Key",
        "t.orders-t.public.orders_1.Envelope",
        "t.orders-t.public.orders_2.Key",
        "t.orders-t.public.orders_2.Envelope",
    ] {
        assert!(subjects.contains(s), "{s} not in {subjects:?}");
    }
    assert!(
        !subjects.iter().any(|s| s.ends_with("-value")),
        "{subjects:?}"
    );
}

/// `source.message_key_columns` keys a table without a primary key (REPLICA IDENTITY
/// FULL): every record's key is those columns, in the configured order, and its partition
/// is the murmur2 partition of that key; a key change is a delete + create.
#[tokio::test(flavor = "multi_thread")]
async fn message_key_columns_key_a_table_without_a_primary_key() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc;
         CREATE TABLE events (id int NOT NULL, kind text NOT NULL, n int);
         ALTER TABLE events REPLICA IDENTITY FULL;
         INSERT INTO events SELECT g, 'k' || (g % 4), 0 FROM generate_series(1, 20) g;",
    )
    .await;
    let (_dir, mut c) = temp_connector(pg, &db, &["public.events"], "");
    c.edit_config(|text| {
        text.replace(
            "heartbeat_interval_ms = 1000\n",
            "heartbeat_interval_ms = 1000\nmessage_key_columns = [\"public.events:kind,id\"]\n",
        )
    });
    c.start();
    let topic = "t.public.events";
    // The snapshot first, so that the changes below are streamed.
    c.wait_records(topic, 20, Duration::from_secs(30)).await;
    pg.execute(
        &db,
        "INSERT INTO events VALUES (21, 'k1', 0);
         UPDATE events SET n = 1 WHERE id = 2;
         DELETE FROM events WHERE id = 3;
         UPDATE events SET kind = 'moved' WHERE id = 4;",
    )
    .await
    .unwrap();
    // 20 snapshot + 1 create + 1 update + delete and tombstone + the key change's delete,
    // tombstone and create.
    c.wait_records(topic, 27, Duration::from_secs(30)).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
    let log = cdc_log::Log::open_read_only(c.log_dir()).unwrap();
    let mut n = 0;
    let mut ops = Vec::new();
    for p in 0..3 {
        let mut r = log.reader(topic, p, cdc_log::StartAt::Earliest).unwrap();
        loop {
            let batch = r.poll(1 << 20).unwrap();
            if batch.is_empty() {
                break;
            }
            for rec in batch {
                n += 1;
                let key = rec.key.as_deref().expect("every record has a key");
                assert_eq!(
                    cdc_log::partition_for_key(key, 3),
                    p,
                    "partition of {key:?}"
                );
                let k: Json = serde_json::from_slice(key).unwrap();
                let text = String::from_utf8(key.to_vec()).unwrap();
                assert!(text.starts_with("{\"kind\":"), "configured order: {text}");
                let Some(v) = rec.value.as_deref() else {
                    continue; // tombstone: same key as its delete
                };
                let v: Json = serde_json::from_slice(v).unwrap();
                let op = v["op"].as_str().unwrap().to_string();
                let row = if op == "d" { &v["before"] } else { &v["after"] };
                assert_eq!(k, serde_json::json!({"kind": row["kind"], "id": row["id"]}));
                ops.push(op);
            }
        }
    }
    assert_eq!(n, 27);
    ops.sort();
    assert_eq!(
        ops.iter().filter(|o| *o != "r").collect::<Vec<_>>(),
        ["c", "c", "d", "d", "u"],
        "{ops:?}"
    );
    // The key is registered for the table that has none of its own.
    assert!(
        registry_subjects(&c).contains("t.public.events-key"),
        "{:?}",
        registry_subjects(&c)
    );
}

/// pgoutput's LSN of a non-transactional message is the *end* of its WAL record, so a
/// transaction whose commit record directly follows a message has that very LSN as its
/// commit LSN. Such a transaction was once skipped (and confirmed away) as if it were
/// before the message. Here a transaction is held open, a message is emitted, and the
/// transaction commits; the attempt is repeated until its commit LSN equals the message's
/// (nothing else wrote WAL in between), and every transaction must arrive.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_right_after_a_logical_message_is_not_skipped() {
    let pg = PgServer::shared();
    let (db, _dir, mut c) = running_acct(pg, 1, &["public.acct"]).await;
    let a = pg.superuser_client(&db).await.unwrap();
    let b = pg.superuser_client(&db).await.unwrap();
    let mut adjacent = 0;
    for i in 0..40i64 {
        a.batch_execute(&format!(
            "BEGIN; INSERT INTO acct VALUES ({}, 0, 'm')",
            1000 + i
        ))
        .await
        .unwrap();
        let msg_lsn: String = b
            .query_one(
                "SELECT pg_logical_emit_message(false, 'probe', 'x')::text",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        a.batch_execute("COMMIT").await.unwrap();
        c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
            .await;
        let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
        let rec = recs
            .iter()
            .rev()
            .find(|r| r.key.as_ref().and_then(|k| k["id"].as_i64()) == Some(1000 + i))
            .expect("the transaction's record");
        let commit: u64 = rec.value.as_ref().unwrap()["source"]["sequence"]
            .as_str()
            .and_then(|s| serde_json::from_str::<Vec<Option<String>>>(s).ok())
            .and_then(|v| v[0].clone())
            .and_then(|s| s.parse().ok())
            .unwrap();
        let m: cdc_schemas::Lsn = msg_lsn.parse().unwrap();
        if commit == m.0 {
            adjacent += 1;
            if adjacent >= 3 {
                break;
            }
        }
    }
    assert!(
        adjacent > 0,
        "no commit record directly followed the message: the case was not exercised"
    );
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}
