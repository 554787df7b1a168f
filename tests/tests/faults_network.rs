//! Network faults between `cdc run` and its database, through a TCP proxy the suite starts
//! on loopback (`cdc_harness::FaultProxy`), at random moments under a workload: the
//! connections cut, stalled for a few seconds, slowed down, and once black-holed for longer
//! than the connector's silence limit (it must notice a connection that neither answers
//! nor closes, and reconnect). At the end the table rebuilt from the log equals the
//! database and every key's history is exactly its committed versions; the figures go to
//! the fault suite's report (`tests/faults/run.sh`).
//!
//! `CDC_TEST_NET_FAULTS` sets the number of faults per source (default 6).

mod pg_source_util;

use std::time::{Duration, Instant};

use cdc_harness::faults::inject;
use cdc_harness::{passwords, FaultProxy, PgServer};
use pg_source_util::*;

fn faults() -> u32 {
    std::env::var("CDC_TEST_NET_FAULTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_through_cuts_stalls_slowness_and_a_black_hole() {
    let n = faults();
    let pg = PgServer::shared();
    let db = setup_acct(pg, 200).await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], pg.port()).into()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "{}?sslmode=disable&connect_timeout=5",
        pg.url("cdc", passwords::PG_CDC, &db)
    )
    .replace(&format!(":{}/", pg.port()), &format!(":{}/", proxy.port()));
    // A short status interval: the silence limit is then its floor, 10 s.
    let text = format!(
        "name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"{url}\"\ntables = [\"public.acct\"]\nslot = \"{db}\"\nheartbeat_interval_ms = 1000\nstatus_interval_ms = 1000\n[log]\ndir = \"{}\"\npartitions = 3\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        dir.path().join("log").display()
    );
    let mut c = Connector::with_config(dir.path(), &text);
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    let w = Running::start(pg, &db, 200, 0x2545f4914f6cdd1d);
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut max_retained = 0i64;
    let mut kinds = Vec::new();
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(300 + rng.next() % 1200)).await;
        let pause = Duration::from_millis(1000 + rng.next() % 2000);
        kinds.push(inject(&proxy, i, pause, Duration::from_secs(14)).await);
        max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
        c.assert_running();
    }
    let transactions = w.finish().await;
    let recovering = Instant::now();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(90))
        .await;
    let recovered = recovering.elapsed();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    if kinds.contains(&"black hole") {
        assert!(
            out.contains("the connection is presumed dead"),
            "the black hole was noticed by the silence limit\n{}",
            c.output()
        );
    }
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    eprintln!("faults: {kinds:?}");
    cdc_harness::faults::Run {
        scenario: "Postgres: network cut / stalled / slowed / black-holed (TCP proxy)".into(),
        faults: n.into(),
        transactions: Some(transactions),
        tally: tally(&recs),
        max_retained_wal_bytes: Some(max_retained),
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    assert!(proxy.connections() > 2, "the faults made it reconnect");
    drop_slot(pg, &db).await;
}
