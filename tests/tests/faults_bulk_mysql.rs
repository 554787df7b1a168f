//! SIGKILLs of `cdc run` while it streams the bench's workload from MariaDB (the fault
//! suite, `tests/faults/run.sh`): the table and transactions of
//! `../shared/bench/bench/workload_mysql.sh` — `orders` with a DECIMAL, a TEXT payload and a
//! TIMESTAMP(6); transactions of 1,000 inserts, then of 1,000 updates of the first 60 % of
//! the rows, then of 1,000 deletes of the rest; 1,000,000 changes in the long form
//! (`CDC_TEST_BULK_CHANGES`, default 100,000) — written while the connector is killed
//! `CDC_TEST_KILLS` times (default 6) at random moments and started again.
//!
//! The server is the test's own, with binlogs of 4 MiB (rotations happen under the kills)
//! that expire after a day, so the connector's retention watch (`cdc_mysql_binlog_*`,
//! checked every 200 ms here) has a margin to report: the scenario records the most binlog
//! the connector's durable position was behind the server's head (what the server must keep
//! for us, as retained WAL is for Postgres) and the lowest margin before the file holding
//! that position may expire.
//!
//! At the end `cdc verify --log` says the table rebuilt from the log equals the database,
//! and every key's history in the log is exactly its insert and then its update or its
//! delete: the report counts what is missing, repeated or out of order.

mod my_source_util;

use std::process::Command;
use std::time::{Duration, Instant};

use cdc_harness::{MariaDbOptions, MariaDbServer};
use my_source_util::*;
use mysql_async::prelude::Queryable;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The retention watch's figures now, when the connector is up: (binlog bytes behind the
/// head, seconds of margin when known).
fn retention(admin: &str) -> (Option<f64>, Option<f64>) {
    if std::net::TcpStream::connect(admin).is_err() {
        return (None, None);
    }
    let behind = metric(admin, "cdc_mysql_binlog_behind_bytes");
    let margin = (metric(admin, "cdc_mysql_binlog_margin_known") == Some(1.0))
        .then(|| metric(admin, "cdc_mysql_binlog_margin_seconds"))
        .flatten();
    (behind, margin)
}

#[derive(Default)]
struct Watch {
    max_behind: f64,
    min_margin: Option<f64>,
}

