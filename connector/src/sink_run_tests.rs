//! The sink driver over the real embedded log, with the connector's dead-letter log: what
//! is applied, what is passed over, what is dead-lettered (with which headers), and where
//! the group's offsets end up. The target is a sink that keeps what it is given (the
//! targets themselves are tested against real servers in tests/).

use std::collections::BTreeMap;
use std::time::Duration;

use cdc_log::{Log, LogOptions, NewRecord, ResetPolicy, StartAt, TopicConfig};
use cdc_schemas::filter::TableFilter;
use cdc_schemas::metrics::Metrics;
use cdc_sinks::driver::{self, DriverOptions, Prepare};
use cdc_sinks::metrics::SinkMetrics;
use cdc_sinks::view::ColumnMap;
use cdc_sinks::{Change, Delivered, Op, Sink, SinkError, SinkSpec};
use serde_json::Value;
use tokio::sync::watch;

use crate::log_consumer::{EmbeddedConsumer, TopicSelector};
use crate::sink_run::{sink_dir, EmbeddedDeadLetters};

/// Keeps every change; refuses the row with id 3 for good.
struct Keep {
    got: Vec<Change>,
    stop_after: usize,
    stop: watch::Sender<bool>,
}

impl Sink for Keep {
    async fn deliver(&mut self, changes: &[Change]) -> Result<Delivered, SinkError> {
        let mut d = Delivered::all(changes.len());
        for (i, c) in changes.iter().enumerate() {
            if c.key.get("id") == Some(&Value::from(3)) {
                d.rejected.push((i, "the target refuses id 3".into()));
            }
            self.got.push(c.clone());
        }
        if self.got.len() >= self.stop_after {
            let _ = self.stop.send(true);
        }
        Ok(d)
    }
}

