//! The MySQL-only `[source]` keys through the binary, each tested so that ignoring it fails:
//! - `zero_dates`: a zero date in the snapshot and in the binlog is Debezium's stand-in by
//!   default (NULL, or the epoch in a NOT NULL column) with no header, and with `"raw"` the
//!   same stand-in plus the server's text in a `cdc.unrepresentable.after.<column>` header,
//!   so nothing is lost.
//! - `skip_unparseable_ddl`: a DDL statement on a captured table that the source cannot
//!   follow stops it with a definite error naming the statement and the key by default;
//!   with `true` it is skipped, counted, and the stream goes on.

mod my_source_util;

use std::time::{Duration, Instant};

use cdc_harness::MariaDbServer;
use my_source_util::*;
use serde_json::Value as Json;

const T: Duration = Duration::from_secs(60);

/// (value, headers) of every record of the connector's topic, in offset order per partition.
fn records_with_headers(c: &Connector) -> Vec<(Json, Vec<(String, String)>)> {
    c.records()
        .into_iter()
        .filter_map(|r| Some((r.value?, r.headers)))
        .collect()
}

/// Captures a table with a nullable DATE and a NOT NULL DATETIME holding zero dates, one
/// row from the snapshot and one from the binlog; returns both records (by id).
async fn capture(mode: Option<&str>) -> Vec<(Json, Vec<(String, String)>)> {
    let my = MariaDbServer::shared();
    let db = my.create_database().await.unwrap();
    my.execute(&format!(
        "SET SESSION sql_mode = ''; \
         CREATE TABLE {db}.acct (id int PRIMARY KEY, d date NULL, dt datetime NOT NULL) ENGINE=InnoDB; \
         INSERT INTO {db}.acct VALUES (1, '0000-00-00', '0000-00-00 00:00:00')"
    ))
    .await
    .unwrap();
    let (_dir, mut c) = temp_connector(my, &db, "");
    if let Some(m) = mode {
        c.source_key(&format!("zero_dates = \"{m}\""));
    }
    c.start();
    c.wait_streaming(T).await;
    my.execute(&format!(
        "SET SESSION sql_mode = ''; \
         INSERT INTO {db}.acct VALUES (2, '2024-00-10', '0000-00-00 00:00:00')"
    ))
    .await
    .unwrap();
    let deadline = Instant::now() + T;
    loop {
        c.assert_running();
        let recs = records_with_headers(&c);
        if recs.len() >= 2 {
            assert_eq!(c.stop(), Some(0), "{}", c.output());
            let mut recs = recs;
            recs.sort_by_key(|(v, _)| v["after"]["id"].as_i64());
            return recs;
        }
        assert!(Instant::now() < deadline, "{}", c.output());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn header<'a>(h: &'a [(String, String)], column: &str) -> Option<&'a str> {
    let key = format!("cdc.unrepresentable.after.{column}");
    h.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread")]
async fn zero_dates_default_to_debeziums_stand_in_without_a_header() {
    let recs = capture(None).await;
    for ((v, h), op) in recs.iter().zip(["r", "c"]) {
        assert_eq!(v["op"], op, "{v}");
        assert_eq!(v["after"]["d"], Json::Null, "{v}");
        assert_eq!(v["after"]["dt"], 0, "{v}");
        assert!(
            !h.iter().any(|(k, _)| k.starts_with("cdc.unrepresentable.")),
            "{h:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn zero_dates_raw_keeps_the_servers_text_in_a_header() {
    let recs = capture(Some("raw")).await;
    let [(r, rh), (c, ch)] = &recs[..] else {
        panic!("{recs:?}")
    };
    for v in [r, c] {
        assert_eq!(v["after"]["d"], Json::Null, "{v}");
        assert_eq!(v["after"]["dt"], 0, "{v}");
    }
    assert_eq!(r["op"], "r");
    assert_eq!(header(rh, "d"), Some("0000-00-00"), "{rh:?}");
    assert_eq!(header(rh, "dt"), Some("0000-00-00 00:00:00"), "{rh:?}");
    assert_eq!(c["op"], "c");
    assert_eq!(header(ch, "d"), Some("2024-00-10"), "{ch:?}");
    assert_eq!(header(ch, "dt"), Some("0000-00-00 00:00:00"), "{ch:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_zero_dates_mode_is_a_config_error_naming_the_key() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 0).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.source_key("zero_dates = \"zero\"");
    c.start();
    let code = c.wait_exit(T, "a bad zero_dates").await;
    let out = c.output();
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("source.zero_dates"), "{out}");
    assert!(out.contains("\"raw\""), "{out}");
}

/// `ADD SYSTEM VERSIONING` is valid MariaDB that this source cannot follow (it adds the
/// invisible row_start/row_end columns); `DROP SYSTEM VERSIONING` takes them away again,
/// so after both the table has its old shape.
async fn versioning_round_trip(my: &MariaDbServer, db: &str) {
    my.execute(&format!(
        "ALTER TABLE {db}.acct ADD SYSTEM VERSIONING; ALTER TABLE {db}.acct DROP SYSTEM VERSIONING; \
         INSERT INTO {db}.acct VALUES (1, 1, 'after')"
    ))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ddl_it_cannot_follow_stops_it_naming_the_statement_and_the_key() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 0).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.start();
    c.wait_streaming(T).await;
    versioning_round_trip(my, &db).await;
    let code = c.wait_exit(T, "an unparseable DDL").await;
    let out = c.output();
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("ADD SYSTEM VERSIONING"), "{out}");
    assert!(out.contains("source.skip_unparseable_ddl"), "{out}");
    assert!(c.records().is_empty(), "nothing after the DDL was written");
}

#[tokio::test(flavor = "multi_thread")]
async fn skip_unparseable_ddl_skips_and_counts_it() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 0).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.source_key("skip_unparseable_ddl = true");
    let admin = c.fixed_admin_port();
    c.start();
    c.wait_streaming(T).await;
    versioning_round_trip(my, &db).await;
    c.converge(my, &db, T).await;
    assert_eq!(
        metric(&admin, "cdc_mysql_ddl_skipped_total"),
        Some(2.0),
        "{}",
        c.output()
    );
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    assert!(out.contains("was skipped"), "{out}");
}
