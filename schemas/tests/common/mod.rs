//! Shared fixtures for the encoder tests: a table with a column of every type, events,
//! configs, and a normaliser that turns an Avro datum decoded by `apache-avro` into the
//! Connect JSON payload form, so both encodings are compared against one expectation.
#![allow(dead_code)]

use std::sync::Arc;

use base64::Engine;
use cdc_schemas::encode::{
    ConnectorKind, EncodeError, Encoder, EncoderConfig, RecordFormat, SchemaIds, SourceInfo,
};
use cdc_schemas::{
    ChangeEvent, Column, ColumnType, Lsn, MySqlPosition, PgPosition, Row, SourcePosition, TableId,
    TableSchema, TransactionInfo,
};
use num_bigint::BigInt;
use serde_json::{json, Value as J};

pub const NOW_NS: i64 = 1_740_218_269_005_541_665;
pub const SRC_TS_MS: i64 = 1_740_218_268_541;

pub fn pg_config(format: RecordFormat) -> EncoderConfig {
    let mut s = SourceInfo::new(ConnectorKind::Postgres, "shop", "inventory");
    s.version = "test-1".into();
    EncoderConfig::new(s, format)
}

/// [`pg_config`] with `unrepresentable_handling_mode = fail`.
pub fn fail_config(format: RecordFormat) -> EncoderConfig {
    let mut c = pg_config(format);
    c.unrepresentable_handling_mode = cdc_schemas::encode::UnrepresentableMode::Fail;
    c
}

pub fn mysql_config(format: RecordFormat) -> EncoderConfig {
    let mut s = SourceInfo::new(ConnectorKind::MySql, "my-shop", "");
    s.version = "test-1".into();
    EncoderConfig::new(s, format)
}

pub const JSON: RecordFormat = RecordFormat::Json {
    schemas_enable: false,
};
pub const JSON_SCHEMA: RecordFormat = RecordFormat::Json {
    schemas_enable: true,
};
pub const AVRO: RecordFormat = RecordFormat::Avro;

pub fn pg_pos() -> SourcePosition {
    SourcePosition::Postgres(PgPosition {
        commit_lsn: Lsn(2_078_959_952),
        lsn: Lsn(2_078_978_480),
        tx_id: Some(32_545),
        xmin: None,
    })
}

pub fn mysql_pos() -> SourcePosition {
    SourcePosition::Mysql(MySqlPosition {
        file: "binlog.000002".into(),
        pos: 757,
        row: 1,
        event: 2,
        gtid: Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:23".into()),
        gtid_set: None,
        server_id: 223_344,
        thread: Some(7),
    })
}

pub fn tx() -> TransactionInfo {
    TransactionInfo {
        id: "32545:2078959952".into(),
        total_order: 3,
        data_collection_order: 2,
    }
}

fn col(name: &str, ty: ColumnType, src: &str) -> Column {
    Column::new(name, ty, src)
}

/// One column of every [`ColumnType`] the encoders support, Postgres-flavoured.
pub fn all_types_table() -> Arc<TableSchema> {
    use ColumnType as T;
    let cols = vec![
        col("id", T::Int64, "int8").not_null(),
        col("b", T::Bool, "bool"),
        col("i16", T::Int16, "int2"),
        col("i32", T::Int32, "int4"),
        col("f32", T::Float32, "float4"),
        col("f64", T::Float64, "float8"),
        col(
            "dec",
            T::Decimal {
                precision: Some(12),
                scale: Some(2),
            },
            "numeric(12,2)",
        ),
        col(
            "vdec",
            T::Decimal {
                precision: None,
                scale: None,
            },
            "numeric",
        ),
        col("txt", T::Text { max_len: None }, "text"),
        col("byt", T::Bytes, "bytea"),
        col("js", T::Json, "jsonb"),
        col("uid", T::Uuid, "uuid"),
        col("d", T::Date, "date"),
        col("t", T::Time { precision: Some(6) }, "time"),
        col("t3", T::Time { precision: Some(3) }, "time(3)"),
        col("ttz", T::TimeTz { precision: None }, "timetz"),
        col("ts", T::Timestamp { precision: None }, "timestamp"),
        col("ts3", T::Timestamp { precision: Some(3) }, "timestamp(3)"),
        col("tstz", T::TimestampTz { precision: None }, "timestamptz"),
        col("iv", T::Interval, "interval"),
        col(
            "en",
            T::Enum {
                name: "mood".into(),
                symbols: vec!["sad".into(), "ok".into()],
            },
            "mood",
        ),
        col(
            "bit1",
            T::Bits {
                len: Some(1),
                varying: false,
            },
            "bit(1)",
        ),
        col(
            "bits",
            T::Bits {
                len: Some(10),
                varying: true,
            },
            "varbit(10)",
        ),
        col(
            "arr",
            T::Array(Box::new(T::Text { max_len: None })),
            "_text",
        ),
        col("iarr", T::Array(Box::new(T::Int32)), "_int4"),
        col(
            "inet",
            T::TextLike {
                name: "inet".into(),
            },
            "inet",
        ),
        col(
            "unk",
            T::Unknown {
                name: "point".into(),
            },
            "point",
        ),
        col("u64", T::UInt64, "bigint unsigned"),
        col("yr", T::Year, "year"),
    ];
    Arc::new(TableSchema::new(TableId::new("public", "all_types"), cols, &["id"]).unwrap())
}

