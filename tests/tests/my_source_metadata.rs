//! With `binlog_row_metadata = FULL` the binlog's table maps name the columns, and the
//! stream checks them against its schema model: a DDL the binlog never saw (run with
//! `sql_log_bin = 0`) would otherwise give every later record the old field names. The
//! check is a definite error naming the table and both column lists; with matching names
//! (DDL the binlog did see) the stream goes on.

mod my_source_util;

use std::time::Duration;

use cdc_harness::{MariaDbOptions, MariaDbServer};
use my_source_util::*;
use mysql_async::prelude::Queryable;

const T: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn table_map_column_names_are_checked_against_the_schema_model() {
    let my = MariaDbServer::start(MariaDbOptions {
        extra_args: vec!["--binlog-row-metadata=FULL".into()],
        ..Default::default()
    })
    .unwrap();
    let db = setup_acct(&my, 2).await;
    let (_dir, mut c) = temp_connector(&my, &db, "");
    c.start();
    c.wait_streaming(T).await;
    // A DDL in the binlog: the model follows it and the names match.
    my.execute(&format!(
        "ALTER TABLE {db}.acct RENAME COLUMN pad TO note; UPDATE {db}.acct SET v = v + 1 WHERE id = 1"
    ))
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + T;
    while !c
        .records()
        .iter()
        .any(|r| r.value.as_ref().is_some_and(|v| v["op"] == "u"))
    {
        c.assert_running();
        assert!(std::time::Instant::now() < deadline, "{}", c.output());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A DDL the binlog does not see.
    let mut root = my.root_conn().await.unwrap();
    root.query_drop(format!(
        "SET SESSION sql_log_bin = 0; ALTER TABLE {db}.acct RENAME COLUMN note TO memo; SET SESSION sql_log_bin = 1"
    ))
    .await
    .unwrap();
    my.execute(&format!("UPDATE {db}.acct SET v = v + 1 WHERE id = 2"))
        .await
        .unwrap();
    let code = c
        .wait_exit(T, "a table map that contradicts the model")
        .await;
    let out = c.output();
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("memo"), "{out}");
    assert!(out.contains("note"), "{out}");
    assert!(out.contains("did not reach the model"), "{out}");
    // Nothing was written with the wrong names.
    let updates: Vec<_> = c
        .records()
        .into_iter()
        .filter_map(|r| r.value)
        .filter(|v| v["op"] == "u")
        .collect();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0]["after"]["note"], "x", "{}", updates[0]);
}
