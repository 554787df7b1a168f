//! The pipeline's re-snapshot reconciliation (`pipeline::reconcile`) end to end
//! against a real embedded log and the embedded registry: deletes for the keys a snapshot
//! no longer finds (JSON and Avro, with and without tombstones, in one pass or several),
//! and a crash before the snapshot's end is durable.

use super::*;
use cdc_log::NewRecord;
use cdc_schemas::encode::redelete_avro::WriterSchema;

/// Sends a batch with a snapshot mark.
async fn send_mark(
    tx: &tokio::sync::mpsc::Sender<ChangeBatch>,
    events: Vec<ChangeEvent>,
    commit: Option<Checkpoint>,
    mark: SnapshotMark,
) {
    tx.send(ChangeBatch {
        events,
        commit,
        approx_bytes: 0,
        snapshot: Some(mark),
    })
    .await
    .unwrap();
}

/// A re-snapshot of `t` through `tx`: its Begin (checkpoint `SnapshotIncomplete`), a read
/// event of value "snap" at position 40 for each of `ids`, and its End at position 40.
async fn resnapshot(
    tx: &tokio::sync::mpsc::Sender<ChangeBatch>,
    t: &Arc<TableSchema>,
    ids: impl IntoIterator<Item = i64>,
) {
    send_mark(
        tx,
        vec![],
        Some(Checkpoint::SnapshotIncomplete),
        SnapshotMark::Begin {
            tables: vec![t.id.clone()],
        },
    )
    .await;
    let rows = ids
        .into_iter()
        .map(|id| ChangeEvent::read(t.clone(), row(id, "snap"), position(40), 0).unwrap())
        .collect();
    send(tx, rows, None).await;
    send_mark(tx, vec![], Some(pos(40)), SnapshotMark::End).await;
}

fn row(id: i64, v: &str) -> Row {
    Row::new(vec![Value::Int64(id), Value::Text(v.into())])
}

/// Every record of `topic` (all partitions): (key, value) as JSON, per partition in
/// offset order.
fn records(log: &Log, topic: &str) -> Vec<(serde_json::Value, Option<serde_json::Value>)> {
    let parts = log.topic(topic).unwrap().partitions();
    let mut out = Vec::new();
    for p in 0..parts {
        let mut r = log.reader(topic, p, StartAt::Earliest).unwrap();
        loop {
            let recs = r.poll(1 << 20).unwrap();
            if recs.is_empty() {
                break;
            }
            for rec in recs {
                out.push((
                    serde_json::from_slice(&rec.key.unwrap()).unwrap(),
                    rec.value.map(|v| serde_json::from_slice(&v).unwrap()),
                ));
            }
        }
    }
    out
}

/// The view a compacted consumer builds: newest record per key, tombstones removing;
/// key id → `after.v`.
fn view(
    recs: &[(serde_json::Value, Option<serde_json::Value>)],
) -> std::collections::BTreeMap<i64, String> {
    let mut m = std::collections::BTreeMap::new();
    for (k, v) in recs {
        let id = k["id"].as_i64().unwrap();
        match v {
            None => {
                m.remove(&id);
            }
            Some(v) if v["op"] == "d" => {
                m.remove(&id);
            }
            Some(v) => {
                m.insert(id, v["after"]["v"].as_str().unwrap().to_string());
            }
        }
    }
    m
}

