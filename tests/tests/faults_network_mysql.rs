//! Network faults between `cdc run` and MariaDB, through the fault suite's TCP proxy
//! (`cdc_harness::FaultProxy`): connections cut, stalled, slowed, and once black-holed for
//! longer than three heartbeat periods (the source must notice and reconnect). At the end
//! the table rebuilt from the log equals the database and every key's history is exactly
//! its committed versions; the figures go to the fault suite's report.
//!
//! `CDC_TEST_NET_FAULTS` sets the number of faults (default 6).

mod my_source_util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::faults::inject;
use cdc_harness::{FaultProxy, MariaDbServer};
use my_source_util::*;

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_through_cuts_stalls_slowness_and_a_black_hole() {
    let n: u32 = std::env::var("CDC_TEST_NET_FAULTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let my = MariaDbServer::shared();
    let db = setup_acct(my, 200).await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], my.port()).into()).unwrap();
    let (_dir, mut c) = temp_connector(my, &db, "");
    // Through the proxy (the config was written with the server's own port).
    let text = std::fs::read_to_string(&c.config).unwrap().replace(
        &format!("127.0.0.1:{}/", my.port()),
        &format!("127.0.0.1:{}/", proxy.port()),
    );
    std::fs::write(&c.config, text).unwrap();
    c.start();
    c.converge(my, &db, Duration::from_secs(60)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let w = tokio::spawn(workload(my, db.clone(), 200, stop.clone(), 0x5eed, 0));
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut kinds = Vec::new();
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(300 + rng.next() % 1200)).await;
        // Heartbeats every 500 ms (the suite's config): a 4 s black hole is dead.
        let pause = Duration::from_millis(300 + rng.next() % 700);
        let kind = inject(&proxy, i, pause, Duration::from_secs(4)).await;
        kinds.push(kind);
        c.assert_running();
    }
    stop.store(true, Ordering::Relaxed);
    let committed = w.await.unwrap();
    let recovering = Instant::now();
    c.converge(my, &db, Duration::from_secs(90)).await;
    let recovered = recovering.elapsed();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let recs = c.records();
    eprintln!("faults: {kinds:?}");
    cdc_harness::faults::Run {
        scenario: "MariaDB: network cut / stalled / slowed / black-holed (TCP proxy)".into(),
        faults: n.into(),
        transactions: Some(committed),
        tally: cdc_harness::faults::tally(&recs),
        max_retained_wal_bytes: None,
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    check_histories(&recs).unwrap();
    assert!(proxy.connections() > 2, "the faults made it reconnect");
}
