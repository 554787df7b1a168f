//! Large transactions streamed while still open (pgoutput `streaming`), through the shipped
//! CLI, against a Postgres whose `logical_decoding_work_mem` is at its minimum (64 kB) so
//! that every transaction of more than a few hundred rows is streamed in blocks and spilled
//! by the connector until its commit.
//!
//! - A transaction of `CDC_TEST_STREAM_TX_ROWS` rows (default 2,000,000, the size)
//!   with small transactions committing while it is open: every row arrives exactly once,
//!   the small ones before it (commit order), peak RSS reported and bounded, spill emptied.
//! - Many subtransactions, some rolled back (one nested), and a streamed transaction rolled
//!   back as a whole: the log rebuilds to the table.
//! - SIGKILL while a streamed transaction is replayed: after a restart, exactly once.

mod pg_source_util;

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cdc_harness::{PgOptions, PgServer};
use pg_source_util::*;

fn server() -> &'static PgServer {
    static PG: OnceLock<PgServer> = OnceLock::new();
    PG.get_or_init(|| {
        PgServer::start(PgOptions::default().config("logical_decoding_work_mem = '64kB'"))
            .expect("start Postgres")
    })
}

#[derive(serde::Deserialize)]
struct LeanRow {
    id: i64,
    v: Option<i64>,
}

#[derive(serde::Deserialize)]
struct LeanValue {
    op: String,
    before: Option<LeanRow>,
    after: Option<LeanRow>,
}

struct Lean {
    partition: u32,
    op: u8,
    id: i64,
    v: i64,
}

/// `op`, and `id` and `v` of the row (`after`, or `before` for deletes), of every record.
fn lean_topic(log_dir: &std::path::Path, topic: &str) -> Vec<Lean> {
    let log = cdc_log::Log::open_read_only(log_dir).unwrap();
    let parts = log.describe(topic).unwrap().partitions.len() as u32;
    let mut out = Vec::new();
    for p in 0..parts {
        let mut r = log.reader(topic, p, cdc_log::StartAt::Earliest).unwrap();
        loop {
            let batch = r.poll(4 << 20).unwrap();
            if batch.is_empty() {
                break;
            }
            for rec in batch {
                let Some(v) = rec.value else { continue };
                // Typed and partial: the other fields are skipped, not built.
                let j: LeanValue = serde_json::from_slice(&v).unwrap();
                let op = j.op.as_bytes().first().copied().unwrap_or(b'?');
                let row = if op == b'd' { j.before } else { j.after };
                let row = row.unwrap_or(LeanRow { id: 0, v: None });
                out.push(Lean {
                    partition: p,
                    op,
                    id: row.id,
                    v: row.v.unwrap_or(0),
                });
            }
        }
    }
    out
}

