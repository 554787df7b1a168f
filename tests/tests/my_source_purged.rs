//! A stored binlog position the server no longer has (the binlog files were purged while
//! the connector was stopped): found by the retention check on start, before any binlog
//! dump, a definite error that names what was lost and the fix, and with
//! `snapshot.mode = "when_needed"` a new snapshot that brings the log back to the table.

mod my_source_util;

use std::time::Duration;

use cdc_harness::{MariaDbOptions, MariaDbServer};
use my_source_util::*;
use mysql_async::prelude::Queryable;

/// Rotates and purges until only the newest binlog file is left. MariaDB keeps a file
/// until its transactions are durable in InnoDB (the binlog checkpoint), so a PURGE may
/// keep it for a moment (with a warning): it is retried.
async fn purge_all_but_the_current_binlog(my: &MariaDbServer) {
    let mut root = my.root_conn().await.unwrap();
    root.query_drop("FLUSH BINARY LOGS").await.unwrap();
    for _ in 0..100 {
        let logs: Vec<mysql_async::Row> = root.query("SHOW BINARY LOGS").await.unwrap();
        let names: Vec<String> = logs.iter().map(|r| r.get(0).unwrap()).collect();
        if names.len() == 1 {
            return;
        }
        let newest = names.last().unwrap();
        root.query_drop(format!("PURGE BINARY LOGS TO '{newest}'"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the server kept its older binlog files");
}

#[tokio::test(flavor = "multi_thread")]
async fn purged_binlog_is_a_definite_error_then_when_needed_snapshots_again() {
    // A server of its own: purging binlogs would disturb other tests' streams.
    let my = MariaDbServer::start(MariaDbOptions::default()).unwrap();
    let db = setup_acct(&my, 20).await;
    let (_dir, mut c) = temp_connector(&my, &db, "");
    c.start();
    c.converge(&my, &db, Duration::from_secs(60)).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    // The file holding the stored position: the current one (nothing was written since).
    let stored_file: String = my
        .root_conn()
        .await
        .unwrap()
        .query_first::<mysql_async::Row, _>("SHOW MASTER STATUS")
        .await
        .unwrap()
        .unwrap()
        .get(0)
        .unwrap();

    // Changes the connector has not read, then their binlog is gone.
    my.execute(&format!(
        "UPDATE {db}.acct SET v = v + 1 WHERE id <= 5; DELETE FROM {db}.acct WHERE id = 20;"
    ))
    .await
    .unwrap();
    purge_all_but_the_current_binlog(&my).await;
    my.execute(&format!("UPDATE {db}.acct SET v = v + 1 WHERE id = 6"))
        .await
        .unwrap();

    let log = c.dir.join("connector.log");
    let before = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    c.start();
    let code = c
        .wait_exit(
            Duration::from_secs(60),
            "a purged binlog is a definite error",
        )
        .await;
    let out = c.output();
    assert_eq!(code, Some(1), "{out}");
    // The start-up retention check finds it before any binlog dump is opened (so not
    // as the dump's error 1236), and names what was lost and the fix.
    let run = std::fs::read_to_string(&log).unwrap()[before..].to_string();
    for needle in [
        "checking the stored binlog position",
        "was purged by the server",
        stored_file.as_str(),
        "GTIDs domain 0",
        "when_needed",
    ] {
        assert!(
            run.contains(needle),
            "the error does not mention {needle:?}\n{out}"
        );
    }
    assert!(!run.contains("binlog stream started"), "{out}");
    assert!(!run.contains("1236"), "{out}");

    c.append_config("\n[snapshot]\nmode = \"when_needed\"\n");
    let before = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    c.start();
    c.converge(&my, &db, Duration::from_secs(60)).await;
    // The start-up check, not a failed dump, led to the new snapshot.
    let run = std::fs::read_to_string(&log).unwrap()[before..].to_string();
    let first_stream = run.find("binlog stream started").expect("streaming");
    let resnapshot = run
        .find("checking the stored binlog position")
        .expect("the start-up check's verdict");
    assert!(resnapshot < first_stream, "{run}");
    assert!(!run.contains("1236"), "{run}");
    let recs = c.records();
    let reads = recs
        .iter()
        .filter(|r| r.value.as_ref().is_some_and(|v| v["op"] == "r"))
        .count();
    assert_eq!(reads, 20 + 19, "a second snapshot of the 19 rows left");
    // The deleted row, missed by the stream, got a delete from the re-snapshot.
    let deleted = recs.iter().any(|r| {
        r.key.as_ref().is_some_and(|k| k["id"] == 20)
            && r.value.as_ref().is_some_and(|v| v["op"] == "d")
    });
    assert!(deleted, "{}", c.output());
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}
