//! Values the record format cannot carry: Debezium's stand-in in the record and the exact
//! text in a `cdc.unrepresentable.<image>.<column>` header (schemas/FORMATS.md), or an
//! error with `unrepresentable_handling_mode = fail`.

mod common;

use std::sync::Arc;

use cdc_schemas::encode::{
    DecimalHandlingMode, EncodeError, HiddenReason, Record, RecordBuf, RecordFormat,
};
use cdc_schemas::{ChangeEvent, Column, ColumnType, Decimal, Row, TableId, TableSchema, Value};
use common::*;
use serde_json::{json, Value as J};

fn table() -> Arc<TableSchema> {
    use ColumnType as T;
    let dec = T::Decimal {
        precision: None,
        scale: None,
    };
    Arc::new(
        TableSchema::new(
            TableId::new("public", "special"),
            vec![
                Column::new("id", T::Int64, "int8").not_null(),
                Column::new("n", dec.clone(), "numeric"),
                Column::new("nn", dec, "numeric").not_null(),
                Column::new(
                    "n2",
                    T::Decimal {
                        precision: Some(10),
                        scale: Some(2),
                    },
                    "numeric(10,2)",
                ),
                Column::new("arr", T::Array(Box::new(T::Int32)), "_int4"),
                Column::new("ts", T::Timestamp { precision: None }, "timestamp"),
                Column::new("txt", T::Text { max_len: None }, "text"),
            ],
            &["id"],
        )
        .unwrap(),
    )
}

fn ordinary(id: i64) -> Row {
    Row::new(vec![
        Value::Int64(id),
        Value::Decimal("1.5".parse().unwrap()),
        Value::Decimal("2".parse().unwrap()),
        Value::Decimal("3.25".parse().unwrap()),
        Value::Array(vec![Value::Int32(1)]),
        Value::Timestamp(0),
        Value::Text("t".into()),
    ])
}

fn special(id: i64) -> Row {
    Row::new(vec![
        Value::Int64(id),
        Value::Decimal(Decimal::NaN),
        Value::Decimal(Decimal::PosInfinity),
        Value::Decimal(Decimal::NegInfinity),
        Value::raw(
            "{{1,2},{3,NULL}}",
            Value::Array(vec![
                Value::Array(vec![Value::Int32(1), Value::Int32(2)]),
                Value::Array(vec![Value::Int32(3), Value::Null]),
            ]),
        ),
        Value::raw("294276-12-31 23:59:59.999999", Value::Null),
        Value::Text("t".into()),
    ])
}

fn payload(f: RecordFormat, enc: &cdc_schemas::encode::Encoder, bytes: &[u8]) -> J {
    match f {
        RecordFormat::Avro => decode_avro(enc.avro_value_schema(), bytes, 8),
        RecordFormat::Json {
            schemas_enable: true,
        } => serde_json::from_slice::<J>(bytes).unwrap()["payload"].clone(),
        RecordFormat::Json { .. } => serde_json::from_slice(bytes).unwrap(),
    }
}

fn headers(r: &Record) -> Vec<(String, String)> {
    r.headers
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8(v.clone()).unwrap()))
        .collect()
}