/// Exactly-once creates, and the log rebuilt to (id → v) equals the table (compared by
/// count, Σid, Σv and Σid·v). Returns the created ids.
async fn check_lean(pg: &PgServer, db: &str, recs: &[Lean]) -> HashSet<i64> {
    let mut created = HashSet::new();
    let mut state: HashMap<i64, i64> = HashMap::new();
    for r in recs {
        match r.op {
            b'c' => assert!(created.insert(r.id), "duplicate create of id {}", r.id),
            b'r' | b'u' => {}
            b'd' => {
                state.remove(&r.id);
                continue;
            }
            _ => continue,
        }
        state.insert(r.id, r.v);
    }
    let row = pg
        .superuser_client(db)
        .await
        .unwrap()
        .query_one(
            "SELECT count(*), coalesce(sum(id), 0)::int8, coalesce(sum(v), 0)::int8, coalesce(sum(id::int8 * v), 0)::int8 FROM acct",
            &[],
        )
        .await
        .unwrap();
    let table: (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    let log = state.iter().fold((0i64, 0i64, 0i64, 0i64), |a, (id, v)| {
        (a.0 + 1, a.1 + id, a.2 + v, a.3 + id * v)
    });
    assert_eq!(log, table, "log (count, Σid, Σv, Σid·v) vs table");
    created
}

fn spill_files(c: &Connector) -> usize {
    std::fs::read_dir(c.log_dir().join("spill"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// The ids of `c` records (snapshot rows are `r`), failing on a duplicate.
fn creates(recs: &[Rec]) -> HashSet<i64> {
    let mut seen = HashSet::new();
    for r in recs {
        if let Some(v) = &r.value {
            if v["op"] == "c" {
                let id = v["after"]["id"].as_i64().unwrap();
                assert!(seen.insert(id), "duplicate create of id {id}");
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn huge_transaction_streamed_in_commit_order_with_bounded_memory() {
    let rows: i64 = std::env::var("CDC_TEST_STREAM_TX_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let pg = server();
    let (db, dir, mut c) = running_acct(pg, 10, &["public.acct"]).await;
    let started = Instant::now();
    // The big transaction stays open (holding its rows streamed to us) while two small
    // ones commit; they must be in the log before it.
    let big = pg.superuser_client(&db).await.unwrap();
    let t = Instant::now();
    big.batch_execute(&format!(
        "BEGIN; INSERT INTO acct SELECT g, 1, repeat('y', 100) FROM generate_series(100, {}) g",
        99 + rows
    ))
    .await
    .unwrap();
    eprintln!("INSERT of {rows} rows: {:.1}s", t.elapsed().as_secs_f64());
    pg.execute(&db, "INSERT INTO acct VALUES (-1, 0, 'small 1')")
        .await
        .unwrap();
    pg.execute(&db, "UPDATE acct SET v = 5 WHERE id = 1")
        .await
        .unwrap();
    big.batch_execute("UPDATE acct SET v = 2 WHERE id = 2; COMMIT")
        .await
        .unwrap();
    // 10 snapshot rows, 2 small transactions, the big one.
    let want = 10 + 2 + rows as u64 + 1;
    assert!(
        wait_topic_len(&c.log_dir(), ACCT_TOPIC, want, Duration::from_secs(900)).await,
        "{} of {want} records after 900 s\n{}",
        topic_len(&c.log_dir(), ACCT_TOPIC),
        c.output()
    );
    let in_log = started.elapsed();
    let pid = c.child.as_ref().unwrap().id();
    let hwm = vm_hwm_kib(pid).unwrap_or(0);
    let all = std::fs::read_to_string(dir.path().join("connector.log")).unwrap();
    assert!(
        all.contains("replaying it from the spill"),
        "the transaction was not streamed: {}",
        c.output()
    );
    assert_eq!(spill_files(&c), 0, "spill files left behind");
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;

    // Two million records: read lean (op, id, v), never the whole JSON at once.
    let t = Instant::now();
    let recs = lean_topic(&c.log_dir(), ACCT_TOPIC);
    eprintln!(
        "read back {} records in {:.1}s",
        recs.len(),
        t.elapsed().as_secs_f64()
    );
    let created = check_lean(pg, &db, &recs).await;
    assert_eq!(created.len() as i64, 1 + rows, "every row exactly once");
    // Commit order: within each partition, the small transactions' records come before
    // any record of the big one; the big one's rows keep their insert order.
    for p in 0..3 {
        let mut big_seen = false;
        let mut last_big = 0;
        for r in recs.iter().filter(|r| r.partition == p) {
            let small = (r.op == b'c' && r.id == -1) || (r.op == b'u' && r.v == 5);
            let big = (r.op == b'c' && r.id >= 100) || (r.op == b'u' && r.v == 2);
            assert!(
                !(small && big_seen),
                "a small transaction after the big one"
            );
            if big {
                big_seen = true;
                if r.op == b'c' {
                    assert!(
                        r.id > last_big,
                        "rows out of order: {} after {last_big}",
                        r.id
                    );
                    last_big = r.id;
                }
            }
        }
    }
    eprintln!(
        "{rows}-row streamed transaction: all in the log {:.1}s after its INSERT began; connector peak RSS {} MiB",
        in_log.as_secs_f64(),
        hwm / 1024
    );
    assert!(hwm < 256 * 1024, "peak RSS {hwm} KiB");
}

#[tokio::test(flavor = "multi_thread")]
async fn subtransaction_and_transaction_aborts_are_discarded() {
    let pg = server();
    let (db, dir, mut c) = running_acct(pg, 10, &["public.acct"]).await;
    // Each subtransaction writes enough (~2000 rows) to be streamed on its own.
    let mut sql = String::from("BEGIN;");
    for i in 0..60i64 {
        let base = 1_000_000 + i * 10_000;
        sql.push_str(&format!(
            "SAVEPOINT s{i}; UPDATE acct SET v = v + 1 WHERE id = {}; INSERT INTO acct SELECT g, {i}, repeat('s', 80) FROM generate_series({base}, {}) g;",
            1 + i % 10,
            base + 1999
        ));
        if i % 7 == 3 {
            // Nested: the inner one is released into the outer, which is rolled back.
            sql.push_str(&format!(
                "SAVEPOINT n{i}; INSERT INTO acct SELECT g, -1, 'nested' FROM generate_series({}, {}) g; RELEASE SAVEPOINT n{i};",
                base + 5000,
                base + 6999
            ));
        }
        if i % 3 == 0 {
            sql.push_str(&format!(
                "ROLLBACK TO SAVEPOINT s{i}; RELEASE SAVEPOINT s{i};"
            ));
        } else {
            sql.push_str(&format!("RELEASE SAVEPOINT s{i};"));
        }
    }
    sql.push_str("COMMIT;");
    pg.execute(&db, &sql).await.unwrap();
    // A streamed transaction rolled back as a whole.
    pg.execute(
        &db,
        "BEGIN; INSERT INTO acct SELECT g, 9, repeat('r', 80) FROM generate_series(5000000, 5020000) g; ROLLBACK;",
    )
    .await
    .unwrap();
    pg.execute(&db, "UPDATE acct SET v = 100 WHERE id = 3")
        .await
        .unwrap();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(120))
        .await;
    assert_eq!(spill_files(&c), 0, "spill files left behind");
    let all = std::fs::read_to_string(dir.path().join("connector.log")).unwrap();
    assert!(
        all.contains("replaying it from the spill"),
        "not streamed: {}",
        c.output()
    );
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    let ids = creates(&recs);
    assert!(
        !ids.contains(&5_000_000),
        "a rolled-back row reached the log"
    );
    // s3 (rolled back) held a released nested savepoint; s10's was kept.
    assert!(
        !ids.contains(&1_035_000),
        "a nested rolled-back row reached the log"
    );
    assert!(ids.contains(&1_105_000), "a nested released row is missing");
    // 40 kept subtransactions, plus the nested ones of kept s10, 17, 31, 38, 52, 59.
    assert_eq!(
        ids.len(),
        40 * 2000 + 6 * 2000,
        "released subtransactions' rows"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_a_streamed_transaction_then_exactly_once() {
    let pg = server();
    let (db, _dir, mut c) = running_acct(pg, 10, &["public.acct"]).await;
    for round in 0..3i64 {
        let base = 100 + round * 300_000;
        let writer = {
            let db = db.clone();
            tokio::spawn(async move {
                pg.execute(
                    &db,
                    &format!(
                        "INSERT INTO acct SELECT g, 1, repeat('k', 60) FROM generate_series({base}, {}) g",
                        base + 199_999
                    ),
                )
                .await
                .unwrap();
            })
        };
        // Kill at a different moment each round: while streaming, while replaying.
        tokio::time::sleep(Duration::from_millis(700 + 900 * round as u64)).await;
        c.kill();
        writer.await.unwrap();
        c.start();
    }
    assert!(
        wait_topic_len(
            &c.log_dir(),
            ACCT_TOPIC,
            10 + 3 * 200_000,
            Duration::from_secs(300)
        )
        .await,
        "{}",
        c.output()
    );
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
    let recs = lean_topic(&c.log_dir(), ACCT_TOPIC);
    assert_eq!(check_lean(pg, &db, &recs).await.len(), 3 * 200_000);
}
