//! The transaction metadata topic (`pipeline::txmeta`) against a real embedded log and the
//! embedded registry: BEGIN/END around each transaction (one pair for a chunked one), the
//! counts (key changes count twice, messages under their own data collection), nothing for
//! snapshot rows or empty transactions, and nothing durable of a transaction before its END
//! is.

use super::*;
use cdc_schemas::{LogicalMessage, TransactionInfo};
use serde_json::{json, Value as J};

fn on() -> PipelineConfig {
    PipelineConfig {
        transaction_metadata: true,
        ..config()
    }
}

/// `e` as change `order` of transaction `id`.
fn in_tx(mut e: ChangeEvent, id: &Arc<str>, order: u64) -> ChangeEvent {
    e.tx = Some(TransactionInfo {
        id: id.clone(),
        total_order: order,
        data_collection_order: order,
    });
    e
}

fn row(id: i64) -> Row {
    Row::new(vec![Value::Int64(id), Value::Text("x".into())])
}

/// Every record's value of `topic` in `log`, in offset order (one partition).
fn values(log: &Log, topic: &str) -> Vec<J> {
    if !log.topics().iter().any(|t| t == topic) {
        return Vec::new();
    }
    let mut r = log.reader(topic, 0, StartAt::Earliest).unwrap();
    let mut out = Vec::new();
    loop {
        let recs = r.poll(1 << 20).unwrap();
        if recs.is_empty() {
            return out;
        }
        out.extend(
            recs.iter()
                .filter_map(|r| r.value.as_ref())
                .map(|v| serde_json::from_slice(v).unwrap()),
        );
    }
}

