//! The MySQL / MariaDB source end to end, through the shipped CLI (`cdc-e2e run --config
//! …`) into the embedded log, on real MariaDB servers: snapshot then streamed changes,
//! restarts of the connector (resume by GTID), several GTID domains, binlog rotation,
//! MariaDB restarted mid-stream, and a column added mid-stream.

mod my_source_util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdc_harness::{MariaDbOptions, MariaDbServer};
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
    let set = last.split("gtid_set ").nth(1).unwrap_or_default();
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
    with_workload(my, &db, &[0], async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::spawn_blocking(|| my.restart().unwrap())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
    })
    .await;
    c.converge(my, &db, Duration::from_secs(120)).await;
    check_histories(&c.records()).unwrap();
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
    let deadline = std::time::Instant::now() + T;
    let recs = loop {
        c.assert_running();
        let recs = c.records();
        if values(&recs).any(|v| v["op"] == "u" && v["after"]["id"] == 2) {
            break recs;
        }
        assert!(std::time::Instant::now() < deadline, "{}", c.output());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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

#[tokio::test(flavor = "multi_thread")]
async fn large_transactions_multi_row_events_and_nulls() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 0).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.source_key("max_batch_events = 100");
    c.start();
    c.converge(my, &db, T).await;
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
    let deadline = std::time::Instant::now() + T;
    let recs = loop {
        c.assert_running();
        let recs = c.records();
        if values(&recs).any(|v| v["op"] == "c" && v["after"]["id"] == 12) {
            break recs;
        }
        assert!(std::time::Instant::now() < deadline, "{}", c.output());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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
    let deadline = std::time::Instant::now() + T;
    while !std::fs::read_to_string(never.dir.join("connector.log"))
        .unwrap_or_default()
        .contains("binlog stream started")
    {
        never.assert_running();
        assert!(std::time::Instant::now() < deadline, "{}", never.output());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