fn h(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

#[test]
fn special_values_are_debezium_stand_ins_with_their_text_in_headers() {
    let t = table();
    let ev = ChangeEvent::create(t.clone(), special(1), pg_pos(), SRC_TS_MS).unwrap();
    for f in [JSON, JSON_SCHEMA, AVRO] {
        let enc = encoder(&pg_config(f), &t);
        let recs = enc.records(&ev, NOW_NS).unwrap();
        assert_eq!(recs.len(), 1);
        let v = payload(f, &enc, recs[0].value.as_ref().unwrap());
        let a = &v["after"];
        assert_eq!(a["n"], J::Null, "{f:?}: NaN → null, as Debezium");
        // NOT NULL: Debezium stops; the record holds the type's zero.
        assert_eq!(a["nn"], json!({"scale": 0, "value": "AA=="}), "{f:?}");
        assert_eq!(a["n2"], J::Null, "{f:?}");
        assert_eq!(a["ts"], J::Null, "{f:?}");
        assert_eq!(a["txt"], "t");
        let arr_text = "{{1,2},{3,NULL}}";
        let mut want = vec![
            h("cdc.unrepresentable.after.n", "NaN"),
            h("cdc.unrepresentable.after.nn", "Infinity"),
            h("cdc.unrepresentable.after.n2", "-Infinity"),
        ];
        if f == JSON {
            // Schemaless JSON keeps the nesting: nothing hidden.
            assert_eq!(a["arr"], json!([[1, 2], [3, null]]));
        } else {
            assert_eq!(
                a["arr"],
                json!([null, null]),
                "{f:?}: one null per sub-array"
            );
            want.push(h("cdc.unrepresentable.after.arr", arr_text));
        }
        want.push(h(
            "cdc.unrepresentable.after.ts",
            "294276-12-31 23:59:59.999999",
        ));
        assert_eq!(headers(&recs[0]), want, "{f:?}");
    }
}

#[test]
fn each_image_names_its_own_headers_and_reasons_are_reported() {
    let t = table();
    // A whole old row (REPLICA IDENTITY FULL) with NaN, updated to ordinary values; then
    // a key change whose old row holds NaN.
    let ev = ChangeEvent::update(t.clone(), Some(special(1)), ordinary(1), pg_pos(), 1).unwrap();
    let enc = encoder(&pg_config(JSON), &t);
    let mut buf = RecordBuf::new();
    enc.records_into(&ev, NOW_NS, &mut buf).unwrap();
    let keys: Vec<&str> = buf.headers(0).map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "cdc.unrepresentable.before.n",
            "cdc.unrepresentable.before.nn",
            "cdc.unrepresentable.before.n2",
            "cdc.unrepresentable.before.ts"
        ]
    );
    let hidden: Vec<_> = buf.hidden_values().collect();
    assert_eq!(hidden.len(), 4);
    assert_eq!(hidden[0].table, "public.special");
    assert_eq!(hidden[0].column, "n");
    assert_eq!(hidden[0].reason, HiddenReason::NumericSpecial);
    assert_eq!(hidden[3].reason, HiddenReason::OutOfRange);

    let ev = ChangeEvent::update(t.clone(), Some(special(1)), special(2), pg_pos(), 1).unwrap();
    let recs = enc.records(&ev, NOW_NS).unwrap();
    assert_eq!(recs.len(), 3, "delete, tombstone, create");
    let keys = |r: &Record| r.headers.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&recs[0])[0], "__debezium.newkey");
    assert!(keys(&recs[0])[1..]
        .iter()
        .all(|k| k.starts_with("cdc.unrepresentable.before.")));
    assert!(recs[1].headers.is_empty(), "the tombstone has none");
    assert_eq!(keys(&recs[2])[0], "__debezium.oldkey");
    assert!(keys(&recs[2])[1..]
        .iter()
        .all(|k| k.starts_with("cdc.unrepresentable.after.")));
    // Ordinary rows: no headers at all.
    let ev = ChangeEvent::create(t.clone(), ordinary(3), pg_pos(), SRC_TS_MS).unwrap();
    let mut buf = RecordBuf::new();
    enc.records_into(&ev, NOW_NS, &mut buf).unwrap();
    assert_eq!(buf.total_headers(), 0);
    assert_eq!(buf.header_count(0), 0);
}

#[test]
fn unchanged_toast_without_a_placeholder_form() {
    let t = table();
    let mut after = ordinary(1);
    after.0[1] = Value::Unchanged; // numeric
    after.0[4] = Value::Unchanged; // int4[]
    after.0[6] = Value::Unchanged; // text: the placeholder, no header (as before)
    let ev = ChangeEvent::update(t.clone(), None, after, pg_pos(), 1).unwrap();
    for f in [JSON, JSON_SCHEMA, AVRO] {
        let enc = encoder(&pg_config(f), &t);
        let recs = enc.records(&ev, NOW_NS).unwrap();
        let v = payload(f, &enc, recs[0].value.as_ref().unwrap());
        assert_eq!(v["after"]["n"], J::Null);
        let bytes: Vec<J> = b"__debezium_unavailable_value"
            .iter()
            .map(|b| json!(b))
            .collect();
        assert_eq!(
            v["after"]["arr"],
            J::Array(bytes),
            "Debezium's int-array form"
        );
        assert_eq!(v["after"]["txt"], "__debezium_unavailable_value");
        assert_eq!(
            headers(&recs[0]),
            vec![
                h("cdc.unrepresentable.after.n", "unavailable"),
                h("cdc.unrepresentable.after.arr", "unavailable"),
            ],
            "{f:?}"
        );
    }
}