/// A log holding keys 0..40 (some updated, 30..35 deleted), then a re-snapshot that
/// reads only some of them: each key live before and not read again gets a delete
/// (before = its last row) and a tombstone, in the durable step of the snapshot's end;
/// keys read again, keys deleted before, and other topics are left alone. Run with one
/// pass and with many (a small key map).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_snapshot_deletes_the_keys_it_does_not_find_again() {
    for (keys_per_pass, tombstones) in [
        (reconcile::KEYS_PER_PASS, true),
        (3, true),
        (reconcile::KEYS_PER_PASS, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (log, registry) = open_log_and_registry(dir.path());
        let registry: Arc<dyn SchemaRegistry> = Arc::new(registry);
        let cfg = || {
            let mut c = config();
            c.topic_config = TopicConfig::with_partitions(3);
            c.encoder.tombstones_on_delete = tombstones;
            c
        };
        let (a, other) = (table("a", false), table("other", false));
        let (tx, run, _drx) = spawn(&log, registry.clone(), cfg());
        let mut first = Vec::new();
        for id in 0..40 {
            first.push(ChangeEvent::create(a.clone(), row(id, "v1"), position(10), 0).unwrap());
            first.push(ChangeEvent::create(other.clone(), row(id, "o"), position(10), 0).unwrap());
        }
        for id in 0..10 {
            let ev = ChangeEvent::update(a.clone(), None, row(id, "v2"), position(20), 0).unwrap();
            first.push(ev);
        }
        for id in 30..35 {
            first.push(ChangeEvent::delete(a.clone(), row(id, "v1"), position(30), 0).unwrap());
        }
        send(&tx, first, Some(pos(30))).await;
        finish(tx, run).await.1.unwrap();
        let before = records(&log, "t.public.a");

        // The re-snapshot reads the even keys below 30 (some with new values), and 36.
        let mut p = Pipeline::new(
            log.clone(),
            registry.clone(),
            cfg(),
            DurablePublisher::new(None).0,
        );
        p.reconcile_keys_per_pass = keys_per_pass;
        let (tx, rx) = queue::channel(4 << 20);
        let run = tokio::spawn(p.run(rx));
        let read: Vec<i64> = (0..30).step_by(2).chain([36]).collect();
        resnapshot(&tx, &a, read.iter().copied()).await;
        let (stats, r) = finish(tx, run).await;
        r.unwrap();
        let gone: Vec<i64> = (0..40)
            .filter(|id| !read.contains(id) && !(30..35).contains(id))
            .collect();
        assert_eq!(
            stats.reconciled_deletes,
            gone.len() as u64,
            "{keys_per_pass}"
        );
        assert_eq!(log.checkpoint(), Some(pos(40).to_bytes()));
        let after = records(&log, "t.public.a");
        let want: std::collections::BTreeMap<i64, String> =
            read.iter().map(|&id| (id, "snap".to_string())).collect();
        assert_eq!(view(&after), want);
        // Each deleted key ends with a delete holding its last row, then a tombstone:
        // two records more than before.
        for id in &gone {
            let old = before.iter().filter(|(k, _)| k["id"] == *id).count();
            let mine: Vec<_> = after.iter().filter(|(k, _)| k["id"] == *id).collect();
            // Without tombstones_on_delete: the delete alone.
            let extra = if tombstones { 2 } else { 1 };
            assert_eq!(mine.len(), old + extra, "key {id}: {mine:?}");
            let mine = &mine[old..];
            let d = mine[0].1.as_ref().unwrap();
            assert_eq!(d["op"], "d");
            assert_eq!(d["before"]["id"], *id);
            assert_eq!(d["before"]["v"], if *id < 10 { "v2" } else { "v1" });
            assert!(d["after"].is_null());
            if tombstones {
                assert!(mine[1].1.is_none(), "tombstone after the delete of {id}");
            }
        }
        // Keys deleted before (a delete their newest record) get nothing more.
        for id in 30..35 {
            let old = before.iter().filter(|(k, _)| k["id"] == id).count();
            let now = after.iter().filter(|(k, _)| k["id"] == id).count();
            assert_eq!(now, old, "key {id} was deleted before the snapshot");
        }
        assert_eq!(
            records(&log, "t.public.other").len(),
            40,
            "another topic is left alone"
        );
    }
}

/// With Avro values the deletes are rewritten with each record's writer schema (from
/// the registry): every key the re-snapshot did not read ends with a delete envelope
/// and a tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_snapshot_with_avro_values_writes_delete_records() {
    let dir = tempfile::tempdir().unwrap();
    let (log, registry) = open_log_and_registry(dir.path());
    let registry: Arc<dyn SchemaRegistry> = Arc::new(registry);
    let cfg = || {
        let mut c = config();
        c.encoder.format = RecordFormat::Avro;
        c.topic_config = TopicConfig::with_partitions(2);
        c
    };
    let a = table("a", false);
    let (tx, run, _drx) = spawn(&log, registry.clone(), cfg());
    let evs = (0..12)
        .map(|id| ChangeEvent::create(a.clone(), row(id, "v1"), position(10), 0).unwrap())
        .collect();
    send(&tx, evs, Some(pos(10))).await;
    finish(tx, run).await.1.unwrap();
    let (tx, run, _drx) = spawn(&log, registry.clone(), cfg());
    resnapshot(&tx, &a, (0..12).filter(|id| id % 3 != 0)).await;
    let (stats, r) = finish(tx, run).await;
    r.unwrap();
    assert_eq!(stats.reconciled_deletes, 4);
    // Per key (its bytes): the last two records.
    let mut last: HashMap<Vec<u8>, Vec<Option<Vec<u8>>>> = HashMap::new();
    for p in 0..2 {
        let mut rd = log.reader("t.public.a", p, StartAt::Earliest).unwrap();
        loop {
            let recs = rd.poll(1 << 20).unwrap();
            if recs.is_empty() {
                break;
            }
            for rec in recs {
                last.entry(rec.key.unwrap().to_vec())
                    .or_default()
                    .push(rec.value.map(|v| v.to_vec()));
            }
        }
    }
    let mut deleted = 0;
    for values in last.values() {
        let n = values.len();
        let Some(d) = values[n - 2].as_ref().filter(|_| values[n - 1].is_none()) else {
            assert_eq!(n, 2, "a key read again: create + read");
            continue;
        };
        let id = cdc_schemas::encode::redelete::avro_schema_id(d).unwrap();
        let w = WriterSchema::parse(&registry.schema_by_id(id).await.unwrap().text).unwrap();
        assert!(
            w.is_delete(&d[5..]).unwrap(),
            "a delete envelope before the tombstone"
        );
        deleted += 1;
    }
    assert_eq!(deleted, 4);
}

