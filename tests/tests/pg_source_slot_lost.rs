//! A replication slot invalidated by the server (`max_slot_wal_keep_size` exceeded,
//! `wal_status = lost`) while the log's checkpoint still depends on it, through the shipped
//! CLI:
//! - slot lost while the connector is stopped: `snapshot.mode = "initial"` stops with exit
//!   code 1 and an error that names the cause and the fix, without touching the log or the
//!   slot; `snapshot.mode = "when_needed"` then drops the slot, snapshots again (rows
//!   re-read as `op = r`) and streams on;
//! - slot lost while the connector is running (stalled with SIGSTOP, so the checkpointer
//!   terminates its walsender): it ends with exit code 1 and the same error, no restart loop;
//! - slot lost while the connector waits for disk (its disk budget full): the retained-WAL
//!   alarm fires first (gauge and ALARM line), then the connector stops with the same error.
//!
//! How the slot gets lost deterministically: each test has its own server with
//! `max_slot_wal_keep_size = '1MB'` (less than a 16 MB segment, so a checkpoint keeps no
//! segment older than its redo point for a slot); writing a row in another database and
//! `pg_switch_wal()` a few times moves the WAL end segments past the slot's `restart_lsn`,
//! and `CHECKPOINT` then invalidates the slot. The filler goes to another database so that
//! the walsender has nothing to send to a stalled client.

mod pg_source_util;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use pg_source_util::slot::{
    admin_metrics, gauge, invalidate_slot as invalidate, slot_wal_status as wal_status,
    small_wal_keep_server as server,
};
use pg_source_util::*;

/// Waits for the connector to exit on its own; its exit code.
async fn wait_exit(c: &mut Connector) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = c.child.as_mut().unwrap().try_wait().unwrap() {
            c.child = None;
            return s.code();
        }
        assert!(
            Instant::now() < deadline,
            "the connector kept running on a lost slot\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The invalidated-slot error: cause and fix.
fn assert_invalidated_error(c: &Connector) {
    let out = c.output();
    for needle in [
        "invalidated",
        "wal_status = lost",
        "snapshot.mode = \"when_needed\"",
        "max_slot_wal_keep_size",
    ] {
        assert!(
            out.contains(needle),
            "the error does not mention {needle:?}\n{out}"
        );
    }
    // One retry at most (the stream's end is transient until the slot is looked at).
    assert!(
        out.matches("restarting from the log's checkpoint").count() <= 1,
        "restart loop on a lost slot\n{out}"
    );
}

/// Per partition, the number of records the log holds (its next offset).
fn next_offsets(recs: &[Rec]) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for r in recs {
        let e = m.entry(r.partition).or_insert(0);
        *e = (*e).max(r.offset + 1);
    }
    m
}

/// The records at or after `from` (per partition).
fn since(recs: &[Rec], from: &BTreeMap<u32, u64>) -> Vec<Rec> {
    recs.iter()
        .filter(|r| r.offset >= from.get(&r.partition).copied().unwrap_or(0))
        .cloned()
        .collect()
}