#[test]
fn fail_mode_stops_on_each_case_and_leaves_the_buffer_alone() {
    let t = table();
    for (col, v) in [
        (1, Value::Decimal(Decimal::NaN)),
        (
            4,
            Value::raw("{{1}}", Value::Array(vec![Value::Array(vec![])])),
        ),
        (5, Value::raw("294276-01-01 00:00:00", Value::Null)),
        (1, Value::Unchanged),
    ] {
        let mut row = ordinary(1);
        row.0[col] = v;
        let ev = if row.has_unchanged() {
            ChangeEvent::update(t.clone(), None, row, pg_pos(), 1).unwrap()
        } else {
            ChangeEvent::create(t.clone(), row, pg_pos(), SRC_TS_MS).unwrap()
        };
        for f in [JSON_SCHEMA, AVRO] {
            let enc = encoder(&fail_config(f), &t);
            let mut buf = RecordBuf::new();
            let e = enc.records_into(&ev, NOW_NS, &mut buf).unwrap_err();
            let EncodeError::Value { column, .. } = &e else {
                panic!("{e}")
            };
            assert_eq!(column, &t.columns[col].name);
            assert!(
                e.to_string().contains("unrepresentable_handling_mode"),
                "{e}"
            );
            assert!(buf.is_empty() && buf.bytes.is_empty() && buf.total_headers() == 0);
        }
    }
}

#[test]
fn string_mode_carries_nan_itself() {
    let t = table();
    let cfg = |f| {
        let mut c = pg_config(f);
        c.decimal_handling_mode = DecimalHandlingMode::String;
        c
    };
    let mut row = ordinary(1);
    row.0[1] = Value::Decimal(Decimal::NaN);
    let ev = ChangeEvent::create(t.clone(), row, pg_pos(), SRC_TS_MS).unwrap();
    let enc = encoder(&cfg(JSON), &t);
    let recs = enc.records(&ev, NOW_NS).unwrap();
    assert!(recs[0].headers.is_empty());
    let v: J = serde_json::from_slice(recs[0].value.as_ref().unwrap()).unwrap();
    assert_eq!(v["after"]["n"], "NaN");
}

#[test]
fn timestamps_beyond_the_microsecond_range_are_exact_where_the_field_can_hold_them() {
    use ColumnType as T;
    let t = Arc::new(
        TableSchema::new(
            TableId::new("public", "late"),
            vec![
                Column::new("id", T::Int64, "int8").not_null(),
                Column::new("tstz", T::TimestampTz { precision: None }, "timestamptz"),
                Column::new("ts3", T::Timestamp { precision: Some(3) }, "timestamp(3)"),
                Column::new("ts", T::Timestamp { precision: None }, "timestamp"),
            ],
            &["id"],
        )
        .unwrap(),
    );
    let row = Row::new(vec![
        Value::Int64(1),
        Value::raw("294276-12-31 23:59:59.5+00", Value::Null),
        Value::raw("294276-12-31 23:59:59.999", Value::Null),
        Value::raw("294276-12-31 23:59:59.999999", Value::Null),
    ]);
    let ev = ChangeEvent::create(t.clone(), row, pg_pos(), SRC_TS_MS).unwrap();
    for f in [JSON, JSON_SCHEMA, AVRO] {
        let enc = encoder(&pg_config(f), &t);
        let recs = enc.records(&ev, NOW_NS).unwrap();
        let v = payload(f, &enc, recs[0].value.as_ref().unwrap());
        // As Debezium 3.6.3 writes them (tests/golden).
        assert_eq!(
            v["after"]["tstz"], "+294276-12-31T23:59:59.500000Z",
            "{f:?}"
        );
        assert_eq!(v["after"]["ts3"], json!(9_224_318_015_999_999i64), "{f:?}");
        assert_eq!(v["after"]["ts"], J::Null, "{f:?}: MicroTimestamp cannot");
        assert_eq!(
            headers(&recs[0]),
            vec![h(
                "cdc.unrepresentable.after.ts",
                "294276-12-31 23:59:59.999999"
            )]
        );
    }
}