/// A crash after the deletes are appended and before the snapshot's end is durable:
/// the log holds the snapshot's records under `SnapshotIncomplete`, no delete; the next
/// snapshot (its prefix now holds the first attempt's rows) deletes them all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_snapshots_end_is_durable_loses_no_delete() {
    let dir = tempfile::tempdir().unwrap();
    let a = table("a", false);
    let settings = reconcile::Settings {
        format: config().encoder.format,
        tombstones: true,
        keys_per_pass: reconcile::KEYS_PER_PASS,
        schemas: None,
    };
    let topic_cfg = TopicConfig::with_partitions(2);
    {
        let (log, registry) = open_log_and_registry(dir.path());
        let (tx, run, _drx) = spawn(
            &log,
            Arc::new(registry),
            PipelineConfig {
                topic_config: topic_cfg.clone(),
                ..config()
            },
        );
        let evs = (0..20)
            .map(|id| ChangeEvent::create(a.clone(), row(id, "v1"), position(10), 0).unwrap())
            .collect();
        send(&tx, evs, Some(pos(10))).await;
        finish(tx, run).await.1.unwrap();
    }
    // Attempt 1: Begin, the snapshot (keys 0..10), its records durable under
    // SnapshotIncomplete, the deletes appended — and the process dies.
    let snapshot = |log: &Log, ids: std::ops::Range<i64>| {
        let t = log.topic("t.public.a").unwrap();
        for id in ids {
            let k = format!("{{\"id\":{id}}}");
            let v = format!("{{\"before\":null,\"after\":{{\"id\":{id},\"v\":\"snap\"}},\"source\":{{}},\"op\":\"r\",\"ts_ms\":1}}");
            t.append(
                t.partition_for(Some(k.as_bytes())),
                &[NewRecord::new(Some(k.as_bytes()), Some(v.as_bytes()), 1)],
            )
            .unwrap();
        }
    };
    {
        let (log, _r) = open_log_and_registry(dir.path());
        log.flush(Some(&Checkpoint::SnapshotIncomplete.to_bytes()))
            .unwrap();
        let start = reconcile::Start::at(&log, ["t.public.a".to_string()]).unwrap();
        snapshot(&log, 0..10);
        log.flush(Some(&Checkpoint::SnapshotIncomplete.to_bytes()))
            .unwrap();
        let out = reconcile::reconcile(&reconcile::LogStore(&log), &start, &settings, 5).unwrap();
        assert_eq!(out.deleted_keys, 10);
        // Dropped without a flush: the deletes were never durable.
    }
    // Attempt 2 (a row more was deleted meanwhile: the snapshot reads 0..8).
    let (log, _r) = open_log_and_registry(dir.path());
    assert_eq!(
        log.checkpoint(),
        Some(Checkpoint::SnapshotIncomplete.to_bytes())
    );
    let recs = records(&log, "t.public.a");
    assert_eq!(recs.len(), 30, "the first attempt's snapshot, no delete");
    assert!(recs
        .iter()
        .all(|(_, v)| v.as_ref().is_some_and(|v| v["op"] != "d")));
    let start = reconcile::Start::at(&log, ["t.public.a".to_string()]).unwrap();
    snapshot(&log, 0..8);
    log.flush(Some(&Checkpoint::SnapshotIncomplete.to_bytes()))
        .unwrap();
    let out = reconcile::reconcile(&reconcile::LogStore(&log), &start, &settings, 5).unwrap();
    assert_eq!(out.deleted_keys, 12);
    log.flush(Some(&pos(50).to_bytes())).unwrap();
    let view = view(&records(&log, "t.public.a"));
    assert_eq!(
        view.keys().copied().collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
}
