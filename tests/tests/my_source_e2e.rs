//! The MySQL / MariaDB source end to end, through the shipped CLI (`cdc-e2e run --config
//! …`) into the embedded log, on real MariaDB servers: snapshot then streamed changes,
//! restarts of the connector (resume by GTID), several GTID domains, binlog rotation,
//! MariaDB restarted mid-stream, a column added mid-stream, and restarts in the middle of
//! a DDL history (restored from `<log.dir>/history`).

mod my_source_util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::{MariaDbOptions, MariaDbServer, RedisServer};
use my_source_util::*;

const T: Duration = Duration::from_secs(60);

fn is_binlog_name(f: &str) -> bool {
    f.strip_prefix("binlog.")
        .is_some_and(|n| n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()))
}

fn values(recs: &[Rec]) -> impl Iterator<Item = &serde_json::Value> {
    recs.iter().filter_map(|r| r.value.as_ref())
}

/// Runs `workload`s (one per domain in `domains`) while `during` runs; returns the
/// committed transactions.
async fn with_workload<F: std::future::Future<Output = ()>>(
    my: &'static MariaDbServer,
    db: &str,
    domains: &[u32],
    during: F,
) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = domains
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            // Disjoint insert ranges per worker.
            let first = 1_000 + 1_000_000 * i as i64;
            tokio::spawn(workload(
                my,
                db.to_string(),
                first,
                stop.clone(),
                7 + i as u64,
                d,
            ))
        })
        .collect();
    during.await;
    stop.store(true, Ordering::Relaxed);
    let mut n = 0;
    for w in workers {
        n += w.await.unwrap();
    }
    n
}

