//! The pipeline against a real embedded log and the embedded registry: order, batch
//! ends and schema versions survive the parallel encoding stage.

use super::*;
use cdc_log::{Log, LogOptions, StartAt};
use cdc_schemas::encode::{ConnectorKind, RecordFormat, SourceInfo};
use cdc_schemas::{Column, ColumnType, Lsn, PgPosition, Row, SourcePosition, Value};
use cdc_sources::ChangeBatch;

mod resnapshot;
mod txmeta;

pub(super) fn table(name: &str, extra: bool) -> Arc<TableSchema> {
    let mut cols = vec![
        Column::new("id", ColumnType::Int64, "int8").not_null(),
        Column::new("v", ColumnType::Text { max_len: None }, "text"),
    ];
    if extra {
        cols.push(Column::new("w", ColumnType::Int32, "int4"));
    }
    Arc::new(TableSchema::new(TableId::new("public", name), cols, &["id"]).unwrap())
}

fn position(lsn: u64) -> SourcePosition {
    SourcePosition::Postgres(PgPosition {
        commit_lsn: Lsn(lsn),
        lsn: Lsn(lsn),
        tx_id: None,
        xmin: None,
    })
}

pub(super) fn pos(lsn: u64) -> Checkpoint {
    Checkpoint::At(position(lsn))
}

pub(super) fn ev(t: &Arc<TableSchema>, id: i64, text: usize) -> ChangeEvent {
    let mut vals = vec![Value::Int64(id), Value::Text("x".repeat(text))];
    if t.columns.len() == 3 {
        vals.push(Value::Int32(7));
    }
    ChangeEvent::create(t.clone(), Row::new(vals), position(1), 0).unwrap()
}

/// (after.id, has w) of every record of `topic`, in log order.
fn ids(log: &Log, topic: &str) -> Vec<(i64, bool)> {
    let mut r = log.reader(topic, 0, StartAt::Earliest).unwrap();
    let mut out = Vec::new();
    loop {
        let recs = r.poll(1 << 20).unwrap();
        if recs.is_empty() {
            return out;
        }
        for rec in recs {
            let v: serde_json::Value = serde_json::from_slice(&rec.value.unwrap()).unwrap();
            out.push((
                v["after"]["id"].as_i64().unwrap(),
                v["after"].get("w").is_some(),
            ));
        }
    }
}

fn table_v_int(name: &str) -> Arc<TableSchema> {
    let cols = vec![
        Column::new("id", ColumnType::Int64, "int8").not_null(),
        Column::new("v", ColumnType::Int64, "int8"),
    ];
    Arc::new(TableSchema::new(TableId::new("public", name), cols, &["id"]).unwrap())
}

/// A log and an embedded registry, each in its own folder under `dir`.
fn open_log_and_registry(dir: &std::path::Path) -> (Log, cdc_registry::EmbeddedRegistry) {
    let log = Log::open(dir.join("log"), LogOptions::default()).unwrap();
    let reg_log = Log::open(dir.join("registry"), LogOptions::default()).unwrap();
    (log, cdc_registry::EmbeddedRegistry::open(reg_log).unwrap())
}

/// The tests' default: JSON without schemas, topics `t.<schema>.<table>`, no forced
/// schema changes, no group commit before the end, the tables' own keys.
pub(super) fn config() -> PipelineConfig {
    PipelineConfig {
        encoder: EncoderConfig::new(
            SourceInfo::new(ConnectorKind::Postgres, "t", "db"),
            RecordFormat::Json {
                schemas_enable: false,
            },
        ),
        router: TopicRouter::new("t", &[]).unwrap(),
        topic_config: TopicConfig::default(),
        force_schema_change: false,
        group_commit_bytes: 1 << 30,
        group_commit: Duration::from_secs(60),
        key_columns: MessageKeyColumns::default(),
        hidden: Default::default(),
        transaction_metadata: false,
    }
}

/// A running pipeline's task: its stats and result.
type Run = tokio::task::JoinHandle<(PipelineStats, Result<(), PipelineError>)>;

/// Runs a pipeline into `log`: its batch sender, its task and the durable checkpoints.
fn spawn(
    log: &Log,
    registry: Arc<dyn SchemaRegistry>,
    cfg: PipelineConfig,
) -> (
    tokio::sync::mpsc::Sender<ChangeBatch>,
    Run,
    cdc_sources::Durable,
) {
    let (dtx, drx) = DurablePublisher::new(None);
    let pipeline = Pipeline::new(log.clone(), registry, cfg, dtx);
    let (tx, rx) = queue::channel(4 << 20);
    (tx, tokio::spawn(pipeline.run(rx)), drx)
}

