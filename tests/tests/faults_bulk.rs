//! SIGKILLs of `cdc run` while it streams the bench's workload (the fault suite,
//! `tests/faults/run.sh`): the shape of `../shared/bench` — transactions of 1,000 inserts,
//! then of 1,000 updates of the first 60 % of the rows, then of 1,000 deletes of the rest;
//! 1,000,000 changes in the long form (`CDC_TEST_BULK_CHANGES`, default 100,000) — written
//! while the connector is killed `CDC_TEST_KILLS` times (default 6) at random moments and
//! started again. At the end `cdc verify --log` says the table rebuilt from the log equals
//! the database, and every key's history in the log is exactly its insert and then its
//! update or its delete: the report counts what is missing, repeated or out of order.
//!
//! Large transactions are where a kill finds the most work in flight (a transaction's
//! records are flushed as a whole, at its commit); the version-chain scenarios cover many
//! small ones.

mod pg_source_util;

use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use pg_source_util::*;

const TOPIC: &str = "t.public.orders";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_while_streaming_the_bench_workload_loses_nothing() {
    let changes = env("CDC_TEST_BULK_CHANGES", 100_000).max(10_000);
    let kills = env("CDC_TEST_KILLS", 6);
    // The bench's proportions: inserts = half the changes, updates 60 % of the rows, deletes
    // the other 40 %; transactions of 1,000 rows.
    let rows = changes / 2 / 1000 * 1000;
    let updated = rows * 3 / 5;
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, status text, amount bigint, payload text);",
    )
    .await;
    let (_dir, mut c) = temp_connector(pg, &db, &["public.orders"], "");
    c.start();
    // Streaming before the workload: its (empty) snapshot is done.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(c.dir.join("connector.log"))
        .unwrap_or_default()
        .contains("replication stream started")
    {
        c.assert_running();
        assert!(Instant::now() < deadline, "not streaming\n{}", c.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And its position stored: one streamed transaction in the log (a kill before that
    // would snapshot again, reading rows instead of their changes).
    pg.execute(&db, "INSERT INTO orders VALUES (0, 0, 'first', 0, '')")
        .await
        .unwrap();
    c.wait_records(TOPIC, 1, Duration::from_secs(60)).await;
    let writer = {
        let db = db.clone();
        tokio::spawn(async move {
            let c = pg.superuser_client(&db).await.unwrap();
            let mut sql = Vec::new();
            for a in (1..=rows).step_by(1000) {
                sql.push(format!("INSERT INTO orders SELECT g, g % 1000, 'new', g, repeat('p', 96) FROM generate_series({a}, {}) g", a + 999));
            }
            for a in (1..=updated).step_by(1000) {
                sql.push(format!("UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id BETWEEN {a} AND {}", a + 999));
            }
            for a in (updated + 1..=rows).step_by(1000) {
                sql.push(format!(
                    "DELETE FROM orders WHERE id BETWEEN {a} AND {}",
                    a + 999
                ));
            }
            let n = sql.len() as u64;
            for s in sql {
                c.batch_execute(&s).await.unwrap();
            }
            n
        })
    };
    let mut rng = Rng(0x243f6a8885a308d3);
    let mut max_retained = 0i64;
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(300 + rng.next() % 1500)).await;
        c.assert_running();
        c.kill();
        max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
        c.start();
    }
    let transactions = writer.await.unwrap();
    // Drained: the slot confirmed the workload's end (the connector confirms only what the
    // log holds durably); then `cdc verify --log` compares the table rebuilt from the log
    // with the database.
    let recovering = Instant::now();
    let expected = rows + updated + (rows - updated);
    let admin = pg.superuser_client("postgres").await.unwrap();
    let end: String = admin
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let done: Option<bool> = admin
            .query_opt(
                "SELECT confirmed_flush_lsn >= $1::text::pg_lsn FROM pg_replication_slots WHERE slot_name = $2",
                &[&end, &db],
            )
            .await
            .unwrap()
            .and_then(|r| r.get(0));
        if done == Some(true) {
            break;
        }
        c.assert_running();
        max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
        assert!(
            Instant::now() < deadline,
            "the slot did not reach {end} in 600 s ({} records in the log)\n{}",
            topic_len(&c.log_dir(), TOPIC),
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, out, err) = c.verify(&["--table", "public.orders", "--log"]);
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", c.output());
    let recovered = recovering.elapsed();
    c.assert_running();
    max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    assert_eq!(
        cdc_harness::faults::snapshots_logged(&c.dir.join("connector.log")),
        1,
        "one snapshot, before the workload\n{}",
        c.output()
    );
    let h = cdc_harness::faults::bulk_histories(&c.log_dir(), TOPIC, rows);
    let tally = cdc_harness::faults::bulk_tally(&h, updated);
    eprintln!(
        "{kills} SIGKILLs during {expected} changes in {transactions} transactions; drained {:.1} s after the workload; {tally:?}",
        recovered.as_secs_f64()
    );
    cdc_harness::faults::Run {
        scenario: format!(
            "Postgres: SIGKILL of cdc run while it streams the bench's workload ({expected} changes in transactions of 1,000)"
        ),
        faults: kills,
        transactions: Some(transactions),
        tally,
        max_retained_wal_bytes: Some(max_retained),
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    drop_slot(pg, &db).await;
}