impl Watch {
    fn look(&mut self, admin: &str) {
        let (b, m) = retention(admin);
        if let Some(b) = b {
            self.max_behind = self.max_behind.max(b);
        }
        if let Some(m) = m {
            self.min_margin = Some(self.min_margin.map_or(m, |x| x.min(m)));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_while_streaming_the_bench_workload_loses_nothing() {
    let changes = env("CDC_TEST_BULK_CHANGES", 100_000).max(10_000);
    let kills = env("CDC_TEST_KILLS", 6);
    let rows = changes / 2 / 1000 * 1000;
    let updated = rows * 3 / 5;
    let my = MariaDbServer::start(
        MariaDbOptions::default()
            .arg("--expire-logs-days=1")
            .arg("--max-binlog-size=4194304"),
    )
    .unwrap();
    let db = my.create_database().await.unwrap();
    my.execute(&format!(
        "CREATE TABLE {db}.orders (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, customer_id INT, status TEXT, amount DECIMAL(12,2), payload TEXT, updated_at TIMESTAMP(6) NULL) ENGINE=InnoDB"
    ))
    .await
    .unwrap();
    let (_dir, mut c) = temp_connector_tables(&my, &db, &["orders"], "");
    c.source_key("binlog_check_interval_ms = 200");
    let admin = c.fixed_admin_port();
    let topic = c.topic.clone();
    c.start();
    c.wait_streaming(Duration::from_secs(60)).await;
    // Its position stored: one streamed transaction in the log (a kill before that would
    // snapshot again, reading rows instead of their changes).
    // (An id past the workload's: 0 would take the next auto-increment value.)
    my.execute(&format!(
        "INSERT INTO {db}.orders (id, customer_id, status) VALUES ({}, 0, 'first')",
        rows + 1
    ))
    .await
    .unwrap();
    c.wait_until(Duration::from_secs(60), |r| !r.is_empty())
        .await;

    let writer = {
        let mut conn = my.root_conn().await.unwrap();
        let db = db.clone();
        tokio::spawn(async move {
            conn.query_drop(format!("SET time_zone = '+00:00'; USE {db}"))
                .await
                .unwrap();
            let mut sql = Vec::new();
            for a in (1..=rows).step_by(1000) {
                sql.push(format!(
                    "INSERT INTO orders (id, customer_id, status, amount, payload, updated_at) SELECT seq, seq % 10000 + 1, ELT(seq % 4 + 1, 'new', 'paid', 'shipped', 'cancelled'), (seq % 100000) / 100.0, REPEAT(MD5(seq), 3), TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_{a}_to_{}",
                    a + 999
                ));
            }
            for a in (1..=updated).step_by(1000) {
                sql.push(format!(
                    "UPDATE orders SET status = 'updated', amount = amount + 1, updated_at = updated_at + INTERVAL 1 DAY WHERE id BETWEEN {a} AND {}",
                    a + 999
                ));
            }
            for a in (updated + 1..=rows).step_by(1000) {
                sql.push(format!(
                    "DELETE FROM orders WHERE id BETWEEN {a} AND {}",
                    a + 999
                ));
            }
            let n = sql.len() as u64;
            for s in sql {
                conn.query_drop(s).await.unwrap();
            }
            conn.disconnect().await.unwrap();
            n
        })
    };
    let mut rng = Rng(0x13198a2e03707344);
    let mut watch = Watch::default();
    for _ in 0..kills {
        let until = Instant::now() + Duration::from_millis(300 + rng.next() % 1500);
        while Instant::now() < until {
            watch.look(&admin);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        c.assert_running();
        c.kill();
        c.start();
    }
    let transactions = writer.await.unwrap();

    // Drained: every record the workload made is in the log (first by count, which is
    // cheap, then key by key); then `cdc verify --log` compares the table rebuilt from the
    // log with the database.
    let recovering = Instant::now();
    let expected = rows * 2 + 1;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        c.assert_running();
        watch.look(&admin);
        if topic_len(&c.log_dir(), &topic) >= expected
            && cdc_harness::faults::bulk_complete(
                &cdc_harness::faults::bulk_histories(&c.log_dir(), &topic, rows),
                updated,
            )
        {
            break;
        }
        if Instant::now() > deadline {
            // Report what is missing rather than only that it timed out.
            let h = cdc_harness::faults::bulk_histories(&c.log_dir(), &topic, rows);
            panic!(
                "the log did not drain the workload in 600 s: {:?}\n{}",
                cdc_harness::faults::bulk_tally(&h, updated),
                c.output()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .arg("verify")
        .arg("--config")
        .arg(&c.config)
        .args(["--table", &format!("{db}.orders"), "--log"])
        .env("CDC_LOG_LEVEL", "warn")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        c.output()
    );
    let recovered = recovering.elapsed();
    c.assert_running();
    watch.look(&admin);
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    assert_eq!(
        cdc_harness::faults::snapshots_logged(&c.dir.join("connector.log")),
        1,
        "one snapshot, before the workload\n{}",
        c.output()
    );
    let files: Vec<mysql_async::Row> = my
        .root_conn()
        .await
        .unwrap()
        .query("SHOW BINARY LOGS")
        .await
        .unwrap();
    assert!(
        files.len() > 2,
        "the workload rotated the binlog ({} files)",
        files.len()
    );
    let h = cdc_harness::faults::bulk_histories(&c.log_dir(), &topic, rows);
    let tally = cdc_harness::faults::bulk_tally(&h, updated);
    let changes = rows * 2;
    eprintln!(
        "{kills} SIGKILLs during {changes} changes in {transactions} transactions; drained {:.1} s after the workload; binlog behind at most {:.0} bytes, margin at least {:?} s; {tally:?}",
        recovered.as_secs_f64(),
        watch.max_behind,
        watch.min_margin
    );
    cdc_harness::faults::Run {
        scenario: format!(
            "MariaDB: SIGKILL of cdc run while it streams the bench's workload ({changes} changes in transactions of 1,000)"
        ),
        faults: kills,
        transactions: Some(transactions),
        tally,
        max_retained_wal_bytes: None,
        max_binlog_behind_bytes: Some(watch.max_behind as i64),
        min_binlog_margin_seconds: watch.min_margin,
        recovery: recovered,
    }
    .report_and_check();
    drop(c);
    my.stop().unwrap();
}