fn ops(recs: &[Rec]) -> Vec<String> {
    recs.iter()
        .filter_map(|r| {
            r.value
                .as_ref()
                .map(|v| v["op"].as_str().unwrap().to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_then_streamed_changes_arrive_once_in_order() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 10).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    my.execute(&format!(
        "START TRANSACTION; INSERT INTO {db}.acct VALUES (100, 5, 'a'); UPDATE {db}.acct SET v = 1 WHERE id = 1; DELETE FROM {db}.acct WHERE id = 2; COMMIT;
         UPDATE {db}.acct SET id = 200 WHERE id = 3;"
    ))
    .await
    .unwrap();
    c.converge(my, &db, T).await;
    let recs = c.records();
    let ops = ops(&recs);
    assert_eq!(ops.iter().filter(|o| *o == "r").count(), 10, "{ops:?}");
    // 3 changes in the transaction, and the key change: delete + create.
    assert_eq!(ops.len(), 10 + 3 + 2, "{ops:?}");
    check_histories(&recs).unwrap();
    let snap = recs
        .iter()
        .filter_map(|r| r.value.as_ref())
        .find(|v| v["op"] == "r")
        .unwrap();
    assert_eq!(snap["source"]["connector"], "mysql");
    assert_eq!(snap["source"]["db"], db.as_str());
    assert_eq!(snap["source"]["table"], "acct");
    let v = recs
        .iter()
        .filter_map(|r| r.value.as_ref())
        .find(|v| v["op"] == "c" && v["after"]["id"] == 100)
        .unwrap();
    let s = &v["source"];
    assert_eq!(s["connector"], "mysql");
    assert_eq!(s["db"], db.as_str());
    assert_eq!(s["table"], "acct");
    assert_eq!(s["snapshot"], "false");
    assert!(is_binlog_name(s["file"].as_str().unwrap()), "{s}");
    assert!(s["pos"].as_i64().unwrap() > 4, "{s}");
    assert!(s["server_id"].as_i64().unwrap() > 0, "{s}");
    let gtid = s["gtid"].as_str().unwrap();
    assert_eq!(gtid.split('-').count(), 3, "a MariaDB GTID: {gtid}");
    assert_eq!(v["after"]["v"], 5);
    let u = recs
        .iter()
        .filter_map(|r| r.value.as_ref())
        .find(|v| v["op"] == "u")
        .unwrap();
    assert_eq!(u["before"]["v"], 0);
    assert_eq!(u["after"]["v"], 1);
    // The transaction's changes share its GTID.
    assert_eq!(u["source"]["gtid"], gtid);
    let d = recs
        .iter()
        .filter_map(|r| r.value.as_ref())
        .find(|v| v["op"] == "d" && v["before"]["id"] == 2)
        .unwrap();
    assert!(d["after"].is_null());
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn restarts_resume_by_gtid_without_loss_or_duplicates() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 1000).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    let n = with_workload(my, &db, &[0], async {
        for i in 0..4 {
            tokio::time::sleep(Duration::from_millis(700)).await;
            if i % 2 == 0 {
                assert_eq!(c.stop(), Some(0), "{}", c.output());
            } else {
                c.kill();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.start();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    })
    .await;
    assert!(n > 0);
    c.converge(my, &db, T).await;
    let recs = c.records();
    check_histories(&recs).unwrap();
    assert_eq!(
        values(&recs).filter(|v| v["op"] == "r").count(),
        1000,
        "one snapshot"
    );
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    assert!(out.contains("resuming from the stored position"), "{out}");
    assert!(out.contains("gtid_set"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn several_gtid_domains_resume_each_domain() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 1000).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    with_workload(my, &db, &[0, 2], async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(c.stop(), Some(0), "{}", c.output());
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.start();
        tokio::time::sleep(Duration::from_millis(800)).await;
    })
    .await;
    c.converge(my, &db, T).await;
    let recs = c.records();
    check_histories(&recs).unwrap();
    let domains: std::collections::BTreeSet<String> = values(&recs)
        .filter_map(|v| v["source"]["gtid"].as_str())
        .map(|g| g.split('-').next().unwrap().to_string())
        .collect();
    assert!(
        domains.contains("0") && domains.contains("2"),
        "{domains:?}"
    );
    // The stored position holds both domains.
    assert_eq!(c.stop(), Some(0));
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    let last = out
        .lines()
        .rfind(|l| l.contains("durable position"))
        .unwrap_or_default();
    // A JSON line (the log file is not a terminal): `position` is `file:pos gtid_set S`.
    let line: serde_json::Value = serde_json::from_str(last).unwrap_or_default();
    let position = line["position"].as_str().unwrap_or_default();
    let set = position.split("gtid_set ").nth(1).unwrap_or_default();
    let set = set.split_whitespace().next().unwrap_or_default();
    let domains: Vec<&str> = set
        .split(',')
        .map(|g| g.split('-').next().unwrap())
        .collect();
    assert_eq!(domains, ["0", "2"], "{last}");
}

#[tokio::test(flavor = "multi_thread")]
async fn binlog_rotation_mid_stream() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 200).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    with_workload(my, &db, &[0], async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        my.execute("FLUSH BINARY LOGS").await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        // Stopped and resumed in the new file.
        assert_eq!(c.stop(), Some(0), "{}", c.output());
        my.execute("FLUSH BINARY LOGS").await.unwrap();
        c.start();
        tokio::time::sleep(Duration::from_millis(400)).await;
        my.execute("FLUSH BINARY LOGS").await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
    })
    .await;
    c.converge(my, &db, T).await;
    let recs = c.records();
    check_histories(&recs).unwrap();
    let files: std::collections::BTreeSet<&str> = values(&recs)
        .filter(|v| v["op"] != "r")
        .filter_map(|v| v["source"]["file"].as_str())
        .collect();
    assert!(files.len() >= 3, "{files:?}");
    assert!(files.iter().all(|f| is_binlog_name(f)), "{files:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_restarted_mid_stream() {
    let my: &'static MariaDbServer = Box::leak(Box::new(
        MariaDbServer::start(MariaDbOptions::default()).unwrap(),
    ));
    let db = setup_acct(my, 200).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    let mut restarted = Instant::now();
    with_workload(my, &db, &[0], async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        restarted = Instant::now();
        tokio::task::spawn_blocking(|| my.restart().unwrap())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
    })
    .await;
    c.converge(my, &db, Duration::from_secs(120)).await;
    let recovered = restarted.elapsed();
    let recs = c.records();
    check_histories(&recs).unwrap();
    cdc_harness::faults::Run {
        scenario: "MariaDB: server restarted mid-stream".into(),
        faults: 1,
        transactions: None,
        tally: cdc_harness::faults::tally(&recs),
        max_retained_wal_bytes: None,
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn added_column_appears_in_later_records() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 5).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    my.execute(&format!(
        "UPDATE {db}.acct SET v = v + 1 WHERE id = 1;
         ALTER TABLE {db}.acct ADD COLUMN note varchar(20);
         INSERT INTO {db}.acct (id, v, pad, note) VALUES (500, 1, 'p', 'hello');
         UPDATE {db}.acct SET v = v + 1 WHERE id = 2;"
    ))
    .await
    .unwrap();
    let recs = c
        .wait_until(T, |recs| {
            values(recs).any(|v| v["op"] == "u" && v["after"]["id"] == 2)
        })
        .await;
    let before_ddl = values(&recs)
        .find(|v| v["op"] == "u" && v["after"]["id"] == 1)
        .unwrap();
    assert!(before_ddl["after"].get("note").is_none(), "{before_ddl}");
    let ins = values(&recs)
        .find(|v| v["op"] == "c" && v["after"]["id"] == 500)
        .unwrap();
    assert_eq!(ins["after"]["note"], "hello", "{ins}");
    let upd = values(&recs)
        .find(|v| v["op"] == "u" && v["after"]["id"] == 2)
        .unwrap();
    assert!(upd["after"]["note"].is_null(), "{upd}");
    assert_eq!(upd["before"]["v"], 0, "{upd}");
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

