//! Kafka as the log, end to end through the shipped CLI (`cdc-e2e run`) against a real
//! Kafka-protocol broker started by the harness (noida-db's Kafka API: it filters aborted
//! transactions for `read_committed` consumers, which tansu does not), read back with
//! Confluent's Python client (tests/kafka-clients/read_topics.py) and, for the records'
//! comparison, Apache Kafka's Java client too (tests/kafka-clients/ReadTopics.java):
//!
//! - the records a connector writes to Kafka are the ones a connector on the same changes
//!   writes to the embedded log: same keys, values (but the processing time `ts_ms` /
//!   `ts_us` / `ts_ns`), headers and partitions, in the same order per partition;
//! - the source position is in `<name>.offsets` and a restart resumes from it;
//! - `cdc log tail --follow` on the Kafka configuration prints the records there, then a
//!   new one as it is committed;
//! - SIGKILLed many times mid-stream, with transactions: a `read_committed` consumer sees
//!   every change exactly once, in order;
//! - a broker that is not up yet when `cdc run` starts: it waits and retries, then writes;
//! - a broker stopped for 3 s (`CDC_TEST_BROKER_OUTAGE_SECS`) and restarted mid-stream:
//!   the connector resumes by itself from the position in Kafka, and every change is there
//!   once;
//! - an existing topic with another partition count, and `[log]` keys of the wrong kind,
//!   are clear errors.
//!
//! `CDC_TEST_KAFKA_KILLS` (else `CDC_TEST_KILLS`) sets the number of SIGKILL/restart
//! cycles (default 5); the kill tests and the broker outage report to the fault suite.

mod kafka_util;
mod pg_source_util;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use cdc_harness::{NoidaKafka, PgServer};
use kafka_util::*;
use pg_source_util::*;
use serde_json::Value as Json;

const TOPIC: &str = "t.public.acct";

/// The embedded log's records of `topic` as a consumer sees them.
fn read_embedded(log: &std::path::Path, topic: &str) -> Vec<Seen> {
    read_topic(log, topic)
        .into_iter()
        .map(|r| Seen {
            partition: r.partition,
            key: r.key.map(|k| k.to_string()),
            value: r.value.as_ref().map(masked),
            headers: r.headers,
        })
        .collect()
}

/// A connector of table `acct` on `db` with its own slot, writing to Kafka at `brokers`.
fn kafka_connector(
    pg: &PgServer,
    db: &str,
    dir: &std::path::Path,
    slot: &str,
    brokers: &str,
    extra_log: &str,
) -> Connector {
    std::fs::create_dir_all(dir).unwrap();
    let c = connector(pg, db, dir, &["public.acct"], "");
    c.edit_config(|t| {
        t.replace(
            &format!("slot = \"{db}\""),
            &format!("slot = \"{db}_{slot}\"\npublication = \"{db}_{slot}\""),
        )
        .replace(
            "partitions = 3\n",
            &format!("partitions = 3\ntype = \"kafka\"\nbrokers = \"{brokers}\"\nkafka_timeout_ms = 10000\n{extra_log}"),
        )
    });
    c
}

fn embedded_connector(pg: &PgServer, db: &str, dir: &std::path::Path, slot: &str) -> Connector {
    std::fs::create_dir_all(dir).unwrap();
    let c = connector(pg, db, dir, &["public.acct"], "");
    c.edit_config(|t| {
        t.replace(
            &format!("slot = \"{db}\""),
            &format!("slot = \"{db}_{slot}\"\npublication = \"{db}_{slot}\""),
        )
    });
    c
}

