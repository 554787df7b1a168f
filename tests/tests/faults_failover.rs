//! A failover-like restart (the fault suite, `tests/faults/run.sh`): `cdc run` reaches
//! Postgres by a host name (an `/etc/hosts` entry of the test's own, as a managed
//! database's endpoint or a Kubernetes Service name). At random moments under the
//! version-chain workload the old address goes away (its connections closed, new ones
//! refused), the server restarts (fast or immediate shutdown, in turn), and the name then
//! points at a new address. The connector must resolve the name again on reconnecting and
//! resume from the log's position; at the end the table rebuilt from the log equals the
//! database and every key's history is exactly its committed versions.
//!
//! Each address is a TCP proxy (`FaultProxy::start_on`) on its own loopback address
//! (127.0.0.2, 127.0.0.3, …) in front of the one server: the slot survives (Postgres 15
//! and 16 do not carry logical slots to a promoted standby; a real promotion would need
//! the slot recreated, which is the "slot lost" re-snapshot path).
//!
//! `CDC_TEST_FAILOVERS` sets the number of failovers (default 3). Needs root (writing
//! `/etc/hosts`); skipped, loudly, otherwise.

mod pg_source_util;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use cdc_harness::{passwords, FaultProxy, HostsEntry, PgOptions, PgServer};
use pg_source_util::*;

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
async fn postgres_failover_to_a_new_address_loses_nothing() {
    let n = failovers();
    let Some(hosts) = HostsEntry::add("cdc-failover", host_ip(0)) else {
        eprintln!("\n\n*** SKIPPED postgres_failover_to_a_new_address_loses_nothing: writing /etc/hosts needs root (CI runs as root) ***\n\n");
        return;
    };
    // A server of its own: it is restarted.
    let pg: &'static PgServer = Box::leak(Box::new(PgServer::start(PgOptions::default()).unwrap()));
    let db = setup_acct(pg, 200).await;
    let upstream: SocketAddr = ([127, 0, 0, 1], pg.port()).into();
    let mut proxy = FaultProxy::start_on((host_ip(0), 0).into(), upstream).unwrap();
    let port = proxy.port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "{}?sslmode=disable&connect_timeout=5",
        pg.url("cdc", passwords::PG_CDC, &db)
    )
    .replace(
        &format!("127.0.0.1:{}/", pg.port()),
        &format!("{}:{port}/", hosts.name()),
    );
    let text = format!(
        "name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"{url}\"\ntables = [\"public.acct\"]\nslot = \"{db}\"\nheartbeat_interval_ms = 1000\nstatus_interval_ms = 1000\n[log]\ndir = \"{}\"\npartitions = 3\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        dir.path().join("log").display()
    );
    let mut c = Connector::with_config(dir.path(), &text);
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    let w = Running::start(pg, &db, 200, 0x3c6ef372fe94f82b);
    let mut rng = Rng(0xa54ff53a5f1d36f1);
    let mut max_retained = 0i64;
    for i in 1..=n {
        tokio::time::sleep(Duration::from_millis(1000 + rng.next() % 2000)).await;
        c.assert_running();
        // The old host goes away: its connections close, its address refuses.
        drop(proxy);
        let immediate = i % 2 == 0;
        tokio::task::spawn_blocking(move || pg.restart(immediate))
            .await
            .unwrap()
            .unwrap();
        // The name now points at the new host.
        proxy = FaultProxy::start_on((host_ip(i), port).into(), upstream).unwrap();
        hosts.set(host_ip(i)).unwrap();
        max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
    }
    // Streaming again through the last address before the workload stops.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let transactions = w.finish().await;
    let recovering = Instant::now();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(90))
        .await;
    let recovered = recovering.elapsed();
    c.assert_running();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    assert!(
        proxy.connections() > 0,
        "the connector reached the last address"
    );
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    cdc_harness::faults::Run {
        scenario: "Postgres: failover-like restart, the server back at a new address under the same host name".into(),
        faults: n.into(),
        transactions: Some(transactions),
        tally: tally(&recs),
        max_retained_wal_bytes: Some(max_retained),
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    drop_slot(pg, &db).await;
}
