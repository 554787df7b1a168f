//! Envelope shapes for every op, the records Debezium emits per event (tombstones, key
//! changes), snapshot markers, the transaction block, the MySQL source block, logical
//! messages, and topic routing.

mod common;

use cdc_schemas::encode::{
    EncodeError, Encoder, RecordKind, SchemaIds, TopicRouter, HEADER_NEW_KEY, HEADER_OLD_KEY,
};
use cdc_schemas::{ChangeEvent, LogicalMessage, Op, Row, SnapshotMarker, TableId, Value};
use common::*;
use serde_json::{json, Value as J};

fn table_events() -> Vec<ChangeEvent> {
    let t = small_table();
    let mut r = ChangeEvent::read(t.clone(), small_row(1, Some("a")), pg_pos(), SRC_TS_MS).unwrap();
    r.snapshot = SnapshotMarker::Last;
    vec![
        create(&t, small_row(1, Some("a"))),
        ChangeEvent::update(
            t.clone(),
            Some(small_row(1, Some("a"))),
            small_row(1, Some("b")),
            pg_pos(),
            SRC_TS_MS,
        )
        .unwrap(),
        ChangeEvent::update(t.clone(), None, small_row(1, None), pg_pos(), SRC_TS_MS).unwrap(),
        ChangeEvent::delete(t.clone(), small_row(1, Some("b")), pg_pos(), SRC_TS_MS).unwrap(),
        r,
        ChangeEvent::truncate(t.clone(), pg_pos(), SRC_TS_MS),
    ]
}

fn pg_source(snapshot: &str) -> J {
    json!({
        "version": "test-1", "connector": "postgresql", "name": "shop",
        "ts_ms": SRC_TS_MS, "snapshot": snapshot, "db": "inventory",
        "sequence": "[\"2078959952\",\"2078978480\"]",
        "ts_us": SRC_TS_MS * 1000, "ts_ns": SRC_TS_MS * 1_000_000,
        "schema": "public", "table": "orders",
        "txId": 32545, "lsn": 2078978480i64, "xmin": null,
        "origin": null, "origin_lsn": null
    })
}

#[test]
fn every_op_has_debeziums_envelope() {
    let expected = [
        ("c", J::Null, json!({"id": 1, "note": "a"}), "false"),
        (
            "u",
            json!({"id": 1, "note": "a"}),
            json!({"id": 1, "note": "b"}),
            "false",
        ),
        ("u", J::Null, json!({"id": 1, "note": null}), "false"),
        ("d", json!({"id": 1, "note": "b"}), J::Null, "false"),
        ("r", J::Null, json!({"id": 1, "note": "a"}), "last"),
        ("t", J::Null, J::Null, "false"),
    ];
    for (ev, (op, before, after, snap)) in table_events().iter().zip(expected) {
        let v = value_everywhere(pg_config, ev);
        let want = json!({
            "before": before, "after": after, "source": pg_source(snap),
            "transaction": null, "op": op,
            "ts_ms": NOW_NS / 1_000_000, "ts_us": NOW_NS / 1000, "ts_ns": NOW_NS
        });
        assert_eq!(v, want, "op {op}");
        // Field order as Debezium 3 emits it.
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "before",
                "after",
                "source",
                "transaction",
                "op",
                "ts_ms",
                "ts_us",
                "ts_ns"
            ]
        );
    }
}

#[test]
fn transaction_block_and_first_commit() {
    let t = small_table();
    let mut ev = create(&t, small_row(5, None));
    ev.tx = Some(tx());
    ev.snapshot = SnapshotMarker::FirstInDataCollection;
    if let cdc_schemas::SourcePosition::Postgres(p) = &mut ev.position {
        p.commit_lsn = cdc_schemas::Lsn(0);
        p.xmin = Some(77);
    }
    let v = value_everywhere(pg_config, &ev);
    assert_eq!(
        v["transaction"],
        json!({"id": "32545:2078959952", "total_order": 3, "data_collection_order": 2})
    );
    assert_eq!(v["source"]["snapshot"], "first_in_data_collection");
    assert_eq!(v["source"]["sequence"], "[null,\"2078978480\"]");
    assert_eq!(v["source"]["xmin"], 77);
}

#[test]
fn mysql_source_block() {
    let t = small_table();
    let mut ev = ChangeEvent::create(
        t.clone(),
        small_row(3, Some("x")),
        mysql_pos(),
        1_700_000_000_000,
    )
    .unwrap();
    ev.tx = Some(tx());
    let v = value_everywhere(mysql_config, &ev);
    assert_eq!(
        v["source"],
        json!({
            "version": "test-1", "connector": "mysql", "name": "my-shop",
            "ts_ms": 1_700_000_000_000i64, "snapshot": "false", "db": "public",
            "sequence": null, "ts_us": 1_700_000_000_000_000i64, "ts_ns": 1_700_000_000_000_000_000i64,
            "table": "orders", "server_id": 223344,
            "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:23",
            "file": "binlog.000002", "pos": 757, "row": 1, "thread": 7, "query": null
        })
    );
    let e = encoder(&mysql_config(AVRO), &t);
    let s: J = serde_json::from_str(e.avro_value_schema()).unwrap();
    assert_eq!(s["fields"][2]["type"]["name"], "Source");
    assert_eq!(
        s["fields"][2]["type"]["namespace"],
        "io.debezium.connector.mysql"
    );
    assert_eq!(s["namespace"], "my_shop.public.orders");
    // A Postgres position given to a MySQL encoder is refused.
    let wrong = create(&t, small_row(3, None));
    let err = value_error(&mysql_config(JSON), &wrong);
    assert!(matches!(err, EncodeError::PositionMismatch { .. }), "{err}");
}

