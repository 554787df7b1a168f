//! `format.provide_transaction_metadata` end to end, through the shipped CLI (`cdc-e2e run
//! --config …`) into the embedded log: with the key on, every streamed transaction has a
//! BEGIN and an END record on `t.transaction` (one partition), with the id of its change
//! records' `transaction.id` and their counts per table (a key change counts twice, a
//! transaction in chunks gets one pair, snapshot rows and transactions with nothing
//! captured get none); with it off (the default), no such topic is written. In Avro, the
//! records are framed with the ids of the subjects `t.transaction-key` / `-value` of the
//! embedded registry. SIGKILLed at random moments while transactions (some in chunks,
//! some changing keys) stream, it still writes exactly one BEGIN/END pair per transaction
//! with its exact counts: nothing of a transaction is durable before its END is.
//!
//! `CDC_TEST_KILLS` sets the number of SIGKILL/restart cycles (default 6).

mod golden_tx;
mod pg_source_util;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use pg_source_util::*;
use serde_json::{json, Value as Json};

const TX_TOPIC: &str = "t.transaction";
const TABLES: &[&str] = &["public.acct", "public.other"];

/// A connector on `db` with its own slot and publication `<db>_<slot>` and chunks of 50
/// events.
fn connector_on(
    pg: &PgServer,
    db: &str,
    dir: &std::path::Path,
    slot: &str,
    extra: &str,
) -> Connector {
    let c = connector(pg, db, dir, TABLES, extra);
    c.edit_config(|t| {
        t.replace(
            &format!("slot = \"{db}\""),
            &format!("slot = \"{db}_{slot}\"\npublication = \"{db}_{slot}\""),
        )
        .replace(
            "heartbeat_interval_ms = 1000\n",
            "heartbeat_interval_ms = 1000\nmax_batch_events = 50\n",
        )
    });
    c
}

/// Per transaction id: (change records that are not tombstones) per data collection, from
/// the change topics' `transaction` blocks; and how many snapshot rows carry a block.
fn changes_by_tx(log: &std::path::Path) -> (BTreeMap<String, BTreeMap<String, u64>>, usize) {
    let mut by_tx: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut snapshot_with_block = 0;
    for topic in ["t.public.acct", "t.public.other"] {
        for r in read_topic(log, topic) {
            let Some(v) = r.value else { continue };
            let Some(id) = v["transaction"]["id"].as_str() else {
                continue;
            };
            if v["op"] == "r" {
                snapshot_with_block += 1;
            }
            let dc = format!(
                "{}.{}",
                v["source"]["schema"].as_str().unwrap(),
                v["source"]["table"].as_str().unwrap()
            );
            *by_tx
                .entry(id.to_string())
                .or_default()
                .entry(dc)
                .or_default() += 1;
        }
    }
    (by_tx, snapshot_with_block)
}