/// Waits (up to `T`) until `keys()` (a view's keys, sorted) is `want`.
async fn view_becomes(keys: &impl Fn() -> Vec<String>, want: &[String], c: &Connector) {
    let deadline = std::time::Instant::now() + T;
    while keys() != want {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}\n{}",
            keys(),
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `TRUNCATE TABLE` writes no row events: the source writes a truncate record for it
/// (`op = t`, outside any transaction), so that what is rebuilt from the log, and a Redis
/// view kept by a sink, lose the rows the table lost.
#[tokio::test(flavor = "multi_thread")]
async fn truncate_is_written_as_a_truncate_record() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 5).await;
    // A Redis view of the table, kept by a sink of the same `cdc run`.
    let redis = RedisServer::start().unwrap();
    let view_keys = || {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &redis.port().to_string(), "KEYS", "v:acct:*"])
            .output()
            .expect("redis-cli (installed with redis-server)");
        let mut keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect();
        keys.sort();
        keys
    };
    let sink = format!(
        "[[sink]]\nname = \"view\"\ntype = \"redis\"\nurl = \"{}\"\nprefix = \"v\"\n",
        redis.url()
    );
    let (_dir, mut c) = temp_connector(my, &db, &sink);
    c.start();
    c.converge(my, &db, T).await;
    let five: Vec<String> = (1..=5).map(|i| format!("v:acct:{i}")).collect();
    view_becomes(&view_keys, &five, &c).await;
    my.execute(&format!(
        "TRUNCATE TABLE {db}.acct;
         INSERT INTO {db}.acct (id, v, pad) VALUES (900, 1, 'p');"
    ))
    .await
    .unwrap();
    let recs = c
        .wait_until(T, |recs| {
            values(recs).any(|v| v["op"] == "c" && v["after"]["id"] == 900)
        })
        .await;
    let t: Vec<&Rec> = recs
        .iter()
        .filter(|r| r.value.as_ref().is_some_and(|v| v["op"] == "t"))
        .collect();
    // One copy in every partition of the topic, each saying how many there are.
    let mut partitions: Vec<u32> = recs.iter().map(|r| r.partition).collect();
    partitions.dedup();
    assert_eq!(
        t.iter().map(|r| r.partition).collect::<Vec<_>>(),
        partitions,
        "a truncate in every partition"
    );
    for r in &t {
        let v = r.value.as_ref().unwrap();
        assert_eq!(v["source"]["table"], "acct", "{v}");
        assert_eq!(v["source"]["db"], db.as_str(), "{v}");
        assert!(v["before"].is_null() && v["after"].is_null(), "{v}");
        // As Debezium's MySQL connector: outside any transaction.
        assert!(v["transaction"].is_null(), "{v}");
        assert!(r.key.is_none(), "a truncate has no key");
        assert!(
            r.headers
                .contains(&("cdc.truncate.partitions".to_string(), t.len().to_string())),
            "{:?}",
            r.headers
        );
    }
    // After it, only the row inserted after the truncate: the log equals the table.
    let rebuilt = rebuild(&recs);
    assert_eq!(rebuilt.len(), 1, "{rebuilt:?}");
    assert_eq!(rebuilt, table_rows(my, &db).await);
    // The view lost the truncated rows too.
    view_becomes(&view_keys, &["v:acct:900".to_string()], &c).await;
    // The log goes to a file here: plain text, without terminal colours.
    assert!(!c.output().contains('\u{1b}'), "{}", c.output());
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn large_transactions_multi_row_events_and_nulls() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 0).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.source_key("max_batch_events = 100");
    c.start();
    // The table is empty: wait for the stream, not for an (empty) snapshot to converge.
    c.wait_streaming(T).await;
    // One transaction of 5000 rows in multi-row events, every third pad NULL; then one
    // statement updating all of them, one deleting some.
    my.execute(&format!(
        "START TRANSACTION;
         INSERT INTO {db}.acct SELECT seq, 0, IF(seq % 3 = 0, NULL, CONCAT('p', seq)) FROM {db}.seq_1_to_5000;
         COMMIT;
         UPDATE {db}.acct SET v = v + 1;
         DELETE FROM {db}.acct WHERE id % 10 = 0;"
    ))
    .await
    .unwrap();
    c.converge(my, &db, T).await;
    let recs = c.records();
    assert_eq!(check_histories(&recs).unwrap(), 5000 + 5000 + 500);
    let null_pad = values(&recs)
        .find(|v| v["op"] == "c" && v["after"]["id"] == 3)
        .unwrap();
    assert!(null_pad["after"]["pad"].is_null(), "{null_pad}");
    // The insert's records share one GTID and keep their order within the row events.
    let gtids: std::collections::BTreeSet<&str> = values(&recs)
        .filter(|v| v["op"] == "c")
        .filter_map(|v| v["source"]["gtid"].as_str())
        .collect();
    assert_eq!(gtids.len(), 1, "{gtids:?}");
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn ddls_in_quick_succession_each_apply_at_their_place() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 3).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    // Rows between two DDLs have the schema of their place in the binlog, not today's.
    my.execute(&format!(
        "ALTER TABLE {db}.acct ADD COLUMN a int;
         INSERT INTO {db}.acct (id, v, pad, a) VALUES (10, 0, 'x', 7);
         ALTER TABLE {db}.acct DROP COLUMN a, ADD COLUMN b varchar(5);
         INSERT INTO {db}.acct (id, v, pad, b) VALUES (11, 0, 'y', 'bee');
         ALTER TABLE {db}.acct DROP COLUMN b;
         INSERT INTO {db}.acct VALUES (12, 0, 'z');"
    ))
    .await
    .unwrap();
    let recs = c
        .wait_until(T, |recs| {
            values(recs).any(|v| v["op"] == "c" && v["after"]["id"] == 12)
        })
        .await;
    let find = |id: i64| {
        values(&recs)
            .find(|v| v["op"] == "c" && v["after"]["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(find(10)["after"]["a"], 7);
    assert!(find(10)["after"].get("b").is_none());
    assert_eq!(find(11)["after"]["b"], "bee");
    assert!(find(11)["after"].get("a").is_none());
    assert!(find(12)["after"].get("b").is_none());
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_mode_initial_only_and_never() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 7).await;
    // initial_only: the snapshot, then the connector exits by itself.
    let (_d1, mut once) = temp_connector(my, &db, "\n[snapshot]\nmode = \"initial_only\"\n");
    once.start();
    let code = once
        .wait_exit(T, "initial_only exits after the snapshot")
        .await;
    assert_eq!(code, Some(0), "{}", once.output());
    let recs = once.records();
    assert_eq!(ops(&recs), vec!["r"; 7]);
    // Started again: nothing to do.
    once.start();
    assert_eq!(once.wait_exit(T, "initial_only again").await, Some(0));
    assert_eq!(once.records().len(), 7);

    // never: no snapshot, only what is committed after the start.
    let (_d2, mut never) = temp_connector(my, &db, "\n[snapshot]\nmode = \"never\"\n");
    never.start();
    // The stream is open once a transaction of an uncaptured table moves the position.
    let other = my.create_database().await.unwrap();
    my.execute(&format!("CREATE TABLE {other}.x (id int PRIMARY KEY)"))
        .await
        .unwrap();
    never.wait_streaming(T).await;
    my.execute(&format!(
        "INSERT INTO {db}.acct VALUES (50, 1, 'n'); UPDATE {db}.acct SET v = 9 WHERE id = 1"
    ))
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + T;
    loop {
        never.assert_running();
        if never.records().len() >= 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", never.output());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut got = ops(&never.records());
    got.sort();
    assert_eq!(got, vec!["c", "u"]);
    assert_eq!(never.stop(), Some(0), "{}", never.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn xa_transactions_arrive_once() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 2).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    my.execute(&format!(
        "XA START 'x1'; INSERT INTO {db}.acct VALUES (30, 0, 'xa'); UPDATE {db}.acct SET v = v + 1 WHERE id = 1;
         XA END 'x1'; XA PREPARE 'x1'; XA COMMIT 'x1';
         XA START 'x2'; UPDATE {db}.acct SET v = v + 1 WHERE id = 2; XA END 'x2'; XA COMMIT 'x2' ONE PHASE;
         INSERT INTO {db}.acct VALUES (31, 0, 'after');"
    ))
    .await
    .unwrap();
    c.converge(my, &db, T).await;
    let recs = c.records();
    assert_eq!(check_histories(&recs).unwrap(), 2 + 4);
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_show_the_binlog_position_and_counts() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 4).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    let addr = c.fixed_admin_port();
    c.start();
    c.converge(my, &db, T).await;
    my.execute(&format!("INSERT INTO {db}.acct VALUES (77, 0, 'm')"))
        .await
        .unwrap();
    c.converge(my, &db, T).await;
    let deadline = std::time::Instant::now() + T;
    loop {
        let pos = metric(&addr, "cdc_mysql_binlog_position").unwrap_or(0.0);
        let file = metric(&addr, "cdc_mysql_binlog_file_number").unwrap_or(0.0);
        let events = metric(&addr, "cdc_mysql_binlog_events_read").unwrap_or(0.0);
        let rows = metric(&addr, "cdc_mysql_snapshot_rows").unwrap_or(0.0);
        if pos > 4.0 && file >= 1.0 && events > 0.0 && rows == 4.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pos {pos} file {file} events {events} rows {rows}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(metric(&addr, "cdc_mysql_seconds_behind_source").is_some());
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn ddl_while_stopped_rows_before_it_keep_their_schema() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 2).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.converge(my, &db, T).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    // Unread rows on both sides of a DDL: the restart must decode the first with the old
    // schema (information_schema only has the new one).
    my.execute(&format!(
        "INSERT INTO {db}.acct VALUES (20, 0, 'old');
         ALTER TABLE {db}.acct ADD COLUMN a int;
         INSERT INTO {db}.acct VALUES (21, 0, 'new', 5);"
    ))
    .await
    .unwrap();
    c.start();
    let recs = c
        .wait_until(T, |recs| {
            values(recs).any(|v| v["op"] == "c" && v["after"]["id"] == 21)
        })
        .await;
    let old = values(&recs)
        .find(|v| v["op"] == "c" && v["after"]["id"] == 20)
        .unwrap();
    assert!(old["after"].get("a").is_none(), "{old}");
    let new = values(&recs)
        .find(|v| v["op"] == "c" && v["after"]["id"] == 21)
        .unwrap();
    assert_eq!(new["after"]["a"], 5, "{new}");
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_the_snapshot_stops_it_and_the_next_run_takes_it_again() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 0).await;
    my.execute(&format!(
        "INSERT INTO {db}.acct SELECT seq, 0, 'x' FROM {db}.seq_1_to_300000"
    ))
    .await
    .unwrap();
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    // Stopped once the snapshot is under way (some records durable).
    let deadline = std::time::Instant::now() + T;
    while topic_len(&c.log_dir(), &c.topic) == 0 {
        c.assert_running();
        assert!(std::time::Instant::now() < deadline, "{}", c.output());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    if !out.contains("snapshot complete") {
        assert!(out.contains("shutdown during the snapshot"), "{out}");
    }
    c.start();
    c.converge(my, &db, Duration::from_secs(120)).await;
    check_histories(&c.records()).unwrap();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

/// A column's expected value in a record's `after`.
type Expect = (&'static str, serde_json::Value);

/// The `c` record of `id` (panics if missing).
fn created(recs: &[Rec], id: i64) -> serde_json::Value {
    values(recs)
        .find(|v| v["op"] == "c" && v["after"]["id"] == id)
        .unwrap_or_else(|| panic!("no create of id {id}"))
        .clone()
}

/// Waits until the log holds the create of `id`.
async fn wait_created(c: &mut Connector, id: i64) -> Vec<Rec> {
    c.wait_until(T, |recs| {
        values(recs).any(|v| v["op"] == "c" && v["after"]["id"] == id)
    })
    .await
}

/// The schema history records of a stopped connector, as JSON, in append order.
fn history_records(c: &Connector) -> Vec<serde_json::Value> {
    let dir = c.log_dir().join("history");
    let store = cdc_connector::history::LogHistoryStore::open_dir(&dir, "t").unwrap();
    let records = cdc_sources::history::SchemaHistoryStore::load(&store)
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(r).unwrap())
        .collect();
    store.log().close().unwrap();
    records
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn restarts_in_the_middle_of_a_ddl_history_decode_each_row_with_its_schema() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 2).await;
    // A column changes its type (int to varchar): not a BACKWARD-compatible value schema,
    // and the registry's check is not what this test is about.
    let (_dir, mut c) = temp_connector(my, &db, "\n[registry]\ncompatibility = \"NONE\"\n");
    c.start();
    c.converge(my, &db, T).await;
    // Read while running: the first DDLs' history records and the rows after them become
    // durable; then a crash (no shutdown drain).
    my.execute(&format!(
        "ALTER TABLE {db}.acct ADD COLUMN a int;
         INSERT INTO {db}.acct VALUES (10, 0, 'a', 1);
         ALTER TABLE {db}.acct RENAME COLUMN a TO a2;
         INSERT INTO {db}.acct VALUES (11, 0, 'b', 2);"
    ))
    .await
    .unwrap();
    wait_created(&mut c, 11).await;
    c.kill();
    // Made while it is down: each row's columns only exist at its place in the binlog
    // (information_schema ends with none of them), and a2 changes its type in between.
    my.execute(&format!(
        "INSERT INTO {db}.acct VALUES (12, 0, 'c', 3);
         ALTER TABLE {db}.acct MODIFY a2 varchar(10);
         INSERT INTO {db}.acct VALUES (13, 0, 'd', 'str');
         ALTER TABLE {db}.acct DROP COLUMN a2, ADD COLUMN b int;
         INSERT INTO {db}.acct VALUES (14, 0, 'e', 4);
         ALTER TABLE {db}.acct DROP COLUMN b;
         INSERT INTO {db}.acct VALUES (15, 0, 'f');"
    ))
    .await
    .unwrap();
    c.start();
    wait_created(&mut c, 15).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    // A second restart, resumed after the whole chain (snapshot + five DDLs), and a
    // column name that existed earlier with another type comes back.
    my.execute(&format!(
        "INSERT INTO {db}.acct VALUES (16, 0, 'g');
         ALTER TABLE {db}.acct ADD COLUMN a2 bigint;
         INSERT INTO {db}.acct VALUES (17, 0, 'h', 99);"
    ))
    .await
    .unwrap();
    c.start();
    let recs = wait_created(&mut c, 17).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    let cols = |v: &serde_json::Value| -> Vec<String> {
        v["after"].as_object().unwrap().keys().cloned().collect()
    };
    let want: [(i64, &[&str], Option<Expect>); 8] = [
        (10, &["a", "id", "pad", "v"], Some(("a", 1.into()))),
        (11, &["a2", "id", "pad", "v"], Some(("a2", 2.into()))),
        (12, &["a2", "id", "pad", "v"], Some(("a2", 3.into()))),
        (13, &["a2", "id", "pad", "v"], Some(("a2", "str".into()))),
        (14, &["b", "id", "pad", "v"], Some(("b", 4.into()))),
        (15, &["id", "pad", "v"], None),
        (16, &["id", "pad", "v"], None),
        (17, &["a2", "id", "pad", "v"], Some(("a2", 99.into()))),
    ];
    for (id, names, value) in want {
        let v = created(&recs, id);
        let mut got = cols(&v);
        got.sort();
        assert_eq!(got, names, "id {id}: {v}");
        if let Some((k, want)) = value {
            assert_eq!(v["after"][k], want, "id {id}: {v}");
        }
    }
    check_histories(&recs).unwrap();
    // Both restarts restored from the history; none fell back to information_schema.
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    assert_eq!(
        out.matches("table schemas restored from the schema history")
            .count(),
        2,
        "{out}"
    );
    assert!(!out.contains("no schema history"), "{out}");

    // The history is in <log.dir>/history: the snapshot's schemas, then each DDL once (the
    // restarts read some again), in binlog order; no JSON-lines file anywhere.
    // Other tests' DDL on the shared server (their CREATE DATABASE) changes the model too
    // (a database's default charset) and is recorded as well: only this table's counts.
    let acct = format!("{db}.acct");
    let records: Vec<_> = history_records(&c)
        .into_iter()
        .filter(|r| r["kind"] == "snapshot" || r["sql"].as_str().is_some_and(|s| s.contains(&acct)))
        .collect();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["snapshot", "ddl", "ddl", "ddl", "ddl", "ddl", "ddl"],
        "{:#?}",
        records
            .iter()
            .map(|r| (r["position"].clone(), r["sql"].clone()))
            .collect::<Vec<_>>()
    );
    let sql: Vec<&str> = records[1..]
        .iter()
        .map(|r| r["sql"].as_str().unwrap())
        .collect();
    for (s, want) in sql.iter().zip([
        "ADD COLUMN a int",
        "RENAME COLUMN a TO a2",
        "MODIFY a2 varchar(10)",
        "DROP COLUMN a2, ADD COLUMN b int",
        "DROP COLUMN b",
        "ADD COLUMN a2 bigint",
    ]) {
        assert!(s.ends_with(want), "{sql:?}");
    }
    let files = files_under(&c.dir);
    assert!(
        !files
            .iter()
            .any(|f| f.extension().is_some_and(|e| e == "jsonl")),
        "{files:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_mode_never_records_the_start_and_a_restart_restores_from_it() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 1).await;
    let (_dir, mut c) = temp_connector(my, &db, "\n[snapshot]\nmode = \"never\"\n");
    c.start();
    c.wait_streaming(T).await;
    my.execute(&format!("INSERT INTO {db}.acct VALUES (50, 0, 'n')"))
        .await
        .unwrap();
    wait_created(&mut c, 50).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    // Without the start's record, the restart would only have information_schema's
    // schema (with `a`) for the row before the DDL.
    my.execute(&format!(
        "INSERT INTO {db}.acct VALUES (51, 0, 'old');
         ALTER TABLE {db}.acct ADD COLUMN a int;
         INSERT INTO {db}.acct VALUES (52, 0, 'new', 5);"
    ))
    .await
    .unwrap();
    c.start();
    let recs = wait_created(&mut c, 52).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    assert!(created(&recs, 51)["after"].get("a").is_none());
    assert_eq!(created(&recs, 52)["after"]["a"], 5);
    // Only this table's DDL (other tests' CREATE DATABASE on the shared server is recorded too).
    let acct = format!("{db}.acct");
    let kinds: Vec<String> = history_records(&c)
        .iter()
        .filter(|r| r["kind"] == "snapshot" || r["sql"].as_str().is_some_and(|s| s.contains(&acct)))
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["snapshot", "ddl"]);
}