#[test]
fn keys_in_every_format() {
    let t = small_table();
    let ev = create(&t, small_row(42, None));
    let mut b = Vec::new();
    assert!(encoder(&pg_config(JSON), &t)
        .encode_key(&ev, &mut b)
        .unwrap());
    assert_eq!(b, br#"{"id":42}"#);
    b.clear();
    encoder(&pg_config(JSON_SCHEMA), &t)
        .encode_key(&ev, &mut b)
        .unwrap();
    let k: J = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        k,
        json!({"schema": {"type": "struct", "fields": [{"type": "int64", "optional": false, "field": "id"}],
                          "optional": false, "name": "shop.public.orders.Key"},
               "payload": {"id": 42}})
    );
    let e = encoder(&pg_config(AVRO), &t);
    b.clear();
    e.encode_key(&ev, &mut b).unwrap();
    assert_eq!(
        decode_avro(e.avro_key_schema().unwrap(), &b, 7),
        json!({"id": 42})
    );
    assert_eq!(b, [0, 0, 0, 0, 7, 84]);
    // Truncates and keyless tables have no key.
    b.clear();
    let tr = ChangeEvent::truncate(t.clone(), pg_pos(), 1);
    assert!(!e.encode_key(&tr, &mut b).unwrap());
    assert!(b.is_empty());
    let keyless =
        cdc_schemas::TableSchema::new(TableId::new("public", "log"), t.columns.clone(), &[])
            .unwrap();
    let ke = encoder(&pg_config(JSON), &keyless);
    assert!(ke.key_schema().is_none() && ke.avro_key_schema().is_none());
    let ev = ChangeEvent::create(
        std::sync::Arc::new(keyless),
        small_row(1, None),
        pg_pos(),
        1,
    )
    .unwrap();
    assert!(!ke.encode_key(&ev, &mut b).unwrap());
}

#[test]
fn avro_needs_schema_ids() {
    let t = small_table();
    let e = Encoder::new(&pg_config(AVRO), &t).unwrap();
    let mut b = Vec::new();
    let err = e
        .encode_value(&create(&t, small_row(1, None)), &mut b)
        .unwrap_err();
    assert!(err.to_string().contains("set_schema_ids"), "{err}");
    assert!(b.is_empty());
}

#[test]
fn deletes_are_followed_by_tombstones_unless_disabled() {
    let t = small_table();
    let del = ChangeEvent::delete(t.clone(), small_row(9, Some("z")), pg_pos(), 1).unwrap();
    let recs = encoder(&pg_config(JSON), &t).records(&del, NOW_NS).unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].kind, RecordKind::Change(Op::Delete));
    assert_eq!(recs[1].kind, RecordKind::Tombstone);
    assert_eq!(recs[1].key.as_deref(), Some(&br#"{"id":9}"#[..]));
    assert_eq!(recs[0].key, recs[1].key);
    assert!(recs[1].value.is_none());
    let mut cfg = pg_config(JSON);
    cfg.tombstones_on_delete = false;
    assert_eq!(encoder(&cfg, &t).records(&del, NOW_NS).unwrap().len(), 1);
    // Non-deletes are one record.
    for ev in table_events().iter().filter(|e| e.op != Op::Delete) {
        let recs = encoder(&pg_config(AVRO), &t).records(ev, NOW_NS).unwrap();
        assert_eq!(recs.len(), 1, "{:?}", ev.op);
        assert_eq!(recs[0].kind, RecordKind::Change(ev.op));
        assert_eq!(recs[0].key.is_none(), ev.op == Op::Truncate);
    }
}

#[test]
fn key_change_is_delete_tombstone_create_with_headers() {
    let t = small_table();
    let ev = ChangeEvent::update(
        t.clone(),
        Some(small_row(1, Some("a"))),
        small_row(2, Some("a")),
        pg_pos(),
        SRC_TS_MS,
    )
    .unwrap();
    assert!(ev.changes_key());
    for format in [JSON, AVRO] {
        let e = encoder(&pg_config(format), &t);
        let recs = e.records(&ev, NOW_NS).unwrap();
        let kinds: Vec<_> = recs.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [
                RecordKind::Change(Op::Delete),
                RecordKind::Tombstone,
                RecordKind::Change(Op::Create)
            ]
        );
        let mut k1 = Vec::new();
        e.encode_key_of_row(&small_row(1, None), &mut k1);
        let mut k2 = Vec::new();
        e.encode_key_of_row(&small_row(2, None), &mut k2);
        assert_eq!(recs[0].key.as_ref(), Some(&k1));
        assert_eq!(
            recs[0].headers,
            vec![(HEADER_NEW_KEY.to_string(), k2.clone())]
        );
        assert_eq!(recs[1].key.as_ref(), Some(&k1));
        assert_eq!(recs[2].key.as_ref(), Some(&k2));
        assert_eq!(
            recs[2].headers,
            vec![(HEADER_OLD_KEY.to_string(), k1.clone())]
        );
        let decode = |b: &[u8]| match format {
            JSON => serde_json::from_slice::<J>(b).unwrap(),
            _ => decode_avro(e.avro_value_schema(), b, 8),
        };
        let del = decode(recs[0].value.as_ref().unwrap());
        assert_eq!(del["op"], "d");
        assert_eq!(del["before"], json!({"id": 1, "note": "a"}));
        assert_eq!(del["after"], J::Null);
        let cre = decode(recs[2].value.as_ref().unwrap());
        assert_eq!(cre["op"], "c");
        assert_eq!(cre["before"], J::Null);
        assert_eq!(cre["after"], json!({"id": 2, "note": "a"}));
    }
}

