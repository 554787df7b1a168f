//! An idle captured database while another database of the same cluster writes a lot of
//! WAL: heartbeats and keepalive confirmation keep our slot moving, so the WAL it retains
//! (`pg_current_wal_lsn() - restart_lsn`) stays small.
//!
//! Why the test forces checkpoints: a logical slot's `restart_lsn` only advances when the
//! walsender decodes a running-transactions record (logged by the bgwriter about every
//! 15 s on a busy server, and by every checkpoint) and the client then confirms a position
//! past it. In production that bounds retained WAL to roughly what the cluster writes in
//! ~15 s plus one status interval; the test forces the records instead of waiting.
//!
//! `CDC_TEST_IDLE_WAL_MB` sets how much WAL the other database writes (default 64; the
//! issue's full size is 500).

mod pg_source_util;

use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use pg_source_util::*;

/// The WAL the slot holds back: how far its restart_lsn lags the server's WAL end.
async fn retained(pg: &PgServer, slot: &str) -> i64 {
    let c = pg.superuser_client("postgres").await.unwrap();
    c.query_one(
        "SELECT coalesce((pg_current_wal_lsn() - restart_lsn)::int8, -1) FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_slot_retains_little_wal_while_another_database_writes() {
    let mb: i64 = std::env::var("CDC_TEST_IDLE_WAL_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let pg = PgServer::shared();
    let quiet = pg.create_database().await.unwrap();
    pg.execute(
        &quiet,
        "SET ROLE cdc; CREATE TABLE q (id int PRIMARY KEY); INSERT INTO q VALUES (1);",
    )
    .await
    .unwrap();
    let busy = pg.create_database().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut c = connector(pg, &quiet, dir.path(), &["public.q"], "");
    c.start();
    wait_converged(
        pg,
        &quiet,
        "q",
        &c.log_dir(),
        "t.public.q",
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", c.output()));
    let c0 = pg.superuser_client("postgres").await.unwrap();
    let start: String = c0
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    // ~1 MB of WAL per 2000 rows of 500 bytes.
    for _ in 0..mb {
        pg.execute(&busy, "CREATE TABLE IF NOT EXISTS big (g int, pad text); INSERT INTO big SELECT g, repeat('x', 500) FROM generate_series(1, 2000) g;")
            .await
            .unwrap();
    }
    let written: i64 = c0
        .query_one(
            &format!("SELECT (pg_current_wal_lsn() - '{start}')::int8"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // restart_lsn moves when the walsender decodes a running-xacts record past the
    // confirmed position (the bgwriter logs one every 15 s on a busy server).
    let bound = 16 << 20;
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut last = retained(pg, &quiet).await;
    while last > bound && Instant::now() < deadline {
        pg.execute(&busy, "CHECKPOINT").await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        last = retained(pg, &quiet).await;
    }
    let dbg: String = c0
        .query_one(
            "SELECT format('confirmed %s restart %s current %s active %s', confirmed_flush_lsn, restart_lsn, pg_current_wal_lsn(), active) FROM pg_replication_slots WHERE slot_name = $1",
            &[&quiet],
        )
        .await
        .unwrap()
        .get(0);
    eprintln!("{dbg}");
    c.assert_running();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &quiet).await;
    eprintln!(
        "other database wrote {} MiB of WAL; the slot retains {} KiB; {dbg}",
        written >> 20,
        last >> 10
    );
    assert!(written >= mb << 19, "only {written} bytes of WAL written");
    assert!(
        (0..=bound).contains(&last),
        "slot retains {last} bytes (bound {bound})"
    );
    // Heartbeats are never records.
    let recs = read_topic(&c.log_dir(), "t.message");
    assert!(recs.is_empty(), "{} message records", recs.len());
}
