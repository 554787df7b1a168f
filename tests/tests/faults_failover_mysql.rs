//! A failover-like restart of MariaDB (the fault suite, `tests/faults/run.sh`): `cdc run`
//! reaches the server by a host name (an `/etc/hosts` entry of the test's own); at random
//! moments under the version-chain workload the old address goes away (connections
//! closed, new ones refused), the server restarts, and the name then points at a new
//! loopback address (a TCP proxy there, in front of the one server, so the binlogs and
//! GTIDs are the same: a real promotion of a replica would carry the same GTID set). The
//! source must resolve the name again and resume from the log's position; at the end the
//! table rebuilt from the log equals the database and every key's history is exactly its
//! committed versions.
//!
//! `CDC_TEST_FAILOVERS` sets the number of failovers (default 3). Needs root (writing
//! `/etc/hosts`); skipped, loudly, otherwise.

mod my_source_util;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::{FaultProxy, HostsEntry, MariaDbOptions, MariaDbServer};
use my_source_util::*;

fn failovers() -> u32 {
    std::env::var("CDC_TEST_FAILOVERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// The `i`-th host's address: 127.0.0.2, 127.0.0.3, … (wrapping after 200).
fn host_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 2 + (i % 200) as u8)
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_failover_to_a_new_address_loses_nothing() {
    let n = failovers();
    let Some(hosts) = HostsEntry::add("cdc-failover-my", host_ip(0)) else {
        eprintln!("\n\n*** SKIPPED mariadb_failover_to_a_new_address_loses_nothing: writing /etc/hosts needs root (CI runs as root) ***\n\n");
        return;
    };
    // A server of its own: it is restarted.
    let my: &'static MariaDbServer = Box::leak(Box::new(
        MariaDbServer::start(MariaDbOptions::default()).unwrap(),
    ));
    let db = setup_acct(my, 200).await;
    let upstream: SocketAddr = ([127, 0, 0, 1], my.port()).into();
    let mut proxy = FaultProxy::start_on((host_ip(0), 0).into(), upstream).unwrap();
    let port = proxy.port();
    let (_dir, mut c) = temp_connector(my, &db, "");
    let text = std::fs::read_to_string(&c.config).unwrap().replace(
        &format!("127.0.0.1:{}/", my.port()),
        &format!("{}:{port}/", hosts.name()),
    );
    assert!(text.contains(hosts.name()), "{text}");
    std::fs::write(&c.config, text).unwrap();
    c.start();
    c.converge(my, &db, Duration::from_secs(60)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let w = tokio::spawn(workload(my, db.clone(), 200, stop.clone(), 0xfa11, 0));
    let mut rng = Rng(0x1f83d9abfb41bd6b);
    for i in 1..=n {
        tokio::time::sleep(Duration::from_millis(1000 + rng.next() % 2000)).await;
        c.assert_running();
        // The old host goes away: its connections close, its address refuses.
        drop(proxy);
        tokio::task::spawn_blocking(|| my.restart().unwrap())
            .await
            .unwrap();
        // The name now points at the new host.
        proxy = FaultProxy::start_on((host_ip(i), port).into(), upstream).unwrap();
        hosts.set(host_ip(i)).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let committed = w.await.unwrap();
    let recovering = Instant::now();
    c.converge(my, &db, Duration::from_secs(90)).await;
    let recovered = recovering.elapsed();
    c.assert_running();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    assert!(
        proxy.connections() > 0,
        "the connector reached the last address"
    );
    let recs = c.records();
    cdc_harness::faults::Run {
        scenario: "MariaDB: failover-like restart, the server back at a new address under the same host name".into(),
        faults: n.into(),
        transactions: Some(committed),
        tally: cdc_harness::faults::tally(&recs),
        max_retained_wal_bytes: None,
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    check_histories(&recs).unwrap();
}