/// Test helper on the public API: the key of a row, via a synthetic create event.
trait KeyOfRow {
    fn encode_key_of_row(&self, row: &Row, out: &mut Vec<u8>);
}

impl KeyOfRow for Encoder {
    fn encode_key_of_row(&self, row: &Row, out: &mut Vec<u8>) {
        let ev = create(&small_table(), row.clone());
        self.encode_key(&ev, out).unwrap();
    }
}

#[test]
fn logical_decoding_messages() {
    let msg = ChangeEvent::message(
        LogicalMessage {
            prefix: "outbox".into(),
            content: b"{\"x\":1}".to_vec(),
            transactional: true,
        },
        pg_pos(),
        SRC_TS_MS,
    );
    let mut json_enc = Encoder::for_messages(&pg_config(JSON)).unwrap();
    json_enc.set_schema_ids(SchemaIds {
        key: Some(1),
        value: 2,
    });
    let recs = json_enc.records(&msg, NOW_NS).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].key.as_deref(), Some(&br#"{"prefix":"outbox"}"#[..]));
    let v: J = serde_json::from_slice(recs[0].value.as_ref().unwrap()).unwrap();
    let mut source = pg_source("false");
    source["schema"] = json!("");
    source["table"] = json!("");
    assert_eq!(
        v,
        json!({"op": "m", "ts_ms": NOW_NS / 1_000_000, "source": source, "transaction": null,
               "message": {"prefix": "outbox", "content": b64(b"{\"x\":1}")}})
    );
    let mut avro_enc = Encoder::for_messages(&pg_config(AVRO)).unwrap();
    avro_enc.set_schema_ids(SchemaIds {
        key: Some(1),
        value: 2,
    });
    let mut b = Vec::new();
    avro_enc.encode_value_at(&msg, NOW_NS, &mut b).unwrap();
    assert_eq!(decode_avro(avro_enc.avro_value_schema(), &b, 2), v);
    b.clear();
    avro_enc.encode_key(&msg, &mut b).unwrap();
    assert_eq!(
        decode_avro(avro_enc.avro_key_schema().unwrap(), &b, 1),
        json!({"prefix": "outbox"})
    );
    let s: J = serde_json::from_str(avro_enc.avro_value_schema()).unwrap();
    assert_eq!(
        s["connect.name"],
        "io.debezium.connector.postgresql.MessageValue"
    );

    // Messages only on the message encoder, rows only on table encoders; MySQL has none.
    let t = small_table();
    assert!(matches!(
        encoder(&pg_config(JSON), &t).encode_value(&msg, &mut b),
        Err(EncodeError::WrongEncoder { .. })
    ));
    assert!(matches!(
        json_enc.encode_value(&create(&t, small_row(1, None)), &mut b),
        Err(EncodeError::WrongEncoder { .. })
    ));
    assert!(Encoder::for_messages(&mysql_config(JSON)).is_err());
    let router = TopicRouter::new("shop", &[]).unwrap();
    assert_eq!(router.topic_for_event(&msg), "shop.message");
    assert_eq!(
        router.topic_for_event(&create(&t, small_row(1, None))),
        "shop.public.orders"
    );
}

#[test]
fn rows_of_another_schema_version_are_refused() {
    let t = small_table();
    let e = encoder(&pg_config(JSON), &t);
    let other = all_types_table();
    let mut values = vec![Value::Int64(1)];
    values.resize(other.columns.len(), Value::Null);
    let ev = create(&other, Row::new(values));
    let mut b = Vec::new();
    let err = e.encode_value(&ev, &mut b).unwrap_err();
    assert!(err.to_string().contains("build a new Encoder"), "{err}");
}
