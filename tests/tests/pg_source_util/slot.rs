//! Replication slots under test: invalidating one deterministically, reading what the
//! server says about it, and the connector's admin `/metrics` (for snapshot progress).
//!
//! How a slot gets lost deterministically: the server has `max_slot_wal_keep_size = '1MB'`
//! (less than a 16 MB segment, so a checkpoint keeps no segment older than its redo point
//! for a slot); writing a row in another database and `pg_switch_wal()` a few times moves
//! the WAL end segments past the slot's `restart_lsn`, and `CHECKPOINT` then invalidates
//! the slot. The filler goes to another database so that the walsender has nothing to send
//! to a stalled client.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use cdc_harness::{PgOptions, PgServer};

use super::Connector;

/// A server of its own whose slots are invalidated once they retain more than 1 MB.
pub fn small_wal_keep_server() -> PgServer {
    PgServer::start(PgOptions::default().config("max_slot_wal_keep_size = '1MB'")).unwrap()
}

/// The end of the server's log, for failure messages.
pub fn pg_log_tail(pg: &PgServer) -> String {
    let s = std::fs::read_to_string(pg.log_path()).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The slot's `wal_status` (None: no such slot).
pub async fn slot_wal_status(pg: &PgServer, slot: &str) -> Option<String> {
    let c = pg.superuser_client("postgres").await.unwrap();
    c.query_opt(
        "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .unwrap()
    .and_then(|r| r.get(0))
}

/// The slot's `confirmed_flush_lsn` as text (None: no such slot).
pub async fn confirmed_flush_lsn(pg: &PgServer, slot: &str) -> Option<String> {
    let c = pg.superuser_client("postgres").await.unwrap();
    c.query_opt(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .unwrap()
    .and_then(|r| r.get(0))
}

/// Writes WAL past `slot`'s retention limit and checkpoints until the server reports the
/// slot lost (on a [`small_wal_keep_server`]).
pub async fn invalidate_slot(pg: &PgServer, slot: &str) {
    let c = pg.superuser_client("postgres").await.unwrap();
    c.batch_execute("CREATE TABLE IF NOT EXISTS filler (n int)")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for _ in 0..3 {
            c.batch_execute("INSERT INTO filler VALUES (1); SELECT pg_switch_wal();")
                .await
                .unwrap();
        }
        // An active slot's walsender is terminated first; the checkpoint waits for it.
        tokio::time::timeout(Duration::from_secs(30), c.batch_execute("CHECKPOINT"))
            .await
            .unwrap_or_else(|_| panic!("CHECKPOINT did not finish\n{}", pg_log_tail(pg)))
            .unwrap();
        let st = slot_wal_status(pg, slot).await;
        if st.as_deref() == Some("lost") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "slot {slot} not invalidated (wal_status {st:?})\n{}",
            pg_log_tail(pg)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The connector's admin address (the newest in its log).
pub fn admin_addr(c: &Connector) -> Option<String> {
    let log = std::fs::read_to_string(c.dir.join("connector.log")).ok()?;
    let line = log
        .lines()
        .rfind(|l| l.contains("admin server listening"))?;
    let at = line.find("127.0.0.1:")?;
    Some(
        line[at..]
            .chars()
            .take_while(|ch| ch.is_ascii_digit() || *ch == '.' || *ch == ':')
            .collect(),
    )
}

/// `GET /metrics` on the connector's admin server; None while it does not answer.
pub fn admin_metrics(c: &Connector) -> Option<String> {
    let addr = admin_addr(c)?;
    let mut s = std::net::TcpStream::connect(&addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    Some(resp)
}

/// A gauge's value in a `/metrics` text.
pub fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}
