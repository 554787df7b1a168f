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
        let kind = match i % 4 {
            0 => {
                proxy.cut();
                "cut"
            }
            1 => {
                proxy.stall(true);
                tokio::time::sleep(Duration::from_millis(300 + rng.next() % 700)).await;
                proxy.stall(false);
                "stall"
            }
            2 => {
                proxy.slow(Some(Duration::from_millis(20)));
                tokio::time::sleep(Duration::from_millis(1000 + rng.next() % 2000)).await;
                proxy.slow(None);
                "slow"
            }
            _ => {
                // Heartbeats every 500 ms (the suite's config): 3 silent periods is dead.
                proxy.stall(true);
                tokio::time::sleep(Duration::from_secs(4)).await;
                proxy.stall(false);
                "black hole"
            }
        };
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
    let t = cdc_harness::faults::Tally::of(recs.iter().filter_map(|r| {
        let (k, v) = (r.key.as_ref()?, r.value.as_ref()?);
        Some((k.to_string(), v["op"].as_str()?, v["after"]["v"].as_i64()))
    }));
    cdc_harness::faults::report(serde_json::json!({
        "scenario": "MariaDB: network cut / stalled / slowed / black-holed (TCP proxy)",
        "faults": n,
        "transactions": committed,
        "changes": t.changes,
        "lost": t.lost,
        "duplicated": t.duplicated,
        "reordered": t.reordered,
        "recovery_seconds": recovered.as_secs_f64(),
    }));
    assert!(t.is_clean(), "{t:?} after {kinds:?}");
    check_histories(&recs).unwrap();
    assert!(proxy.connections() > 2, "the faults made it reconnect");
}