pub fn small_table() -> Arc<TableSchema> {
    Arc::new(
        TableSchema::new(
            TableId::new("public", "orders"),
            vec![
                Column::new("id", ColumnType::Int64, "int8").not_null(),
                Column::new("note", ColumnType::Text { max_len: None }, "text"),
            ],
            &["id"],
        )
        .unwrap(),
    )
}

pub fn small_row(id: i64, note: Option<&str>) -> Row {
    use cdc_schemas::Value;
    Row::new(vec![
        Value::Int64(id),
        note.map(|n| Value::Text(n.into())).unwrap_or(Value::Null),
    ])
}

pub fn create(table: &Arc<TableSchema>, row: Row) -> ChangeEvent {
    ChangeEvent::create(table.clone(), row, pg_pos(), SRC_TS_MS).unwrap()
}

pub fn encoder(cfg: &EncoderConfig, t: &TableSchema) -> Encoder {
    let mut e = Encoder::new(cfg, t).unwrap();
    e.set_schema_ids(SchemaIds {
        key: Some(7),
        value: 8,
    });
    e
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Base64 of the minimal two's complement of a decimal integer string.
pub fn dec_b64(unscaled: &str) -> String {
    b64(&unscaled.parse::<BigInt>().unwrap().to_signed_bytes_be())
}

fn float_json(f: f64, text: String) -> J {
    if f.is_nan() {
        json!("NaN")
    } else if f.is_infinite() {
        json!(if f > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(text.parse::<f64>().unwrap())
    }
}

/// An `apache-avro` decoded value in the Connect JSON payload's representation.
pub fn avro_to_json(v: &apache_avro::types::Value) -> J {
    use apache_avro::types::Value as A;
    match v {
        A::Null => J::Null,
        A::Boolean(b) => json!(b),
        A::Int(i) | A::Date(i) | A::TimeMillis(i) => json!(i),
        A::Long(l) | A::TimestampMillis(l) | A::TimeMicros(l) | A::TimestampMicros(l) => {
            json!(l)
        }
        // The shortest text of an f32 is not unique (ties); compare with the same
        // formatter the JSON writer uses, so both sides denote the same f32.
        A::Float(f) => float_json(*f as f64, ryu::Buffer::new().format(*f).to_string()),
        A::Double(d) => float_json(*d, d.to_string()),
        A::Bytes(b) => json!(b64(b)),
        A::String(s) => json!(s),
        A::Union(_, inner) => avro_to_json(inner),
        A::Array(items) => J::Array(items.iter().map(avro_to_json).collect()),
        A::Record(fields) => {
            let mut m = serde_json::Map::new();
            for (k, v) in fields {
                m.insert(k.clone(), avro_to_json(v));
            }
            J::Object(m)
        }
        A::Decimal(d) => json!(b64(&Vec::<u8>::try_from(d).unwrap())),
        A::Uuid(u) => json!(u.to_string()),
        other => panic!("unexpected Avro value in a Debezium record: {other:?}"),
    }
}

/// Decodes a Confluent-framed Avro datum with the encoder's derived schema, checking the
/// frame's schema id.
pub fn decode_avro(schema_json: &str, framed: &[u8], id: u32) -> J {
    assert_eq!(framed[0], 0, "magic byte");
    assert_eq!(u32::from_be_bytes(framed[1..5].try_into().unwrap()), id);
    let schema = apache_avro::Schema::parse_str(schema_json).unwrap();
    let mut rest = &framed[5..];
    let v = apache_avro::from_avro_datum(&schema, &mut rest, None).unwrap();
    assert!(
        rest.is_empty(),
        "{} trailing bytes after the datum",
        rest.len()
    );
    avro_to_json(&v)
}

/// The value of `ev` in every format, checked against each other: returns the JSON
/// payload (payload-only form), after checking that the schemas-enabled payload and the
/// Avro datum decode to the same thing.
pub fn value_everywhere(cfg_of: impl Fn(RecordFormat) -> EncoderConfig, ev: &ChangeEvent) -> J {
    let t = ev.table.as_ref().unwrap();
    let json_enc = encoder(&cfg_of(JSON), t);
    let mut b = Vec::new();
    json_enc.encode_value_at(ev, NOW_NS, &mut b).unwrap();
    let payload: J = serde_json::from_slice(&b).unwrap();

    let schema_enc = encoder(&cfg_of(JSON_SCHEMA), t);
    let mut b = Vec::new();
    schema_enc.encode_value_at(ev, NOW_NS, &mut b).unwrap();
    let with_schema: J = serde_json::from_slice(&b).unwrap();
    assert_eq!(with_schema["payload"], payload);
    assert_eq!(with_schema.as_object().unwrap().len(), 2);

    let avro_enc = encoder(&cfg_of(AVRO), t);
    let mut b = Vec::new();
    avro_enc.encode_value_at(ev, NOW_NS, &mut b).unwrap();
    let decoded = decode_avro(avro_enc.avro_value_schema(), &b, 8);
    assert_eq!(decoded, payload, "Avro and JSON disagree");
    payload
}

pub fn value_error(cfg: &EncoderConfig, ev: &ChangeEvent) -> EncodeError {
    let e = encoder(cfg, ev.table.as_ref().unwrap());
    let mut b = b"keep".to_vec();
    let err = e.encode_value_at(ev, NOW_NS, &mut b).unwrap_err();
    assert_eq!(
        b, b"keep",
        "a failed encode must leave the buffer as it was"
    );
    err
}
