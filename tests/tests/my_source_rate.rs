//! The MySQL / MariaDB source's streaming rate, end to end into the embedded log: rows
//! written while the connector is stopped are read back from the binlog when it starts.
//! Ignored by default (a measurement, not a check): run it with a release binary,
//!
//!     cargo build --release -p cdc-connector --bin cdc
//!     CDC_E2E_BIN=target/release/cdc MY_RATE_ROWS=1000000 MY_RATE_TX_ROWS=10 \
//!         cargo test -p cdc-harness --test my_source_rate -- --ignored --nocapture

mod my_source_util;

use std::time::{Duration, Instant};

use cdc_harness::{MariaDbOptions, MariaDbServer};
use my_source_util::*;

#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn streaming_rate() {
    let rows: u64 = std::env::var("MY_RATE_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let my = MariaDbServer::start(MariaDbOptions::default()).unwrap();
    let db = setup_acct(&my, 1).await;
    let (_dir, mut c) = temp_connector(&my, &db, "");
    c.start();
    c.converge(&my, &db, Duration::from_secs(60)).await;
    assert_eq!(c.stop(), Some(0));
    // Rows per transaction (MY_RATE_TX_ROWS, default 50000); statements are sent 200 at
    // a time, each its own transaction.
    let per_tx: u64 = std::env::var("MY_RATE_TX_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let mut done = 0;
    let mut sql = String::new();
    let mut queued = 0;
    while done < rows {
        let n = per_tx.min(rows - done);
        sql.push_str(&format!(
            "INSERT INTO {db}.acct SELECT seq, 0, 'pad-pad-pad-pad' FROM {db}.seq_{}_to_{};",
            done + 2,
            done + 1 + n
        ));
        done += n;
        queued += 1;
        if queued == 200 || done == rows {
            my.execute(&sql).await.unwrap();
            sql.clear();
            queued = 0;
        }
    }
    let t0 = Instant::now();
    c.start();
    while topic_len(&c.log_dir(), &c.topic) < rows + 1 {
        c.assert_running();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "streamed {rows} rows in {secs:.2} s (process start included): {:.0} rows/s",
        rows as f64 / secs
    );
    assert_eq!(c.stop(), Some(0));
}

/// The snapshot's rate: `MY_RATE_ROWS` rows read by a fresh connector (ignored; run as
/// the streaming rate test).
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn snapshot_rate() {
    let rows: u64 = std::env::var("MY_RATE_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let my = MariaDbServer::start(MariaDbOptions::default()).unwrap();
    let db = setup_acct(&my, 0).await;
    my.execute(&format!(
        "INSERT INTO {db}.acct SELECT seq, 0, 'pad-pad-pad-pad' FROM {db}.seq_1_to_{rows}"
    ))
    .await
    .unwrap();
    let (_dir, mut c) = temp_connector(&my, &db, "");
    let t0 = Instant::now();
    c.start();
    while topic_len(&c.log_dir(), &c.topic) < rows {
        c.assert_running();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "snapshot of {rows} rows in {secs:.2} s (process start included): {:.0} rows/s",
        rows as f64 / secs
    );
    assert_eq!(c.stop(), Some(0));
}