/// Sends a batch of `events` ending at `commit` (`None`: part of a transaction).
pub(super) async fn send(
    tx: &tokio::sync::mpsc::Sender<ChangeBatch>,
    events: Vec<ChangeEvent>,
    commit: Option<Checkpoint>,
) {
    tx.send(ChangeBatch {
        events,
        commit,
        approx_bytes: 0,
        snapshot: None,
    })
    .await
    .unwrap();
}

/// Ends the source (closes the channel) and waits for the pipeline's stats and result.
pub(super) async fn finish(
    tx: tokio::sync::mpsc::Sender<ChangeBatch>,
    run: Run,
) -> (PipelineStats, Result<(), PipelineError>) {
    drop(tx);
    run.await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_change_restores_the_subjects_level() {
    let dir = tempfile::tempdir().unwrap();
    let (log, registry) = open_log_and_registry(dir.path());
    // `a` has its own level, `b` follows the global one.
    registry
        .set_compatibility_sync(Some("t.public.a-value"), CompatibilityLevel::Full)
        .unwrap();
    let (tx, run, _drx) = spawn(
        &log,
        Arc::new(registry.clone()),
        PipelineConfig {
            force_schema_change: true,
            ..config()
        },
    );
    let mut lsn = 100;
    for name in ["a", "b"] {
        // v: text, then int8 — incompatible under FULL and BACKWARD alike.
        for t in [table(name, false), table_v_int(name)] {
            let vals = if matches!(t.columns[1].ty, ColumnType::Int64) {
                vec![Value::Int64(1), Value::Int64(2)]
            } else {
                vec![Value::Int64(1), Value::Text("x".into())]
            };
            lsn += 10;
            send(
                &tx,
                vec![ChangeEvent::create(t.clone(), Row::new(vals), position(lsn), 0).unwrap()],
                Some(pos(lsn)),
            )
            .await;
        }
    }
    let (stats, r) = finish(tx, run).await;
    r.unwrap();
    assert_eq!(stats.records, 4);
    for s in ["t.public.a-value", "t.public.b-value"] {
        assert_eq!(registry.versions(s, false).unwrap().len(), 2, "{s}");
    }
    assert_eq!(
        registry.subject_compatibility("t.public.a-value"),
        Some(CompatibilityLevel::Full)
    );
    assert_eq!(registry.subject_compatibility("t.public.b-value"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_encoding_keeps_order_batch_ends_and_schema_versions() {
    let dir = tempfile::tempdir().unwrap();
    let (log, registry) = open_log_and_registry(dir.path());
    let (tx, run, drx) = spawn(&log, Arc::new(registry), config());
    let (a1, a2, b) = (table("a", false), table("a", true), table("b", false));
    let (mut next_a, mut next_b, mut lsn) = (0i64, 0i64, 100u64);
    // Batches of 1 to ~10k events (several jobs each), interleaving two tables, some
    // without a commit (chunks of a large transaction), and one batch in which table
    // `a` changes schema (two segments with different encoders).
    for i in 0..120usize {
        let n = [1, 3, 64, 65, 700, 6000][i % 6];
        let text = if i % 2 == 0 { 10 } else { 400 };
        let a = if i >= 60 { &a2 } else { &a1 };
        let mut events = Vec::with_capacity(n);
        for k in 0..n {
            if i == 59 && k == n / 2 {
                // The schema change, mid-batch.
                events.push(ev(&a2, next_a, text));
                next_a += 1;
                continue;
            }
            let t = if k % 3 == 2 {
                &b
            } else if i == 59 && k > n / 2 {
                &a2
            } else {
                a
            };
            if Arc::ptr_eq(t, &b) {
                events.push(ev(t, next_b, text));
                next_b += 1;
            } else {
                events.push(ev(t, next_a, text));
                next_a += 1;
            }
        }
        lsn += 10;
        let commit = (i % 4 != 1).then(|| pos(lsn));
        send(&tx, events, commit).await;
    }
    // The last batch commits, so everything is complete.
    lsn += 10;
    send(&tx, vec![], Some(pos(lsn))).await;
    let (stats, r) = finish(tx, run).await;
    r.unwrap();
    assert_eq!(stats.events, (next_a + next_b) as u64);
    assert_eq!(stats.records, (next_a + next_b) as u64);
    assert_eq!(drx.latest(), Some(pos(lsn)));
    assert_eq!(log.checkpoint(), Some(pos(lsn).to_bytes()));
    let got_a = ids(&log, "t.public.a");
    let got_b = ids(&log, "t.public.b");
    assert_eq!(
        got_a.iter().map(|x| x.0).collect::<Vec<_>>(),
        (0..next_a).collect::<Vec<_>>()
    );
    assert_eq!(
        got_b.iter().map(|x| x.0).collect::<Vec<_>>(),
        (0..next_b).collect::<Vec<_>>()
    );
    // Records of the old version have no `w`; from the change on, all have it.
    let first_w = got_a.iter().position(|x| x.1).unwrap();
    assert!(got_a[first_w..].iter().all(|x| x.1));
    assert!(first_w > 0);
}

/// `[[routing]]` and `source.message_key_columns` as the pipeline applies them: two
/// tables of different shapes share a routed topic, each with its own subjects (one
/// pair of `<topic>-key`/`-value` subjects could not hold both under BACKWARD); a
/// keyless table gets the configured key, and its records are partitioned by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_and_message_key_columns() {
    let dir = tempfile::tempdir().unwrap();
    let (log, registry) = open_log_and_registry(dir.path());
    let keys = MessageKeyColumns::parse(&["public.events:v,id".to_string()]).unwrap();
    let (tx, run, _drx) = spawn(
        &log,
        Arc::new(registry.clone()),
        PipelineConfig {
            router: TopicRouter::new("t", &[(r"t\.public\.orders_\d+", "t.orders")]).unwrap(),
            topic_config: TopicConfig::with_partitions(3),
            key_columns: keys,
            hidden: Default::default(),
            ..config()
        },
    );
    let o1 = table("orders_1", false);
    // A required column the other table lacks: incompatible with it under BACKWARD.
    let mut o2 = (*table("orders_2", true)).clone();
    o2.columns[2] = o2.columns[2].clone().not_null();
    let o2 = Arc::new(o2);
    let events = Arc::new(
        TableSchema::new(
            TableId::new("public", "events"),
            vec![
                Column::new("id", ColumnType::Int64, "int8"),
                Column::new("v", ColumnType::Text { max_len: None }, "text"),
            ],
            &[],
        )
        .unwrap(),
    );
    let mut evs = Vec::new();
    for i in 0..20 {
        evs.push(ev(&o1, i, 1));
        evs.push(ev(&o2, 100 + i, 1));
        evs.push(ev(&events, i, (i % 3) as usize));
    }
    send(&tx, evs, Some(pos(10))).await;
    let (stats, r) = finish(tx, run).await;
    r.unwrap();
    assert_eq!(stats.records, 60);
    let mut topics = log.topics();
    topics.sort();
    assert_eq!(topics, ["t.orders", "t.public.events"]);
    let mut subjects = registry.subjects(false);
    subjects.sort();
    assert_eq!(
        subjects,
        [
            "t.orders-t.public.orders_1.Envelope",
            "t.orders-t.public.orders_1.Key",
            "t.orders-t.public.orders_2.Envelope",
            "t.orders-t.public.orders_2.Key",
            "t.public.events-key",
            "t.public.events-value",
        ]
    );
    let mut routed = 0;
    let mut keyed = 0;
    for (topic, parts) in [("t.orders", 3), ("t.public.events", 3)] {
        for p in 0..parts {
            let mut rd = log.reader(topic, p, StartAt::Earliest).unwrap();
            loop {
                let recs = rd.poll(1 << 20).unwrap();
                if recs.is_empty() {
                    break;
                }
                for rec in recs {
                    let key = rec.key.expect("keyed");
                    assert_eq!(cdc_log::partition_for_key(&key, 3), p);
                    let k: serde_json::Value = serde_json::from_slice(&key).unwrap();
                    if topic == "t.orders" {
                        routed += 1;
                    } else {
                        // The configured columns, in the configured order.
                        let names: Vec<&String> = k.as_object().unwrap().keys().collect();
                        assert_eq!(names, ["v", "id"], "{k}");
                        keyed += 1;
                    }
                }
            }
        }
    }
    assert_eq!((routed, keyed), (40, 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_key_column_is_a_definite_error() {
    let dir = tempfile::tempdir().unwrap();
    let (log, registry) = open_log_and_registry(dir.path());
    let (tx, run, _drx) = spawn(
        &log,
        Arc::new(registry),
        PipelineConfig {
            key_columns: MessageKeyColumns::parse(&["public.a:id,nope".to_string()]).unwrap(),
            hidden: Default::default(),
            ..config()
        },
    );
    send(&tx, vec![ev(&table("a", false), 1, 1)], Some(pos(10))).await;
    let (_, r) = finish(tx, run).await;
    let e = r.unwrap_err();
    assert!(!e.is_transient());
    let m = e.to_string();
    assert!(
        m.contains("public.a")
            && m.contains("\"nope\"")
            && m.contains("source.message_key_columns"),
        "{m}"
    );
    assert!(log.topics().is_empty(), "nothing appended");
}
