//! The binlog retention watch in `cdc run`, through the binary on a real MariaDB: the
//! `cdc_mysql_binlog_*` gauges on `/metrics` while streaming, how they follow the durable
//! position across `FLUSH BINARY LOGS` at `source.binlog_check_interval_ms`, a failing
//! check (a missing grant) that is logged and never stops the stream, and a bad interval
//! named as a config error. (A position purged while stopped, found by the start
//! check: `my_source_purged.rs`.)

mod my_source_util;

use std::time::{Duration, Instant};

use cdc_harness::{MariaDbOptions, MariaDbServer};
use my_source_util::*;
use mysql_async::prelude::Queryable;

const T: Duration = Duration::from_secs(60);

/// How long a rotation may take to show on `/metrics` with a 300 ms check interval: far
/// below the 60 s default, so the test fails when the key is ignored (the only periodic
/// check would come a minute after the stream opened), and far above 300 ms for a loaded
/// machine.
const ROTATION_SHOWS: Duration = Duration::from_secs(20);

/// The retention gauges as `/metrics` shows them (None: not exported).
#[derive(Debug, Default, PartialEq)]
struct Gauges {
    margin_seconds: Option<f64>,
    margin_known: Option<f64>,
    margin_alarm: Option<f64>,
    purged: Option<f64>,
    files_retained: Option<f64>,
    retained_bytes: Option<f64>,
    behind_files: Option<f64>,
    behind_bytes: Option<f64>,
    expire_seconds: Option<f64>,
}

fn gauges(addr: &str) -> Gauges {
    let g = |n: &str| metric(addr, &format!("cdc_mysql_binlog_{n}"));
    Gauges {
        margin_seconds: g("margin_seconds"),
        margin_known: g("margin_known"),
        margin_alarm: g("margin_alarm"),
        purged: g("purged"),
        files_retained: g("files_retained"),
        retained_bytes: g("retained_bytes"),
        behind_files: g("behind_files"),
        behind_bytes: g("behind_bytes"),
        expire_seconds: g("expire_seconds"),
    }
}

/// The number of binlog files the server lists.
async fn server_files(my: &MariaDbServer) -> f64 {
    let mut root = my.root_conn().await.unwrap();
    let logs: Vec<mysql_async::Row> = root.query("SHOW BINARY LOGS").await.unwrap();
    logs.len() as f64
}