/// Waits until the connector stored a streaming position in `t.offsets` (its snapshot is
/// done): a kill before that snapshots again, which reads rows, not their changes.
async fn wait_streaming(python: &PathBuf, brokers: &str, kc: &Connector) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_kafka(python, brokers, &["t.offsets"])
        .iter()
        .all(|(_, _, v)| v["type"] == "snapshot_incomplete")
    {
        assert!(
            Instant::now() < deadline,
            "no position stored\n{}",
            kc.output()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

const SCHEMA: &str = "SET ROLE cdc; CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);
     INSERT INTO acct SELECT g, 'o' || g, g * 10 FROM generate_series(1, 50) g;";

/// Inserts, updates, deletes, a key change and a truncate, in several transactions.
async fn workload(pg: &PgServer, db: &str) {
    pg.execute(
        db,
        "INSERT INTO acct SELECT g, 'n' || g, g FROM generate_series(51, 250) g;
         UPDATE acct SET balance = balance + 1 WHERE id % 3 = 0;
         DELETE FROM acct WHERE id % 7 = 0;
         UPDATE acct SET id = 1000 WHERE id = 1;
         BEGIN; UPDATE acct SET owner = 'x' WHERE id < 20; INSERT INTO acct VALUES (2000, 'y', 2); COMMIT;
         TRUNCATE acct;
         INSERT INTO acct SELECT g, 'after' || g, g FROM generate_series(1, 30) g;",
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn records_in_kafka_are_the_embedded_logs_and_the_position_is_in_kafka() {
    let Some(python) = python() else { return };
    let pg = PgServer::shared();
    let kafka = NoidaKafka::start().unwrap();
    let db = database_with(pg, SCHEMA).await;
    let dir = tempfile::tempdir().unwrap();
    let mut emb = embedded_connector(pg, &db, &dir.path().join("e"), "e");
    let mut kc = kafka_connector(pg, &db, &dir.path().join("k"), "k", &kafka.brokers(), "");
    emb.start();
    kc.start();
    // Both snapshots done (50 rows each) before the changes.
    assert!(
        wait_topic_len(&emb.log_dir(), TOPIC, 50, Duration::from_secs(60)).await,
        "{}",
        emb.output()
    );
    let got = wait_kafka(
        &python,
        &kafka.brokers(),
        TOPIC,
        50,
        Duration::from_secs(60),
    )
    .await;
    assert!(got.len() >= 50, "{}", kc.output());
    workload(pg, &db).await;
    // The workload's last change (after the truncate, which `wait_converged` does not
    // apply) is in the embedded log.
    let deadline = Instant::now() + Duration::from_secs(60);
    let want = loop {
        let want = read_embedded(&emb.log_dir(), TOPIC);
        if want.iter().any(|s| {
            s.value
                .as_deref()
                .is_some_and(|v| v.contains("\"after30\""))
        }) {
            break want;
        }
        assert!(Instant::now() < deadline, "{}", emb.output());
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let got = wait_kafka(
        &python,
        &kafka.brokers(),
        TOPIC,
        want.len(),
        Duration::from_secs(60),
    )
    .await;
    let got: Vec<Seen> = got.into_iter().map(|(_, s, _)| s).collect();
    // Per partition, in order (the order across partitions is the readers' own).
    let per = |v: &[Seen]| {
        let mut m: BTreeMap<u32, Vec<Seen>> = BTreeMap::new();
        for s in v {
            m.entry(s.partition).or_default().push(s.clone());
        }
        m
    };
    assert_eq!(
        per(&got),
        per(&want),
        "Kafka's records differ from the embedded log's\n{}",
        kc.output()
    );
    // Apache Kafka's Java consumer reads the same records.
    if let Some(java) = java_reader() {
        let by_java: Vec<Seen> = read_kafka_java(&java, &kafka.brokers(), &[TOPIC])
            .into_iter()
            .map(|(_, s, _)| s)
            .collect();
        assert_eq!(
            per(&by_java),
            per(&got),
            "the Java consumer reads other records"
        );
    }
    // `cdc log` on the Kafka configuration reads the cluster.
    let cdc_log = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
            .arg("log")
            .args(args)
            .arg("--config")
            .arg(&kc.config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cdc log {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(cdc_log(&["topics"])
        .lines()
        .any(|l| l == format!("{TOPIC}\t3")));
    assert!(cdc_log(&["describe", TOPIC]).contains("Partitions: 3"));
    let tailed: Vec<(Option<String>, Option<String>)> =
        cdc_log(&["tail", TOPIC, "--partition", "1"])
            .lines()
            .map(|l| {
                let r: Json = serde_json::from_str(l).unwrap();
                (
                    (!r["key"].is_null()).then(|| r["key"].to_string()),
                    (!r["value"].is_null()).then(|| masked(&r["value"])),
                )
            })
            .collect();
    let want_1: Vec<(Option<String>, Option<String>)> = got
        .iter()
        .filter(|s| s.partition == 1)
        .map(|s| (s.key.clone(), s.value.clone()))
        .collect();
    assert_eq!(tailed, want_1, "cdc log tail of partition 1");
    // The truncate went to every partition, each copy saying so.
    let truncates: Vec<&Seen> = got
        .iter()
        .filter(|s| {
            s.value
                .as_deref()
                .is_some_and(|v| v.contains("\"op\":\"t\""))
        })
        .collect();
    assert_eq!(truncates.len(), 3, "{truncates:?}");

    // The position: in t.offsets, keyed by the connector's name, a source position.
    let offsets = read_kafka(&python, &kafka.brokers(), &["t.offsets"]);
    let last = offsets.last().expect("a position in t.offsets");
    assert_eq!(last.1.key.as_deref(), Some("t"));
    assert!(
        last.2.get("lsn").is_some() || last.2.get("type").is_some(),
        "{:?}",
        last.2
    );

    // `cdc log tail --follow` prints what is there, then each new record as it comes.
    let mut follower = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(["log", "tail", TOPIC, "--follow", "--config"])
        .arg(&kc.config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let out = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if lines_tx.send(l).is_err() {
                break;
            }
        }
    });
    for i in 0..got.len() {
        lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("--follow printed {i} of {} records", got.len()));
    }

    // A restart resumes from it: nothing is written twice.
    kc.stop();
    kc.start();
    pg.execute(&db, "INSERT INTO acct VALUES (5000, 'late', 5)")
        .await
        .unwrap();
    let n = want.len() + 1;
    let got = wait_kafka(&python, &kafka.brokers(), TOPIC, n, Duration::from_secs(60)).await;
    assert_eq!(got.len(), n, "after a restart\n{}", kc.output());
    assert!(got
        .iter()
        .any(|(_, s, _)| s.key.as_deref() == Some("{\"id\":5000}")));
    // The follower printed the new record, and nothing twice.
    let late = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("--follow printed the new record");
    assert!(late.contains("\"key\":{\"id\":5000}"), "{late}");
    assert!(lines.recv_timeout(Duration::from_millis(500)).is_err());
    let _ = follower.kill();
    let _ = follower.wait();
    kc.stop();
    emb.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_mid_stream_a_read_committed_consumer_sees_each_change_once() {
    killed_mid_stream(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_mid_stream_without_transactions_at_least_once_in_order_per_key() {
    killed_mid_stream(false).await;
}

/// SIGKILLs during a workload of 60 transactions; with `transactions`, each change is read
/// once; without, at least once, and per key the first copies are in commit order (a
/// restart resends a suffix of what it had not stored the position of).
async fn killed_mid_stream(transactions: bool) {
    let Some(python) = python() else { return };
    let kills: usize = ["CDC_TEST_KAFKA_KILLS", "CDC_TEST_KILLS"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(5);
    let pg = PgServer::shared();
    let kafka = NoidaKafka::start().unwrap();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut kc = kafka_connector(
        pg,
        &db,
        dir.path(),
        "k",
        &kafka.brokers(),
        &format!("transactions = {transactions}\n"),
    );
    kc.start();
    wait_streaming(&python, &kafka.brokers(), &kc).await;
    // Streaming (its empty snapshot done, the first transaction in Kafka) before the kills:
    // a kill before the snapshot's position is stored snapshots again, which reads the
    // rows' latest state instead of their changes.
    pg.execute(
        &db,
        "INSERT INTO acct SELECT g, 'o', 0 FROM generate_series(1, 20) g;
         UPDATE acct SET balance = 0 WHERE id BETWEEN 1 AND 20;",
    )
    .await
    .unwrap();
    let first = wait_kafka(
        &python,
        &kafka.brokers(),
        TOPIC,
        40,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(first.len(), 40, "{}", kc.output());
    // Transactions of 20 inserts, then updates of them, while the connector is killed:
    // at least 59, and on until the kills are done.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let db = db.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut t = 1i64;
            while t < 60 || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let base = t * 20;
                pg.execute(
                    &db,
                    &format!(
                        "INSERT INTO acct SELECT g, 'o', 0 FROM generate_series({}, {}) g;
                         UPDATE acct SET balance = {t} WHERE id BETWEEN {} AND {};",
                        base + 1,
                        base + 20,
                        base.max(1),
                        base + 20
                    ),
                )
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(40)).await;
                t += 1;
            }
            t // transactions, the first one (ids 1..=20) included
        })
    };
    let mut rng = Rng(0x510e527fade682d1 ^ transactions as u64);
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(300 + rng.next() % 700)).await;
        kc.kill();
        kc.start();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let txs = writer.await.unwrap();
    let recovering = Instant::now();
    // Every change: 20 inserts per transaction and the updates: 20 in the first
    // transaction, then 21 in each of the others (their range starts at the previous
    // one's last row).
    let rows = 20 * txs as usize;
    let changes_total = rows + 20 + (txs as usize - 1) * 21;
    let c = pg.superuser_client(&db).await.unwrap();
    let want_rows: i64 = c
        .query_one("SELECT count(*) FROM acct", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(want_rows, rows as i64);
    // Until every change is there (without transactions, some more than once).
    let deadline = Instant::now() + Duration::from_secs(120);
    let got = loop {
        let got = read_kafka(&python, &kafka.brokers(), &[TOPIC]);
        let distinct: std::collections::HashSet<&Seen> = got.iter().map(|(_, s, _)| s).collect();
        if distinct.len() >= changes_total || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let recovered = recovering.elapsed();
    let mut per_key: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    for (_, s, v) in &got {
        if v.is_null() {
            continue;
        }
        per_key.entry(s.key.clone().unwrap()).or_default().push((
            v["op"].as_str().unwrap().to_string(),
            v["after"]["balance"].as_i64().unwrap(),
        ));
    }
    // Its insert, then the update of its own transaction, then (for the first row of a
    // range) the next transaction's update: each once, in order.
    let want_of = |id: i64| {
        let t = (id - 1) / 20;
        let mut want = vec![("c".to_string(), 0), ("u".to_string(), t)];
        if id % 20 == 0 && t + 1 < txs {
            want.push(("u".to_string(), t + 1));
        }
        want
    };
    // The fault suite's tally: per key, what is missing, the copies beyond the first, and
    // first copies out of commit order.
    let by_id: BTreeMap<i64, &Vec<(String, i64)>> = per_key
        .iter()
        .map(|(k, v)| {
            let id = serde_json::from_str::<Json>(k).unwrap()["id"]
                .as_i64()
                .unwrap();
            (id, v)
        })
        .collect();
    let mut tally = cdc_harness::faults::Tally::default();
    for id in 1..=rows as i64 {
        let want = want_of(id);
        let Some(changes) = by_id.get(&id) else {
            tally.lost += want.len() as u64;
            continue;
        };
        let mut seen = std::collections::HashSet::new();
        let firsts: Vec<_> = changes
            .iter()
            .filter(|c| seen.insert(*c))
            .cloned()
            .collect();
        tally.changes += changes.len() as u64;
        tally.duplicated += (changes.len() - firsts.len()) as u64;
        tally.lost += want.iter().filter(|w| !firsts.contains(w)).count() as u64;
        let kept: Vec<_> = firsts.iter().filter(|f| want.contains(f)).collect();
        let wanted: Vec<_> = want.iter().filter(|w| firsts.contains(w)).collect();
        if kept != wanted {
            tally.reordered += 1;
        }
    }
    let run = cdc_harness::faults::Run {
        scenario: format!(
            "Postgres → Kafka log ({}): SIGKILL of cdc run at random moments",
            if transactions {
                "transactions, read_committed"
            } else {
                "no transactions: at least once"
            }
        ),
        faults: kills as u64,
        transactions: Some(txs as u64),
        tally,
        max_retained_wal_bytes: None,
        recovery: recovered,
        ..Default::default()
    };
    if transactions {
        run.report_and_check();
        assert_eq!(got.len(), changes_total, "every change once");
    } else {
        run.report_and_check_at_least_once();
    }
    assert_eq!(per_key.len(), rows, "{}", kc.output());
    for (k, changes) in &per_key {
        let id: i64 = serde_json::from_str::<Json>(k).unwrap()["id"]
            .as_i64()
            .unwrap();
        let want = want_of(id);
        let mut firsts = changes.clone();
        if !transactions {
            // Resent copies of changes already read: keep the first of each.
            let mut seen = std::collections::HashSet::new();
            firsts.retain(|c| seen.insert(c.clone()));
        }
        assert_eq!(firsts, want, "key {k}: {changes:?}");
    }
    kc.stop();
}

/// What the connector says when the log lost commits it had acknowledged.
const LOST_ACKNOWLEDGED: &str = "lost commits it had acknowledged";

/// The broker down for `CDC_TEST_BROKER_OUTAGE_SECS` (default 3; the fault suite's long
/// form: 600) while the source writes transactions of 20 inserts every 50 ms.
///
/// noida-db 0.2.3 loses its last acknowledged transactions when it is restarted in
/// about one restart in twenty here (`tests/kafka-clients/noida_restart_loss.py` shows it
/// without the connector: commits that `commit_transaction` returned for are gone after
/// the restart). No connector can deliver those changes: the slot was confirmed past them.
/// What the connector must do then is notice and stop with a clear error (the stored
/// position went back below the slot's confirmed one), which this test checks, and then
/// the scenario runs again on a fresh broker, up to three times.
#[tokio::test(flavor = "multi_thread")]
async fn the_broker_restarted_mid_stream_loses_nothing_and_duplicates_nothing() {
    let Some(python) = python() else { return };
    let outage = Duration::from_secs(
        std::env::var("CDC_TEST_BROKER_OUTAGE_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3),
    );
    for attempt in 1..=3 {
        match broker_restart(python.clone(), outage).await {
            Some(run) => {
                run.report_and_check();
                return;
            }
            None => eprintln!(
                "attempt {attempt}: the broker lost commits it had acknowledged on its restart, and the connector stopped saying so; running the scenario again"
            ),
        }
    }
    panic!("the broker lost acknowledged commits in three restarts out of three");
}

/// One run of the broker-restart scenario: its figures, or `None` when the broker lost
/// commits it had acknowledged and the connector stopped with [`LOST_ACKNOWLEDGED`].
async fn broker_restart(python: PathBuf, outage: Duration) -> Option<cdc_harness::faults::Run> {
    let pg = PgServer::shared();
    let kafka = NoidaKafka::start().unwrap();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut kc = kafka_connector(pg, &db, dir.path(), "k", &kafka.brokers(), "");
    kc.edit_config(|t| t.replace("kafka_timeout_ms = 10000", "kafka_timeout_ms = 2000"));
    kc.start();
    wait_streaming(&python, &kafka.brokers(), &kc).await;
    // Transactions of 20 inserts, 50 ms apart, from before the broker stops until after
    // it is back.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let db = db.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut t = 0;
            while t < 40 || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pg.execute(
                    &db,
                    &format!(
                        "INSERT INTO acct SELECT g, 'o', {t} FROM generate_series({}, {}) g",
                        t * 20 + 1,
                        t * 20 + 20
                    ),
                )
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
                t += 1;
            }
            t
        })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    // While the broker is down nothing becomes durable, so the slot holds the WAL.
    let slot = format!("{db}_k");
    let max_retained = tokio::task::block_in_place(|| {
        let rt = tokio::runtime::Handle::current();
        let mut max = 0i64;
        kafka
            .restart_after(|| {
                let until = Instant::now() + outage;
                while Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(500).min(outage));
                    let r = rt.block_on(retained_wal(pg, &slot)).unwrap_or(0);
                    max = max.max(r);
                }
            })
            .unwrap();
        max
    });
    let back = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let txs = writer.await.unwrap();
    let rows = 20 * txs as usize;
    let deadline = Instant::now() + Duration::from_secs(120 + outage.as_secs());
    let got = loop {
        let got = read_kafka(&python, &kafka.brokers(), &[TOPIC]);
        if got.len() >= rows || Instant::now() > deadline {
            break got;
        }
        if kc.output().contains(LOST_ACKNOWLEDGED) {
            let code = kc
                .wait_exit(
                    Duration::from_secs(30),
                    "the connector keeps running after the log lost acknowledged commits",
                )
                .await;
            assert_eq!(code, Some(1), "{}", kc.output());
            assert!(got.len() < rows, "{}", kc.output());
            return None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let recovered = back.elapsed();
    kc.assert_running();
    let keys: std::collections::BTreeSet<&str> = got
        .iter()
        .filter_map(|(_, s, _)| s.key.as_deref())
        .collect();
    let run = cdc_harness::faults::Run {
        scenario: format!(
            "Postgres → Kafka log (transactions): the broker down {} s while the source writes",
            outage.as_secs()
        ),
        faults: 1,
        transactions: Some(txs as u64),
        tally: cdc_harness::faults::Tally {
            changes: got.len() as u64,
            lost: (rows - keys.len()) as u64,
            duplicated: (got.len() - keys.len()) as u64,
            reordered: 0,
        },
        max_retained_wal_bytes: Some(max_retained),
        recovery: recovered,
        ..Default::default()
    };
    if keys.len() != rows {
        let have: std::collections::BTreeSet<i64> = got
            .iter()
            .filter_map(|(_, _, v)| v["after"]["id"].as_i64())
            .collect();
        let missing: Vec<i64> = (1..=rows as i64).filter(|i| !have.contains(i)).collect();
        let why = explain_missing(&python, &kafka.brokers(), &missing);
        let confirmed: Option<String> = match pg.superuser_client("postgres").await {
            Ok(c) => c
                .query_opt(
                    "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .await
                .ok()
                .flatten()
                .and_then(|r| r.get(0)),
            Err(_) => None,
        };
        run.report();
        panic!(
            "every row once: {} of {rows} seen, missing ids {missing:?}\nslot {slot} confirmed_flush_lsn {confirmed:?}\n{why}\nbroker log tail:\n{}\n{}",
            keys.len(),
            tail_of(&kafka.log_path(), 60),
            kc.output()
        );
    }
    assert_eq!(got.len(), rows, "no change twice\n{}", kc.output());
    kc.stop();
    Some(run)
}

/// The last `n` lines of a file (for a failure message).
fn tail_of(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Why `missing` ids are not in a `read_committed` read of [`TOPIC`]: where their records
/// are with `read_uncommitted` (written but aborted, or never written), the committed
/// records around them, and the positions stored in `t.offsets` (both isolations): a
/// position covering a change whose record is not committed is a loss on our side or the
/// broker's, a missing record without such a position is not.
fn explain_missing(python: &PathBuf, brokers: &str, missing: &[i64]) -> String {
    use std::fmt::Write;
    let value = |r: &Json| -> Json {
        r["value"]
            .as_str()
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or(Json::Null)
    };
    let brief = |r: &Json| -> String {
        let v = value(r);
        format!(
            "p{} @{} id={} op={} lsn={} txId={}",
            r["partition"],
            r["offset"],
            v["after"]["id"],
            v["op"],
            v["source"]["lsn"],
            v["source"]["txId"]
        )
    };
    let mut out = String::new();
    for uncommitted in [false, true] {
        let what = if uncommitted {
            "read_uncommitted"
        } else {
            "read_committed"
        };
        let recs = read_kafka_raw(python, brokers, &[TOPIC], uncommitted);
        let hits: Vec<&Json> = recs
            .iter()
            .filter(|r| {
                value(r)["after"]["id"]
                    .as_i64()
                    .is_some_and(|i| missing.contains(&i))
            })
            .collect();
        let _ = writeln!(
            out,
            "{what}: {} records of {TOPIC}, {} of the missing ids:",
            recs.len(),
            hits.len()
        );
        for r in hits.iter().take(40) {
            let _ = writeln!(out, "  {}", brief(r));
        }
        // Offset gaps per partition: commit/abort markers and aborted records.
        let mut last: BTreeMap<i64, i64> = BTreeMap::new();
        for r in &recs {
            let (p, o) = (
                r["partition"].as_i64().unwrap_or(-1),
                r["offset"].as_i64().unwrap_or(-1),
            );
            if let Some(prev) = last.insert(p, o) {
                if o > prev + 2 {
                    let _ = writeln!(out, "  gap in p{p}: {prev} -> {o}, next {}", brief(r));
                }
            }
        }
        let positions = read_kafka_raw(python, brokers, &["t.offsets"], uncommitted);
        let _ = writeln!(out, "{what}: t.offsets, last of {}:", positions.len());
        for r in positions.iter().rev().take(12).rev() {
            let _ = writeln!(
                out,
                "  @{} {}",
                r["offset"],
                r["value"].as_str().unwrap_or("null")
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_that_comes_up_late_is_waited_for() {
    let Some(python) = python() else { return };
    let pg = PgServer::shared();
    let db = database_with(pg, SCHEMA).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let brokers = format!("127.0.0.1:{port}");
    let mut kc = kafka_connector(pg, &db, dir.path(), "k", &brokers, "");
    // Requests time out fast, so that the connector gives up on connecting and retries.
    kc.edit_config(|t| t.replace("kafka_timeout_ms = 10000", "kafka_timeout_ms = 1000"));
    kc.start();
    tokio::time::sleep(Duration::from_secs(4)).await;
    kc.assert_running();
    let kafka = NoidaKafka::start_on(port)
        .unwrap()
        .expect("the port is free");
    let got = wait_kafka(
        &python,
        &kafka.brokers(),
        TOPIC,
        50,
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(got.len(), 50, "{}", kc.output());
    assert!(kc.output().contains("not reachable"), "{}", kc.output());
    kc.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_with_another_partition_count_is_a_clear_error() {
    let Some(python) = python() else { return };
    let pg = PgServer::shared();
    let kafka = NoidaKafka::start().unwrap();
    let db = database_with(pg, SCHEMA).await;
    // The table's topic exists already, with 3 partitions (made by another program).
    let out = Command::new(&python)
        .arg("-c")
        .arg(format!(
            "from confluent_kafka.admin import AdminClient, NewTopic\n\
             a = AdminClient({{'bootstrap.servers': '{}'}})\n\
             [f.result() for f in a.create_topics([NewTopic('{TOPIC}', 3, 1)]).values()]",
            kafka.brokers()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let mut kc = kafka_connector(pg, &db, dir.path(), "a", &kafka.brokers(), "");
    kc.edit_config(|t| t.replace("partitions = 3\n", "partitions = 5\n"));
    kc.start();
    let code = kc
        .wait_exit(
            Duration::from_secs(60),
            "the connector should stop on the mismatch",
        )
        .await;
    assert_eq!(code, Some(1), "{}", kc.output());
    assert_mentions(
        &kc.output(),
        &[
            "t.public.acct",
            "has 3 partitions",
            "partitions = 5",
            "per-key order",
        ],
    );
}

#[test]
fn kafka_keys_of_the_wrong_kind_are_named() {
    let dir = tempfile::tempdir().unwrap();
    for (log, key) in [
        ("type = \"kafka\"\n", "log.brokers"),
        ("brokers = \"127.0.0.1:1\"\n", "log.brokers"),
        (
            "type = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n[log.kafka]\n\"enable.idempotence\" = \"false\"\n",
            "enable.idempotence",
        ),
        (
            "type = \"kafka\"\nbrokers = \"127.0.0.1:1\"\ndisk_budget_bytes = 1000000\n",
            "log.disk_budget_bytes",
        ),
        // A sink's hold on the embedded log's retention means nothing to Kafka's.
        (
            "type = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n[[sink]]\nname = \"r\"\ntype = \"redis\"\nurl = \"redis://127.0.0.1:1/0\"\nretention = \"protect\"\n",
            "sink[0].retention",
        ),
    ] {
        let c = Connector::with_config(
            dir.path(),
            &format!("name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"postgres://u@127.0.0.1:1/d\"\n[log]\ndir = \"{}\"\n{log}", dir.path().join("log").display()),
        );
        let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
            .args(["run", "--config"])
            .arg(&c.config)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{log}: {err}");
        assert!(err.contains(key), "{log}: {err}");
    }
    // `cdc log produce` is the embedded log's: on a Kafka config it says what to use.
    let c = Connector::with_config(
        dir.path(),
        &format!("name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"postgres://u@127.0.0.1:1/d\"\n[log]\ndir = \"{}\"\ntype = \"kafka\"\nbrokers = \"127.0.0.1:1\"\n", dir.path().join("log").display()),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(["log", "delete-group", "g", "--config"])
        .arg(&c.config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("kafka-consumer-groups"), "{err}");
}

/// The table rebuilt from Kafka records of `topic`: per key (JSON text) the newest
/// change's `after`, a delete removing it (tombstones are the deletes' echo).
fn rebuilt(recs: &[(String, Seen, Json)], topic: &str) -> BTreeMap<String, Json> {
    let mut m = BTreeMap::new();
    for (t, s, v) in recs {
        let (true, Some(k)) = (t == topic, &s.key) else {
            continue;
        };
        match v["op"].as_str() {
            Some("c" | "r" | "u") => {
                m.insert(k.clone(), v["after"].clone());
            }
            Some("d") => {
                m.remove(k);
            }
            _ => {}
        }
    }
    m
}

/// A re-snapshot over Kafka (the slot lost while the connector was down, under
/// `snapshot.mode = "when_needed"`): the rows deleted meanwhile get a delete record and a
/// tombstone in Kafka, so the table rebuilt from the topic equals the table.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_snapshot_over_kafka_deletes_the_rows_gone_meanwhile() {
    let Some(python) = python() else { return };
    let pg = PgServer::shared();
    let kafka = NoidaKafka::start().unwrap();
    let db = database_with(pg, SCHEMA).await;
    let dir = tempfile::tempdir().unwrap();
    let mut kc = kafka_connector(pg, &db, dir.path(), "r", &kafka.brokers(), "");
    kc.edit_config(|t| format!("{t}\n[snapshot]\nmode = \"when_needed\"\n"));
    kc.start();
    let got = wait_kafka(
        &python,
        &kafka.brokers(),
        TOPIC,
        50,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(got.len(), 50, "{}", kc.output());
    wait_streaming(&python, &kafka.brokers(), &kc).await;
    pg.execute(&db, "UPDATE acct SET balance = -1 WHERE id <= 5")
        .await
        .unwrap();
    wait_kafka(
        &python,
        &kafka.brokers(),
        TOPIC,
        55,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(kc.stop(), Some(0), "{}", kc.output());
    // While it is down: its slot is lost, rows are deleted (among them updated ones) and
    // changed; none of it can be streamed.
    drop_slot(pg, &format!("{db}_r")).await;
    pg.execute(
        &db,
        "DELETE FROM acct WHERE id <= 3 OR id BETWEEN 40 AND 44;
         UPDATE acct SET owner = 'changed' WHERE id = 10;
         INSERT INTO acct VALUES (900, 'new', 9);",
    )
    .await
    .unwrap();
    kc.start();
    let want = table_rows(pg, &db, "acct").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let recs = read_kafka(&python, &kafka.brokers(), &[TOPIC]);
        let view = rebuilt(&recs, TOPIC);
        if view == want {
            // Each deleted row: a delete with its last known row, then a tombstone.
            for id in [1, 2, 3, 40, 44] {
                let key = format!("{{\"id\":{id}}}");
                let last: Vec<&(String, Seen, Json)> = recs
                    .iter()
                    .filter(|(_, s, _)| s.key.as_deref() == Some(key.as_str()))
                    .collect();
                let n = last.len();
                assert!(n >= 2, "{key}: {last:?}");
                assert_eq!(last[n - 2].2["op"], "d", "{key}: {last:?}");
                assert_eq!(last[n - 2].2["before"]["id"], id, "{key}: {last:?}");
                assert!(last[n - 1].1.value.is_none(), "{key}: no tombstone last");
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the topic rebuilt {} rows, the table has {}\n{}",
            view.len(),
            want.len(),
            kc.output()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        kc.output().contains("re-snapshot reconciled"),
        "{}",
        kc.output()
    );
    kc.stop();
    drop_slot(pg, &format!("{db}_r")).await;
}