/// The Avro transaction records of the log at `log`: 8, alternating BEGIN and END (the
/// datum's first field), framed with the registered key and value ids.
fn check_avro(log: &std::path::Path, key_id: u32, value_id: u32) {
    let log = cdc_log::Log::open_read_only(log).unwrap();
    let mut r = log.reader(TX_TOPIC, 0, cdc_log::StartAt::Earliest).unwrap();
    let recs = r.poll(1 << 20).unwrap();
    assert_eq!(recs.len(), 8);
    let frame = |id: u32| {
        let mut f = vec![0u8];
        f.extend_from_slice(&id.to_be_bytes());
        f
    };
    for (i, rec) in recs.iter().enumerate() {
        let (k, v) = (rec.key.as_deref().unwrap(), rec.value.as_deref().unwrap());
        assert_eq!(&k[..5], frame(key_id).as_slice());
        assert_eq!(&v[..5], frame(value_id).as_slice());
        // `status`: an Avro string (zig-zag length, bytes).
        let status: &[u8] = if i % 2 == 0 { b"\x0aBEGIN" } else { b"\x06END" };
        assert_eq!(&v[5..5 + status.len()], status, "record {i}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn begin_and_end_per_transaction_only_when_on() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc;
         CREATE TABLE acct (id int PRIMARY KEY, v bigint NOT NULL);
         CREATE TABLE other (id int PRIMARY KEY, v bigint NOT NULL);
         CREATE TABLE ignored (id int PRIMARY KEY);
         INSERT INTO acct SELECT g, 0 FROM generate_series(1, 20) g;
         INSERT INTO other VALUES (1, 0);",
    )
    .await;
    let (on_dir, off_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut on = connector_on(
        pg,
        &db,
        on_dir.path(),
        "on",
        "\n[format]\nprovide_transaction_metadata = true\n",
    );
    // The default is off: the key is not given.
    let mut off = connector_on(pg, &db, off_dir.path(), "off", "");
    let avro_dir = tempfile::tempdir().unwrap();
    let mut avro = connector_on(
        pg,
        &db,
        avro_dir.path(),
        "avro",
        "\n[format]\nvalue = \"avro\"\nprovide_transaction_metadata = true\n",
    );
    let avro_admin = avro.fixed_admin_port();
    on.start();
    off.start();
    avro.start();
    for c in [&on, &off] {
        c.converge(pg, &db, "acct", "t.public.acct", Duration::from_secs(30))
            .await;
    }
    // Its snapshot (20 rows) is in before the changes are made.
    avro.wait_records("t.public.acct", 20, Duration::from_secs(30))
        .await;
    let client = pg.superuser_client(&db).await.unwrap();
    // One transaction per call (a simple query's statements share one otherwise).
    for sql in [
        "BEGIN; INSERT INTO acct VALUES (100, 1), (101, 1); INSERT INTO other VALUES (2, 1); COMMIT;",
        "UPDATE acct SET id = 1000 WHERE id = 1",
        "INSERT INTO acct SELECT g, 2 FROM generate_series(200, 519) g",
        // Nothing captured: no BEGIN/END.
        "INSERT INTO ignored VALUES (1)",
        "DELETE FROM acct WHERE id IN (2, 3, 4)",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    // Four captured transactions: BEGIN and END each.
    if !wait_topic_len(&on.log_dir(), TX_TOPIC, 8, Duration::from_secs(60)).await {
        let recs: Vec<_> = read_topic(&on.log_dir(), TX_TOPIC)
            .into_iter()
            .map(|r| r.value)
            .collect();
        panic!("{recs:#?}\n{:?}", changes_by_tx(&on.log_dir()));
    }
    for c in [&on, &off] {
        c.converge(pg, &db, "acct", "t.public.acct", Duration::from_secs(60))
            .await;
    }
    avro.wait_records(TX_TOPIC, 8, Duration::from_secs(60))
        .await;
    let ids: Vec<u32> = ["key", "value"]
        .iter()
        .map(|s| {
            let (status, body) = http(
                &avro_admin,
                "GET",
                &format!("/subjects/{TX_TOPIC}-{s}/versions/latest"),
                None,
                "",
            );
            assert_eq!(status, 200, "{body}");
            let schema: Json = serde_json::from_str(body["schema"].as_str().unwrap()).unwrap();
            assert_eq!(
                schema["namespace"], "io.debezium.connector.common",
                "{schema}"
            );
            body["id"].as_u64().unwrap() as u32
        })
        .collect();
    assert_eq!(on.stop(), Some(0), "{}", on.output());
    assert_eq!(off.stop(), Some(0), "{}", off.output());
    assert_eq!(avro.stop(), Some(0), "{}", avro.output());
    check_avro(&avro.log_dir(), ids[0], ids[1]);

    let recs = read_topic(&on.log_dir(), TX_TOPIC);
    assert!(recs.iter().all(|r| r.partition == 0));
    assert_eq!(recs.len(), 8, "{recs:#?}");
    let (by_tx, snapshot_with_block) = changes_by_tx(&on.log_dir());
    assert_eq!(
        snapshot_with_block, 0,
        "snapshot rows are in no transaction"
    );
    let mut ends = Vec::new();
    for pair in recs.chunks(2) {
        let (b, e) = (
            pair[0].value.clone().unwrap(),
            pair[1].value.clone().unwrap(),
        );
        assert_eq!(b["status"], "BEGIN", "{b}");
        assert_eq!(
            (&b["event_count"], &b["data_collections"]),
            (&Json::Null, &Json::Null)
        );
        assert_eq!(e["status"], "END", "{e}");
        assert_eq!(b["id"], e["id"]);
        for r in pair {
            assert_eq!(r.key, Some(json!({"id": b["id"]})));
        }
        // The id is the change records' transaction.id, the counts are theirs (a key
        // change is a delete and a create: two records, two events).
        let id = e["id"].as_str().unwrap();
        let counted: BTreeMap<String, u64> = e["data_collections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["data_collection"].as_str().unwrap().to_string(),
                    d["event_count"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(by_tx.get(id), Some(&counted), "END {e}");
        assert_eq!(
            e["event_count"].as_u64(),
            Some(counted.values().sum::<u64>())
        );
        ends.push(e["data_collections"].clone());
    }
    let dc = |v: &[(&str, u64)]| {
        json!(v
            .iter()
            .map(|(c, n)| json!({"data_collection": c, "event_count": n}))
            .collect::<Vec<_>>())
    };
    assert_eq!(
        ends,
        [
            dc(&[("public.acct", 2), ("public.other", 1)]),
            dc(&[("public.acct", 2)]),
            // 320 rows: seven chunks of at most 50 events, one BEGIN/END pair.
            dc(&[("public.acct", 320)]),
            dc(&[("public.acct", 3)]),
        ]
    );
    assert_eq!(by_tx.len(), 4, "every transaction of a change has its pair");

    // Off: the same changes, no transaction topic.
    assert_eq!(changes_by_tx(&off.log_dir()).0.len(), 4);
    let log = cdc_log::Log::open_read_only(off.log_dir()).unwrap();
    assert!(
        !log.topics().iter().any(|t| t == TX_TOPIC),
        "{:?}",
        log.topics()
    );
    for slot in ["on", "off", "avro"] {
        let c = pg.superuser_client("postgres").await.unwrap();
        let _ = c
            .execute(
                "SELECT pg_drop_replication_slot($1)",
                &[&format!("{db}_{slot}")],
            )
            .await;
    }
}

/// Transactions until `stop`: 1 to 120 inserted rows (more than a 50-event chunk in about
/// half of them), an update, and every fifth a key change. Counts the committed ones.
async fn workload(pg: &'static PgServer, db: String, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    let mut c = pg.superuser_client(&db).await.unwrap();
    let (mut next, mut x) = (1000i64, 0x2545f4914f6cdd1du64);
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = 1 + (x % 120) as i64;
        let mut sql = format!(
            "BEGIN; INSERT INTO acct SELECT g, 0 FROM generate_series({next}, {}) g;
             UPDATE acct SET v = v + 1 WHERE id = {};",
            next + n - 1,
            1 + (x >> 8) % 20
        );
        if x % 5 == 0 {
            sql.push_str(&format!(
                "UPDATE acct SET id = id + 1000000 WHERE id = {next};"
            ));
        }
        sql.push_str("COMMIT;");
        match c.batch_execute(&sql).await {
            Ok(()) => {
                next += n;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                let _ = c.batch_execute("ROLLBACK").await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Ok(n) = pg.superuser_client(&db).await {
                    c = n;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_leaves_one_whole_pair_per_transaction() {
    let kills: u32 = std::env::var("CDC_TEST_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let started = Instant::now();
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc;
         CREATE TABLE acct (id int PRIMARY KEY, v bigint NOT NULL);
         CREATE TABLE other (id int PRIMARY KEY, v bigint NOT NULL);
         INSERT INTO acct SELECT g, 0 FROM generate_series(1, 20) g;",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = connector_on(
        pg,
        &db,
        dir.path(),
        "kill",
        "\n[format]\nprovide_transaction_metadata = true\n",
    );
    c.start();
    c.converge(pg, &db, "acct", "t.public.acct", Duration::from_secs(30))
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let w = tokio::spawn(workload(pg, db.clone(), stop.clone(), done.clone()));
    let mut x = 88172645463325252u64;
    for i in 0..kills {
        if i > 0 {
            c.start();
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        tokio::time::sleep(Duration::from_millis(300 + x % 1200)).await;
        c.assert_running();
        c.kill();
    }
    stop.store(true, Ordering::Relaxed);
    w.await.unwrap();
    c.start();
    c.converge(pg, &db, "acct", "t.public.acct", Duration::from_secs(60))
        .await;
    // Every transaction's pair is in (the last one's END is durable with its changes).
    let want = 2 * (done.load(Ordering::Relaxed));
    c.wait_records(TX_TOPIC, want, Duration::from_secs(30))
        .await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let got: BTreeMap<String, Vec<cdc_harness::golden::Record>> = ["t.public.acct", TX_TOPIC]
        .iter()
        .map(|t| {
            (
                t.to_string(),
                cdc_harness::golden::read_topic(&c.log_dir(), t),
            )
        })
        .collect();
    assert_eq!(
        got[TX_TOPIC].len() as u64,
        want,
        "one pair per committed transaction"
    );
    let mut cmp = cdc_harness::golden::Comparison::new(&[]);
    golden_tx::check_consistent(
        "sigkill",
        &got,
        TX_TOPIC,
        |_, p| {
            format!(
                "{}.{}",
                p["source"]["schema"].as_str().unwrap_or_default(),
                p["source"]["table"].as_str().unwrap_or_default()
            )
        },
        &mut cmp,
    );
    cmp.finish([], started);
    eprintln!(
        "{kills} SIGKILLs, {} transactions, {} transaction records checked",
        done.load(Ordering::Relaxed),
        got[TX_TOPIC].len()
    );
    let c = pg.superuser_client("postgres").await.unwrap();
    let _ = c
        .execute(
            "SELECT pg_drop_replication_slot($1)",
            &[&format!("{db}_kill")],
        )
        .await;
}