/// (status, id, event_count, data_collections) of each transaction record.
fn tx_records(log: &Log) -> Vec<(String, String, J, J)> {
    values(log, "t.transaction")
        .into_iter()
        .map(|v| {
            (
                v["status"].as_str().unwrap().to_string(),
                v["id"].as_str().unwrap().to_string(),
                v["event_count"].clone(),
                v["data_collections"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_and_end_bracket_each_transaction_with_its_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (log, registry) = open_log_and_registry(dir.path());
    let (tx, run, drx) = spawn(&log, Arc::new(registry.clone()), on());
    let (a, b) = (table("a", false), table("b", false));
    // Snapshot rows: no transaction block, no BEGIN/END.
    let reads = (0..3)
        .map(|i| ChangeEvent::read(a.clone(), row(i), position(5), 0).unwrap())
        .collect();
    send(&tx, reads, Some(pos(10))).await;
    // One batch: two creates in a, one in b, a key change in a (two events) and a
    // transactional logical message.
    let t1: Arc<str> = "700:20".into();
    let key_change =
        ChangeEvent::update(a.clone(), Some(row(1)), row(100), position(20), 0).unwrap();
    let message = ChangeEvent::message(
        LogicalMessage {
            prefix: "p".into(),
            content: b"c".to_vec(),
            transactional: true,
        },
        position(20),
        0,
    );
    let mut e1 = vec![
        ev(&a, 10, 1),
        ev(&b, 11, 1),
        ev(&a, 12, 1),
        key_change,
        message,
    ];
    for (i, e) in e1.iter_mut().enumerate() {
        *e = in_tx(e.clone(), &t1, i as u64 + 1);
        e.source_ts_ms = 1000 + i as i64;
    }
    send(&tx, e1, Some(pos(20))).await;
    // A transaction whose changes were all filtered out: only its position.
    send(&tx, vec![], Some(pos(25))).await;
    // A large one in three chunks, the last empty.
    let t2: Arc<str> = "701:30".into();
    let c1 = (0..3).map(|i| in_tx(ev(&b, 20 + i, 1), &t2, 1)).collect();
    send(&tx, c1, None).await;
    let c2 = (0..2).map(|i| in_tx(ev(&a, 30 + i, 1), &t2, 4)).collect();
    send(&tx, c2, None).await;
    send(&tx, vec![], Some(pos(30))).await;
    let (stats, r) = finish(tx, run).await;
    r.unwrap();
    assert_eq!(drx.latest(), Some(pos(30)));
    let collections = |v: &[(&str, u64)]| {
        J::Array(
            v.iter()
                .map(|(c, n)| json!({"data_collection": c, "event_count": n}))
                .collect(),
        )
    };
    assert_eq!(
        tx_records(&log),
        vec![
            ("BEGIN".into(), "700:20".into(), J::Null, J::Null),
            (
                "END".into(),
                "700:20".into(),
                json!(6),
                collections(&[("public.a", 4), ("public.b", 1), ("message", 1)])
            ),
            ("BEGIN".into(), "701:30".into(), J::Null, J::Null),
            (
                "END".into(),
                "701:30".into(),
                json!(5),
                collections(&[("public.b", 3), ("public.a", 2)])
            ),
        ]
    );
    let v = values(&log, "t.transaction");
    // ts_ms: the first change's commit time in BEGIN, the last change's in END.
    assert_eq!(
        (v[0]["ts_ms"].clone(), v[1]["ts_ms"].clone()),
        (json!(1000), json!(1004))
    );
    // 3 reads, 3 + 2 + 1 records (key change: delete, tombstone, create) + 1 message,
    // 5 chunked creates, 4 transaction records.
    assert_eq!(stats.records, 3 + 6 + 1 + 5 + 4);
    // The topic: one partition, never compacted.
    let t = log.topic("t.transaction").unwrap();
    assert_eq!(t.partitions(), 1);
    assert!(!t.config().cleanup_policy.compact);
    // Its schemas are registered (checked for compatibility) whatever the format.
    for s in ["t.transaction-key", "t.transaction-value"] {
        assert_eq!(registry.versions(s, false).unwrap().len(), 1, "{s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_writes_no_transaction_topic() {
    let dir = tempfile::tempdir().unwrap();
    let (log, registry) = open_log_and_registry(dir.path());
    let (tx, run, _drx) = spawn(&log, Arc::new(registry), config());
    let a = table("a", false);
    let id: Arc<str> = "1:2".into();
    send(&tx, vec![in_tx(ev(&a, 1, 1), &id, 1)], Some(pos(20))).await;
    let (stats, r) = finish(tx, run).await;
    r.unwrap();
    assert_eq!(stats.records, 1);
    assert!(!log.topics().iter().any(|t| t == "t.transaction"));
}

/// Nothing of a transaction in chunks is durable before its END: a reader of the durable
/// log sees either no record of it (nor its BEGIN) or all of them and the END.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_is_durable_with_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let (log, registry) = open_log_and_registry(dir.path());
    // Group commit: the first transaction is usually still pending when the large one's
    // first chunk arrives, which then flushes it (and must not flush its own BEGIN).
    let (tx, run, mut drx) = spawn(&log, Arc::new(registry), on());
    let a = table("a", false);
    let durable = |n: usize| {
        let ro = Log::open_read_only(dir.path().join("log")).unwrap();
        let recs = tx_records(&ro);
        let rows = values(&ro, "t.public.a").len();
        assert_eq!(recs.len(), n, "{recs:?}");
        rows
    };
    let t1: Arc<str> = "1:10".into();
    send(&tx, vec![in_tx(ev(&a, 1, 1), &t1, 1)], Some(pos(10))).await;
    // A large transaction's first chunks, each in several jobs.
    let t2: Arc<str> = "2:20".into();
    for c in 0..2 {
        let events = (0..700)
            .map(|i| in_tx(ev(&a, 1000 * (c + 1) + i, 2000), &t2, 1))
            .collect();
        send(&tx, events, None).await;
    }
    while drx.latest() != Some(pos(10)) {
        drx.changed().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Neither its BEGIN nor its records are durable yet.
    assert_eq!(durable(2), 1);
    send(&tx, vec![in_tx(ev(&a, 5, 1), &t2, 1)], Some(pos(20))).await;
    while drx.latest() != Some(pos(20)) {
        drx.changed().await.unwrap();
    }
    assert_eq!(durable(4), 1 + 1401);
    let (_, r) = finish(tx, run).await;
    r.unwrap();
    assert_eq!(tx_records(&log)[3].2, json!(1401));
}