/// Waits until the records written since `from` alone rebuild the table: the new snapshot
/// (and what streamed after it) holds the table's whole current state.
async fn converge_since(pg: &PgServer, db: &str, c: &Connector, from: &BTreeMap<u32, u64>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let want = table_rows(pg, db, "acct").await;
        let got = rebuild(&since(&read_topic(&c.log_dir(), ACCT_TOPIC), from));
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the records since the new snapshot rebuild {} rows, the table has {}; missing {:?}\n{}",
            got.len(),
            want.len(),
            want.keys().filter(|k| got.get(*k) != want.get(*k)).take(5).collect::<Vec<_>>(),
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `GET /metrics` on the connector's admin server (its address is in its log).
fn metrics(c: &Connector) -> String {
    admin_metrics(c).expect("the admin server answers /metrics")
}

#[tokio::test(flavor = "multi_thread")]
async fn lost_while_stopped_initial_stops_when_needed_snapshots_again() {
    let pg = server();
    let (db, dir, mut c) = running_acct(&pg, 20, &["public.acct"]).await;
    // A few changes streamed, so the checkpoint is a streaming position.
    pg.execute(
        &db,
        "INSERT INTO acct VALUES (21, 1, 's'); UPDATE acct SET v = 2 WHERE id = 3; DELETE FROM acct WHERE id = 4;",
    )
    .await
    .unwrap();
    c.converge(&pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    // Changes the stopped connector will never be able to stream: the slot is lost.
    pg.execute(
        &db,
        "INSERT INTO acct VALUES (22, 1, 'gap'); UPDATE acct SET v = 3 WHERE id = 5; DELETE FROM acct WHERE id = 6;",
    )
    .await
    .unwrap();
    invalidate(&pg, &db).await;
    let before = read_topic(&c.log_dir(), ACCT_TOPIC);

    // snapshot.mode = "initial" (the default): a definite error, not a restart loop, and
    // neither the log nor the slot touched.
    c.start();
    assert_eq!(wait_exit(&mut c).await, Some(1), "{}", c.output());
    assert_invalidated_error(&c);
    let after = read_topic(&c.log_dir(), ACCT_TOPIC);
    assert_eq!(
        next_offsets(&after),
        next_offsets(&before),
        "records appended from a lost slot\n{}",
        c.output()
    );
    assert_eq!(wal_status(&pg, &db).await.as_deref(), Some("lost"));

    // snapshot.mode = "when_needed": the lost slot is dropped and a new snapshot taken.
    let mut text = std::fs::read_to_string(&c.config).unwrap();
    text = text.replace(
        "heartbeat_interval_ms = 1000\n",
        "heartbeat_interval_ms = 1000\nslot_monitor_interval_ms = 200\n",
    );
    text.push_str("\n[snapshot]\nmode = \"when_needed\"\n");
    std::fs::write(&c.config, text).unwrap();
    let from = next_offsets(&after);
    c.start();
    converge_since(&pg, &db, &c, &from).await;
    c.assert_running();
    let fresh = since(&read_topic(&c.log_dir(), ACCT_TOPIC), &from);
    let read_again: BTreeSet<String> = fresh
        .iter()
        .filter(|r| r.value.as_ref().is_some_and(|v| v["op"] == "r"))
        .map(|r| r.key.as_ref().unwrap().to_string())
        .collect();
    let current: BTreeSet<String> = table_rows(&pg, &db, "acct").await.into_keys().collect();
    assert_eq!(
        read_again, current,
        "every current row is read again as op r"
    );
    assert!(
        c.output().contains("dropping the existing slot"),
        "{}",
        c.output()
    );
    let st = wal_status(&pg, &db).await;
    assert!(
        matches!(st.as_deref(), Some("reserved" | "extended")),
        "new slot's wal_status {st:?}"
    );

    // And it streams on from the new slot.
    pg.execute(
        &db,
        "INSERT INTO acct VALUES (23, 1, 'after'); UPDATE acct SET v = 4 WHERE id = 22;",
    )
    .await
    .unwrap();
    converge_since(&pg, &db, &c, &from).await;
    // The gauge is exported, and says the (new) slot is not lost once the monitor read it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = metrics(&c);
        if m.lines().any(|l| l == "cdc_pg_slot_wal_status_lost 0")
            && m.lines().any(|l| {
                l.strip_prefix("cdc_pg_slot_retained_wal_bytes ")
                    .is_some_and(|v| v != "0")
            })
        {
            break;
        }
        assert!(Instant::now() < deadline, "slot gauges not exported:\n{m}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn lost_while_running_stops_with_the_invalidated_error() {
    let pg = server();
    let (db, _dir, mut c) = running_acct(&pg, 20, &["public.acct"]).await;
    pg.execute(
        &db,
        "INSERT INTO acct VALUES (21, 1, 's'); UPDATE acct SET v = 2 WHERE id = 3;",
    )
    .await
    .unwrap();
    c.converge(&pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;
    let before = next_offsets(&read_topic(&c.log_dir(), ACCT_TOPIC));

    // A stalled consumer: its walsender keeps the slot active but nothing confirms.
    let pid = c.child.as_ref().unwrap().id() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    invalidate(&pg, &db).await;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);

    assert_eq!(wait_exit(&mut c).await, Some(1), "{}", c.output());
    assert_invalidated_error(&c);
    assert_eq!(
        next_offsets(&read_topic(&c.log_dir(), ACCT_TOPIC)),
        before,
        "records appended from a lost slot\n{}",
        c.output()
    );
    assert_eq!(wal_status(&pg, &db).await.as_deref(), Some("lost"));
}

/// The value of the un-labelled metric `name` on the connector's `/metrics`.
fn metric_value(c: &Connector, name: &str) -> Option<u64> {
    gauge(&metrics(c), name).map(|v| v as u64)
}

/// Polls until `metric` is `want`; panics with the connector's output after 60 s.
async fn until_metric(c: &mut Connector, metric: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric_value(c, metric) != Some(want) {
        c.assert_running();
        assert!(
            Instant::now() < deadline,
            "{metric} never became {want}\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// While the connector waits for disk (its budget is full and nothing frees it) the slot
/// falls behind: the retained-WAL alarm fires (its gauge and the ALARM line), and when
/// `max_slot_wal_keep_size` invalidates the slot the connector stops with the
/// invalidated-slot error: the wait does not hide it, and nothing restarts in a loop.
#[tokio::test(flavor = "multi_thread")]
async fn waiting_for_disk_fires_the_retained_wal_alarm_and_reports_a_lost_slot() {
    let pg = server();
    let db = setup_acct(&pg, 0).await;
    let (_dir, mut c) = temp_connector(&pg, &db, &["public.acct"], "");
    c.edit_config(|t| {
        t.replace(
            "heartbeat_interval_ms = 1000\n",
            "heartbeat_interval_ms = 1000\nslot_monitor_interval_ms = 200\nmax_retained_wal = \"4MB\"\n",
        )
        .replace(
            "partitions = 3\n",
            "partitions = 3\ndisk_budget_bytes = 65536\nsegment_bytes = 8192\nretention_ms = -1\n",
        )
    });
    c.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(c.dir.join("connector.log"))
        .unwrap_or_default()
        .contains("replication stream started")
    {
        c.assert_running();
        assert!(Instant::now() < deadline, "not streaming\n{}", c.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Small transactions until the budget is full (retention never frees it).
    let sql = pg.superuser_client(&db).await.unwrap();
    for tx in 0..200 {
        sql.batch_execute(&format!(
            "INSERT INTO acct SELECT g, 0, md5(g::text) || md5((g * 7)::text) FROM generate_series({}, {}) g",
            tx * 10 + 1,
            tx * 10 + 10
        ))
        .await
        .unwrap();
    }
    until_metric(&mut c, "cdc_pipeline_waiting_for_disk", 1).await;
    assert_eq!(metric_value(&c, "cdc_pg_slot_retained_wal_alarm"), Some(0));

    // WAL written elsewhere piles up behind the slot, which confirms nothing meanwhile.
    let other = pg.superuser_client("postgres").await.unwrap();
    other
        .batch_execute("CREATE TABLE IF NOT EXISTS filler (n int)")
        .await
        .unwrap();
    for _ in 0..2 {
        other
            .batch_execute("INSERT INTO filler VALUES (1); SELECT pg_switch_wal();")
            .await
            .unwrap();
    }
    until_metric(&mut c, "cdc_pg_slot_retained_wal_alarm", 1).await;
    assert!(
        c.output()
            .contains("ALARM: the replication slot retains more WAL"),
        "{}",
        c.output()
    );
    assert_eq!(
        metric_value(&c, "cdc_pipeline_waiting_for_disk"),
        Some(1),
        "still waiting for disk"
    );

    // The server gives up on the slot: the connector reports it and stops.
    invalidate(&pg, &db).await;
    assert_eq!(wait_exit(&mut c).await, Some(1), "{}", c.output());
    assert_invalidated_error(&c);
    // The wait ended with the source: it did not hold the error back until disk frees.
    let out = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    assert!(
        out.contains("stopped while waiting for disk"),
        "{}",
        c.output()
    );
    assert_eq!(wal_status(&pg, &db).await.as_deref(), Some("lost"));
}