fn envelope(table: &str, op: &str, id: i64, after: Option<&str>) -> (String, String) {
    let after = after.map_or("null".to_string(), |a| a.to_string());
    (
        format!(r#"{{"id":{id}}}"#),
        format!(
            r#"{{"before":null,"after":{after},"source":{{"schema":"public","table":"{table}","ts_ms":1}},"op":"{op}"}}"#
        ),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn changes_are_applied_passed_over_or_dead_lettered_and_the_group_moves_past_all() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let t = log
        .topic_or_create(
            "app.public.orders",
            TopicConfig {
                partitions: 2,
                ..TopicConfig::default()
            },
        )
        .unwrap();
    // (partition, record): all changes of a key in one partition, as the pipeline puts them.
    let rows = [
        (
            1,
            envelope("orders", "c", 1, Some(r#"{"id":1,"total":5,"secret":"s"}"#)),
        ),
        (
            0,
            envelope("orders", "c", 3, Some(r#"{"id":3,"total":7,"secret":"s"}"#)),
        ),
        (1, envelope("other", "c", 9, Some(r#"{"id":9}"#))),
        (
            1,
            envelope("orders", "u", 1, Some(r#"{"id":1,"total":6,"secret":"s"}"#)),
        ),
        (1, envelope("orders", "d", 1, None)),
    ];
    for (p, (k, v)) in &rows {
        t.append(
            *p,
            &[NewRecord::new(Some(k.as_bytes()), Some(v.as_bytes()), 0)],
        )
        .unwrap();
    }
    // A record that is no envelope, and a tombstone.
    t.append(
        0,
        &[NewRecord::new(Some(b"{\"id\":4}"), Some(b"not json"), 0)],
    )
    .unwrap();
    t.append(1, &[NewRecord::new(Some(b"{\"id\":1}"), None, 0)])
        .unwrap();
    log.flush(None).unwrap();

    let (stop, stop_rx) = watch::channel(false);
    let mut sink = Keep {
        got: Vec::new(),
        stop_after: 4,
        stop,
    };
    let mut consumer = EmbeddedConsumer::new(
        &log,
        "cdc-sink-cache",
        TopicSelector::patterns(["app.public.orders"]),
        ResetPolicy::Earliest,
        true,
    )
    .unwrap();
    let prepare = Prepare::new(
        None,
        TableFilter::new(&["public.orders".into()], &[]),
        ColumnMap::new(&[], &["public.orders:secret".into()], &BTreeMap::new()).unwrap(),
        false,
    );
    let dlq_spec = dead_letter_spec();
    let mut letters = EmbeddedDeadLetters::new(dir.path(), &dlq_spec);
    let opts = DriverOptions {
        min_backoff: Duration::from_millis(10),
        poll_wait: Duration::from_millis(50),
        ..DriverOptions::default()
    };
    let metrics = SinkMetrics::new(&Metrics::default(), "cache");
    let stats = driver::run(
        &mut consumer,
        &mut sink,
        &mut letters,
        prepare,
        &metrics,
        stop_rx,
        &opts,
    )
    .await
    .unwrap();

    // The other table, the tombstone and the undecodable record were not applied; the
    // excluded column never reached the sink.
    let ops: Vec<(Op, i64)> = sink
        .got
        .iter()
        .map(|c| (c.op, c.key["id"].as_i64().unwrap()))
        .collect();
    let mut sorted = ops.clone();
    sorted.sort_by_key(|(_, id)| *id);
    assert_eq!(sorted.len(), 4, "{ops:?}");
    assert!(sink
        .got
        .iter()
        .filter_map(|c| c.after.as_ref())
        .all(|a| !a.contains_key("secret")));
    // Per key, in log order: create, update, delete of id 1.
    let one: Vec<Op> = ops
        .iter()
        .filter(|(_, id)| *id == 1)
        .map(|(o, _)| *o)
        .collect();
    assert_eq!(one, vec![Op::Create, Op::Update, Op::Delete]);
    assert_eq!(stats.dead_letters, 2);
    assert_eq!(metrics.dead_letters.get(), 2);
    assert_eq!(metrics.lag_records.get(), 0);

    // Every record is behind the group: applied, passed over or dead-lettered.
    assert_eq!(
        log.committed("cdc-sink-cache", "app.public.orders", 0),
        Some(2)
    );
    assert_eq!(
        log.committed("cdc-sink-cache", "app.public.orders", 1),
        Some(5)
    );

    // The dead letters, with where they came from and why.
    drop(letters);
    let dlq = Log::open_read_only(sink_dir(dir.path(), "cache")).unwrap();
    let mut r = dlq.reader("dlq.app.cache", 0, StartAt::Earliest).unwrap();
    let got = r.poll(1 << 20).unwrap();
    assert_eq!(got.len(), 2);
    let header = |rec: &cdc_log::Record, k: &str| {
        rec.headers
            .iter()
            .find(|h| h.key == k)
            .and_then(|h| h.value.clone())
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
    };
    let mut reasons: Vec<String> = got
        .iter()
        .map(|rec| {
            assert_eq!(
                header(rec, "__connect.errors.topic").as_deref(),
                Some("app.public.orders")
            );
            assert_eq!(
                header(rec, "__connect.errors.connector.name").as_deref(),
                Some("cache")
            );
            assert!(header(rec, "__connect.errors.offset").is_some());
            header(rec, "__connect.errors.exception.message").unwrap()
        })
        .collect();
    reasons.sort();
    assert!(reasons[0].contains("not JSON"), "{reasons:?}");
    assert_eq!(reasons[1], "the target refuses id 3");
    // The refused record is kept as it was read.
    assert!(got
        .iter()
        .any(|rec| rec.key.as_deref() == Some(&b"{\"id\":3}"[..])));
}

/// A spec whose dead-letter names are the defaults of sink `cache` of connector `app`.
fn dead_letter_spec() -> SinkSpec {
    SinkSpec {
        connector: "app".into(),
        common: serde_json::from_value(serde_json::json!({"name": "cache", "type": "redis"}))
            .unwrap(),
        target: toml::Table::new(),
        path: "sink[0]".into(),
    }
}