/// Polls `/metrics` until `done` holds for the gauges; panics after `timeout` with them.
async fn wait_gauges(
    c: &mut Connector,
    addr: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Gauges) -> bool,
) -> Gauges {
    let deadline = Instant::now() + timeout;
    loop {
        c.assert_running();
        let g = gauges(addr);
        if done(&g) {
            return g;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: gauges {g:?}\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn gauges_follow_the_durable_position_across_rotations() {
    // A server of its own: it expires binlogs (a day), and the test rotates them.
    let my = MariaDbServer::start(MariaDbOptions::default().arg("--expire-logs-days=1")).unwrap();
    let db = setup_acct(&my, 5).await;
    let (_dir, mut c) = temp_connector(&my, &db, "");
    c.source_key("binlog_check_interval_ms = 300");
    let addr = c.fixed_admin_port();
    c.start();
    c.wait_streaming(T).await;
    c.converge(&my, &db, T).await;

    // Streaming and caught up: the position is in the current (last) file.
    let files = server_files(&my).await;
    let g = wait_gauges(&mut c, &addr, T, "gauges while streaming", |g| {
        g.files_retained == Some(files) && g.behind_files == Some(1.0)
    })
    .await;
    assert_eq!(g.expire_seconds, Some(86_400.0), "{g:?}");
    assert_eq!(g.purged, Some(0.0), "{g:?}");
    assert_eq!(g.margin_alarm, Some(0.0), "{g:?}");
    // The current file expires no sooner than a full retention period from now.
    assert_eq!(g.margin_known, Some(1.0), "{g:?}");
    let margin = g.margin_seconds.unwrap();
    assert!((86_400.0 - 600.0..=86_400.0).contains(&margin), "{g:?}");
    assert!(g.retained_bytes.unwrap() > 0.0, "{g:?}");
    assert!(g.behind_bytes.unwrap() < 65_536.0, "{g:?}");

    // Each rotation, once the position moved into the new file, shows at the next check.
    let mut retained = g.retained_bytes.unwrap();
    for round in 0..2 {
        let mut root = my.root_conn().await.unwrap();
        root.query_drop("FLUSH BINARY LOGS").await.unwrap();
        root.query_drop(format!(
            "INSERT INTO {db}.acct VALUES ({}, 0, 'rotated')",
            100 + round
        ))
        .await
        .unwrap();
        c.converge(&my, &db, T).await;
        let want = files + 1.0 + round as f64;
        assert_eq!(server_files(&my).await, want);
        let g = wait_gauges(
            &mut c,
            &addr,
            ROTATION_SHOWS,
            &format!(
                "rotation {round} within {ROTATION_SHOWS:?} at binlog_check_interval_ms = 300"
            ),
            |g| g.files_retained == Some(want) && g.behind_files == Some(1.0),
        )
        .await;
        assert_eq!(g.purged, Some(0.0), "{g:?}");
        assert_eq!(g.margin_alarm, Some(0.0), "{g:?}");
        assert_eq!(g.margin_known, Some(1.0), "{g:?}");
        assert!(g.retained_bytes.unwrap() > retained, "{g:?}");
        retained = g.retained_bytes.unwrap();
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_too_short_check_interval_is_a_config_error_naming_the_key() {
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 0).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    c.source_key("binlog_check_interval_ms = 10");
    c.start();
    let code = c.wait_exit(T, "a too short binlog_check_interval_ms").await;
    let out = c.output();
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("source.binlog_check_interval_ms"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_check_is_logged_and_never_stops_the_stream() {
    // A server of its own: a user without BINLOG MONITOR (the stream needs only
    // REPLICATION SLAVE; the retention check needs BINLOG MONITOR on MariaDB).
    let my = MariaDbServer::start(MariaDbOptions::default()).unwrap();
    let db = setup_acct(&my, 3).await;
    my.execute(
        "SET sql_log_bin = 0;
         CREATE USER 'nomon'@'%' IDENTIFIED BY 'nomon-pw';
         CREATE USER 'nomon'@'127.0.0.1' IDENTIFIED BY 'nomon-pw';
         GRANT REPLICATION SLAVE, SELECT, RELOAD, SHOW DATABASES ON *.* TO 'nomon'@'%';
         GRANT REPLICATION SLAVE, SELECT, RELOAD, SHOW DATABASES ON *.* TO 'nomon'@'127.0.0.1';
         SET sql_log_bin = 1;",
    )
    .await
    .unwrap();
    let (_dir, mut c) = temp_connector(&my, &db, "");
    let text = std::fs::read_to_string(&c.config).unwrap();
    let cdc_url = my.url("cdc", cdc_harness::passwords::MARIADB_CDC, &db);
    assert!(text.contains(&cdc_url));
    std::fs::write(
        &c.config,
        text.replace(&cdc_url, &my.url("nomon", "nomon-pw", &db)),
    )
    .unwrap();
    c.source_key("binlog_check_interval_ms = 200");
    let addr = c.fixed_admin_port();
    c.start();
    c.converge(&my, &db, T).await;
    // The checks keep failing (every 200 ms, then backing off) while the stream goes on.
    for i in 0..3 {
        my.execute(&format!("UPDATE {db}.acct SET v = v + 1 WHERE id = 1; INSERT INTO {db}.acct VALUES ({}, 0, 'n')", 10 + i))
            .await
            .unwrap();
        c.converge(&my, &db, T).await;
    }
    let log = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    assert!(
        log.contains("binlog retention check failed")
            && log.contains("GRANT BINLOG MONITOR ON *.* TO 'nomon'@"),
        "{}",
        c.output()
    );
    assert!(
        log.contains("the binlog retention check on start failed"),
        "{}",
        c.output()
    );
    // Never a successful check: the gauges were never set.
    assert_eq!(gauges(&addr).files_retained, Some(0.0));
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}
