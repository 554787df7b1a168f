//! Round trips of every supported type through JSON (payload only and with schemas) and
//! Avro (decoded by `apache-avro` with the derived schema), against hand-written
//! expectations of Debezium's representation.

mod common;

use cdc_schemas::encode::{
    BigIntUnsignedHandlingMode, BinaryHandlingMode, DecimalHandlingMode, EncodeError,
    EncoderConfig, IntervalHandlingMode, RecordFormat, TimePrecisionMode, ValueError,
};
use cdc_schemas::{Decimal, Row, Value};
use common::*;
use serde_json::{json, Value as J};

fn dec(s: &str) -> Value {
    Value::Decimal(s.parse::<Decimal>().unwrap())
}

const UUID: [u8; 16] = [
    0xef, 0x9b, 0x5b, 0xeb, 0x9c, 0x21, 0x4d, 0x66, 0xa7, 0x69, 0x47, 0x20, 0x7c, 0x20, 0x5b, 0xbe,
];

fn typical_row() -> Row {
    Row::new(vec![
        Value::Int64(1),
        Value::Bool(true),
        Value::Int16(-5),
        Value::Int32(123_456),
        Value::Float32(1.5),
        Value::Float64(-2.25),
        dec("1234.50"),
        dec("3.14159"),
        Value::Text("héllo 😀 \"q\"".into()),
        Value::Bytes(vec![0, 1, 2, 255]),
        Value::Json("{\"a\": 1}".into()),
        Value::Uuid(UUID),
        Value::Date(19_723),
        Value::Time(45_296_789_012),
        Value::Time(45_296_789_000),
        Value::TimeTz {
            micros: (10 * 3600 + 15 * 60 + 30) * 1_000_000 + 500_000,
            offset_seconds: 7200,
        },
        Value::Timestamp(1_740_218_268_517_360),
        Value::Timestamp(1_740_218_268_517_000),
        Value::TimestampTz(1_740_218_268_517_360),
        Value::Interval {
            months: 1,
            days: 2,
            micros: 3,
        },
        Value::Text("ok".into()),
        Value::Bits {
            len: 1,
            bytes: vec![0x80],
        },
        Value::Bits {
            len: 10,
            bytes: vec![0b1000_0000, 0b0100_0000],
        },
        Value::Array(vec![
            Value::Text("a".into()),
            Value::Null,
            Value::Text("".into()),
        ]),
        Value::Array(vec![Value::Int32(1), Value::Int32(2)]),
        Value::Text("192.168.0.1/24".into()),
        Value::Text("(1,2)".into()),
        Value::UInt64(42),
        Value::Int32(2024),
    ])
}

fn typical_expected() -> J {
    json!({
        "id": 1, "b": true, "i16": -5, "i32": 123456, "f32": 1.5, "f64": -2.25,
        "dec": "AeI6",
        "vdec": {"scale": 5, "value": dec_b64("314159")},
        "txt": "héllo 😀 \"q\"",
        "byt": "AAEC/w==",
        "js": "{\"a\": 1}",
        "uid": "ef9b5beb-9c21-4d66-a769-47207c205bbe",
        "d": 19723,
        "t": 45296789012i64,
        "t3": 45296789,
        "ttz": "08:15:30.5Z",
        "ts": 1740218268517360i64,
        "ts3": 1740218268517i64,
        "tstz": "2025-02-22T09:57:48.517360Z",
        "iv": 2_629_800_000_000i64 + 172_800_000_000 + 3,
        "en": "ok",
        "bit1": true,
        "bits": "AQI=",
        "arr": ["a", null, ""],
        "iarr": [1, 2],
        "inet": "192.168.0.1/24",
        "unk": "(1,2)",
        "u64": 42,
        "yr": 2024
    })
}

#[test]
fn every_type_typical_values() {
    let t = all_types_table();
    let ev = create(&t, typical_row());
    let v = value_everywhere(pg_config, &ev);
    assert_eq!(v["after"], typical_expected());
    assert_eq!(v["before"], J::Null);
}

#[test]
fn every_type_extreme_values() {
    let t = all_types_table();
    let row = Row::new(vec![
        Value::Int64(i64::MIN),
        Value::Bool(false),
        Value::Int16(i16::MIN),
        Value::Int32(i32::MAX),
        Value::Float32(f32::NAN),
        Value::Float64(f64::INFINITY),
        dec("-9999999999.99"),
        dec("123456789012345678901234567890.000000000000000000001"),
        Value::Text(String::new()),
        Value::Bytes(vec![]),
        Value::Json("[]".into()),
        Value::Uuid([0; 16]),
        Value::Date(-719_528),
        Value::Time(0),
        Value::Time(86_400_000_000),
        Value::TimeTz {
            micros: 23 * 3_600_000_000,
            offset_seconds: -5 * 3600,
        },
        Value::Timestamp(-1),
        Value::Timestamp(-1),
        Value::TimestampTz(4_102_444_800_000_000),
        Value::Interval {
            months: -1,
            days: 0,
            micros: -1,
        },
        Value::Text("sad".into()),
        Value::Bits {
            len: 1,
            bytes: vec![0],
        },
        Value::Bits {
            len: 0,
            bytes: vec![],
        },
        Value::Array(vec![]),
        Value::Array(vec![Value::Null]),
        Value::Text("::1".into()),
        Value::Text("\u{0}\u{1f}\\".into()),
        Value::UInt64(i64::MAX as u64),
        Value::Int16(1901),
    ]);
    let v = value_everywhere(pg_config, &create(&t, row));
    assert_eq!(
        v["after"],
        json!({
            "id": i64::MIN, "b": false, "i16": i16::MIN, "i32": i32::MAX,
            "f32": "NaN", "f64": "Infinity",
            "dec": dec_b64("-999999999999"),
            "vdec": {"scale": 21, "value": dec_b64("123456789012345678901234567890000000000000000000001")},
            "txt": "", "byt": "", "js": "[]",
            "uid": "00000000-0000-0000-0000-000000000000",
            "d": -719528, "t": 0, "t3": 86400000,
            "ttz": "04:00:00Z",
            "ts": -1, "ts3": -1,
            "tstz": "2100-01-01T00:00:00.000000Z",
            "iv": -2_629_800_000_001i64,
            "en": "sad", "bit1": false, "bits": "",
            "arr": [], "iarr": [null],
            "inet": "::1", "unk": "\u{0}\u{1f}\\",
            "u64": i64::MAX, "yr": 1901
        })
    );
}

#[test]
fn postgres_infinities_and_tiny_decimals() {
    let t = all_types_table();
    let mut row = typical_row();
    row.0[4] = Value::Float32(f32::NEG_INFINITY);
    row.0[5] = Value::Float64(f64::NAN);
    row.0[6] = dec("0.01");
    row.0[7] = dec("0.000000000000000000000000000001");
    row.0[12] = Value::Date(Value::DATE_POS_INFINITY);
    row.0[16] = Value::Timestamp(Value::TIMESTAMP_NEG_INFINITY);
    row.0[17] = Value::Timestamp(Value::TIMESTAMP_POS_INFINITY);
    row.0[18] = Value::TimestampTz(Value::TIMESTAMP_NEG_INFINITY);
    let v = value_everywhere(pg_config, &create(&t, row));
    let a = &v["after"];
    assert_eq!(a["f32"], "-Infinity");
    assert_eq!(a["f64"], "NaN");
    assert_eq!(a["dec"], dec_b64("1"));
    assert_eq!(a["vdec"], json!({"scale": 30, "value": dec_b64("1")}));
    assert_eq!(a["d"], i32::MAX);
    assert_eq!(a["ts"], i64::MIN);
    assert_eq!(a["ts3"], i64::MAX);
    assert_eq!(a["tstz"], "-infinity");
    // Pre-1970 and post-2038 instants, and a BC date.
    let mut row = typical_row();
    row.0[18] = Value::TimestampTz(-1_000_000_000_000_001);
    row.0[12] = Value::Date(-1_000_000);
    let v = value_everywhere(pg_config, &create(&t, row));
    assert_eq!(v["after"]["tstz"], "1938-04-24T22:13:19.999999Z");
    assert_eq!(v["after"]["d"], -1_000_000);
}

#[test]
fn nulls_are_nulls_and_empty_strings_are_not() {
    let t = all_types_table();
    let mut values = vec![Value::Int64(9)];
    values.resize(t.columns.len(), Value::Null);
    let v = value_everywhere(pg_config, &create(&t, Row::new(values)));
    let after = v["after"].as_object().unwrap();
    assert_eq!(after.len(), t.columns.len());
    for (k, val) in after {
        if k != "id" {
            assert_eq!(val, &J::Null, "{k}");
        }
    }
}

#[test]
fn unchanged_toast_uses_the_placeholder() {
    let t = all_types_table();
    // An old key image: NULL outside the key, which says nothing about the values.
    let mut before = Row::new(vec![Value::Null; t.columns.len()]);
    before.0[0] = typical_row().0[0].clone();
    let mut after = typical_row();
    after.0[8] = Value::Unchanged; // text
    after.0[9] = Value::Unchanged; // bytea
    after.0[10] = Value::Unchanged; // jsonb
    after.0[23] = Value::Unchanged; // text[]
    let ev = cdc_schemas::ChangeEvent::update(t.clone(), Some(before), after.clone(), pg_pos(), 1)
        .unwrap();
    let v = value_everywhere(pg_config, &ev);
    let a = &v["after"];
    assert_eq!(a["txt"], "__debezium_unavailable_value");
    assert_eq!(a["byt"], b64(b"__debezium_unavailable_value"));
    assert_eq!(a["js"], "__debezium_unavailable_value");
    assert_eq!(a["arr"], json!(["__debezium_unavailable_value"]));
    assert_eq!(v["before"]["txt"], J::Null);

    // A whole old row (REPLICA IDENTITY FULL) holds the unchanged values: they are used.
    let mut full = typical_row();
    full.0[8] = Value::Text("old".into());
    let ev_full =
        cdc_schemas::ChangeEvent::update(t.clone(), Some(full), after, pg_pos(), 1).unwrap();
    let v_full = value_everywhere(pg_config, &ev_full);
    assert_eq!(v_full["after"]["txt"], "old");
    assert_eq!(v_full["after"]["arr"], v_full["before"]["arr"]);
    assert_eq!(v_full["after"]["byt"], v_full["before"]["byt"]);

    // Configurable placeholder.
    let custom = |f| {
        let mut c = pg_config(f);
        c.unavailable_value_placeholder = "<toast>".into();
        c
    };
    let v = value_everywhere(custom, &ev);
    assert_eq!(v["after"]["txt"], "<toast>");

    // A type with no string/bytes placeholder form: Debezium's int-array placeholder (the
    // placeholder's bytes) in the record, its header in tests/unrepresentable.rs; with
    // `fail`, an error, never a NULL.
    let mut after = typical_row();
    after.0[24] = Value::Unchanged; // int4[]
    let ev = cdc_schemas::ChangeEvent::update(t.clone(), None, after, pg_pos(), 1).unwrap();
    let v = value_everywhere(pg_config, &ev);
    let placeholder: Vec<J> = b"__debezium_unavailable_value"
        .iter()
        .map(|b| json!(b))
        .collect();
    assert_eq!(v["after"]["iarr"], J::Array(placeholder));
    for f in [JSON, AVRO] {
        let e = value_error(&fail_config(f), &ev);
        assert!(
            matches!(&e, EncodeError::Value { column, reason: ValueError::Unrepresentable { .. }, .. } if column == "iarr"),
            "{e}"
        );
        assert!(e.to_string().contains("REPLICA IDENTITY FULL"));
    }
}

#[test]
fn multi_dimensional_arrays_keep_their_nesting_where_the_format_can() {
    // Postgres does not fix an array column's dimensions: int4[] may hold {{1,2},{3,NULL}}.
    let t = all_types_table();
    let mut row = typical_row();
    let i = |n| Value::Int32(n);
    row.0[24] = Value::Array(vec![
        Value::Array(vec![i(1), i(2)]),
        Value::Array(vec![i(3), Value::Null]),
    ]);
    let ev = create(&t, row);
    // Schemaless JSON has no schema to disagree with: the exact nesting.
    let e = encoder(&pg_config(JSON), &t);
    let mut b = Vec::new();
    e.encode_value_at(&ev, NOW_NS, &mut b).unwrap();
    let v: J = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["after"]["iarr"], json!([[1, 2], [3, null]]));
    // The schema says one level: Debezium's one null per sub-array (the exact value is in
    // a header, tests/unrepresentable.rs).
    for f in [JSON_SCHEMA, AVRO] {
        let e = encoder(&pg_config(f), &t);
        let mut b = Vec::new();
        e.encode_value_at(&ev, NOW_NS, &mut b).unwrap();
        let v = match f {
            AVRO => decode_avro(e.avro_value_schema(), &b, 8),
            _ => serde_json::from_slice::<J>(&b).unwrap()["payload"].clone(),
        };
        assert_eq!(v["after"]["iarr"], json!([null, null]), "{f:?}");
    }
}

#[test]
fn values_that_do_not_fit_are_errors_naming_the_column() {
    let t = all_types_table();
    // (`fail` mode: by default the first and last are carried in headers instead.)
    let cases: Vec<(usize, Value, &str)> = vec![
        (6, Value::Decimal(Decimal::NaN), "decimal.handling.mode"),
        (6, dec("1.234"), "declared scale"),
        (2, Value::Int32(70_000), "out of range"),
        (
            3,
            Value::Text("x".into()),
            "expected a Int32 value, got Text",
        ),
        (
            27,
            Value::UInt64(u64::MAX),
            "bigint.unsigned.handling.mode=precise",
        ),
    ];
    for (i, v, msg) in cases {
        let mut row = typical_row();
        row.0[i] = v;
        let ev = create(&t, row);
        for f in [JSON, JSON_SCHEMA, AVRO] {
            let e = value_error(&fail_config(f), &ev);
            let s = e.to_string();
            assert!(s.contains(msg), "{s}");
            assert!(s.contains(&format!("{:?}", t.columns[i].name)), "{s}");
        }
    }
    // NULL in a NOT NULL column.
    let mut row = typical_row();
    row.0[0] = Value::Null;
    let e = value_error(&pg_config(AVRO), &create(&t, row));
    assert!(matches!(
        e,
        EncodeError::Value {
            reason: ValueError::NullInRequired,
            ..
        }
    ));
}

#[test]
fn decimal_modes() {
    let t = all_types_table();
    let mut row = typical_row();
    row.0[7] = Value::Decimal(Decimal::NaN);
    let ev = create(&t, row);
    let string = |f| {
        let mut c = pg_config(f);
        c.decimal_handling_mode = DecimalHandlingMode::String;
        c
    };
    let v = value_everywhere(string, &ev);
    assert_eq!(v["after"]["dec"], "1234.50");
    assert_eq!(v["after"]["vdec"], "NaN");
    let double = |f| {
        let mut c = pg_config(f);
        c.decimal_handling_mode = DecimalHandlingMode::Double;
        c
    };
    let v = value_everywhere(double, &ev);
    assert_eq!(v["after"]["dec"], 1234.5);
    assert_eq!(v["after"]["vdec"], "NaN");
    // Precise: NaN in an unconstrained numeric cannot be carried: null, as Debezium (the
    // header is in tests/unrepresentable.rs), or with `fail` an error.
    let v = value_everywhere(pg_config, &ev);
    assert_eq!(v["after"]["vdec"], J::Null);
    let e = value_error(&fail_config(JSON), &ev);
    assert!(e.to_string().contains("\"vdec\""), "{e}");
}

#[test]
fn time_precision_modes() {
    let t = all_types_table();
    let ev = create(&t, typical_row());
    let with = |mode: TimePrecisionMode| {
        move |f| {
            let mut c = pg_config(f);
            c.time_precision_mode = mode;
            c
        }
    };
    let v = value_everywhere(with(TimePrecisionMode::Connect), &ev);
    let a = &v["after"];
    assert_eq!(a["d"], 19723);
    assert_eq!(a["t"], 45_296_789);
    assert_eq!(a["ts"], 1_740_218_268_517i64);
    assert_eq!(a["tstz"], "2025-02-22T09:57:48.517360Z");
    let v = value_everywhere(with(TimePrecisionMode::AdaptiveTimeMicroseconds), &ev);
    assert_eq!(v["after"]["t3"], 45_296_789_000i64);
    assert_eq!(v["after"]["ts3"], 1_740_218_268_517i64);
}

#[test]
fn binary_interval_and_unsigned_modes() {
    let t = all_types_table();
    let ev = create(&t, typical_row());
    for (mode, expected) in [
        (BinaryHandlingMode::Base64, json!("AAEC/w==")),
        (BinaryHandlingMode::Base64UrlSafe, json!("AAEC_w==")),
        (BinaryHandlingMode::Hex, json!("000102ff")),
    ] {
        let cfg = move |f| {
            let mut c = pg_config(f);
            c.binary_handling_mode = mode;
            c
        };
        assert_eq!(value_everywhere(cfg, &ev)["after"]["byt"], expected);
    }
    let cfg = |f| {
        let mut c = pg_config(f);
        c.interval_handling_mode = IntervalHandlingMode::String;
        c.bigint_unsigned_handling_mode = BigIntUnsignedHandlingMode::Precise;
        c
    };
    let mut row = typical_row();
    row.0[27] = Value::UInt64(u64::MAX);
    let v = value_everywhere(cfg, &create(&t, row));
    assert_eq!(v["after"]["iv"], "P0Y1M2DT0H0M0.000003S");
    assert_eq!(v["after"]["u64"], dec_b64("18446744073709551615"));
}

fn field<'a>(schema: &'a J, name: &str) -> &'a J {
    schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == name)
        .unwrap_or_else(|| panic!("no field {name}"))
}

#[test]
fn connect_schemas_name_every_semantic_type() {
    let t = all_types_table();
    let e = encoder(&pg_config(JSON_SCHEMA), &t);
    let mut b = Vec::new();
    e.encode_value_at(&create(&t, typical_row()), NOW_NS, &mut b)
        .unwrap();
    let v: J = serde_json::from_slice(&b).unwrap();
    let after = field(&v["schema"], "after");
    assert_eq!(after["name"], "shop.public.all_types.Value");
    assert_eq!(after["optional"], true);
    let expect = |name: &str, want: J| {
        let mut got = field(after, name).clone();
        got.as_object_mut().unwrap().remove("field");
        assert_eq!(got, want, "{name}");
    };
    expect("id", json!({"type": "int64", "optional": false}));
    expect("i16", json!({"type": "int16", "optional": true}));
    expect("f32", json!({"type": "float", "optional": true}));
    expect(
        "dec",
        json!({"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal",
               "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "12"}}),
    );
    expect(
        "vdec",
        json!({"type": "struct", "fields": [
                  {"type": "int32", "optional": false, "field": "scale"},
                  {"type": "bytes", "optional": false, "field": "value"}],
               "optional": true, "name": "io.debezium.data.VariableScaleDecimal", "version": 1,
               "doc": "Variable scaled decimal"}),
    );
    expect(
        "js",
        json!({"type": "string", "optional": true, "name": "io.debezium.data.Json", "version": 1}),
    );
    expect(
        "uid",
        json!({"type": "string", "optional": true, "name": "io.debezium.data.Uuid", "version": 1}),
    );
    expect(
        "d",
        json!({"type": "int32", "optional": true, "name": "io.debezium.time.Date", "version": 1}),
    );
    expect(
        "t",
        json!({"type": "int64", "optional": true, "name": "io.debezium.time.MicroTime", "version": 1}),
    );
    expect(
        "t3",
        json!({"type": "int32", "optional": true, "name": "io.debezium.time.Time", "version": 1}),
    );
    expect(
        "ttz",
        json!({"type": "string", "optional": true, "name": "io.debezium.time.ZonedTime", "version": 1}),
    );
    expect(
        "ts",
        json!({"type": "int64", "optional": true, "name": "io.debezium.time.MicroTimestamp", "version": 1}),
    );
    expect(
        "ts3",
        json!({"type": "int64", "optional": true, "name": "io.debezium.time.Timestamp", "version": 1}),
    );
    expect(
        "tstz",
        json!({"type": "string", "optional": true, "name": "io.debezium.time.ZonedTimestamp", "version": 1}),
    );
    expect(
        "iv",
        json!({"type": "int64", "optional": true, "name": "io.debezium.time.MicroDuration", "version": 1}),
    );
    expect(
        "en",
        json!({"type": "string", "optional": true, "name": "io.debezium.data.Enum", "version": 1,
               "parameters": {"allowed": "sad,ok"}}),
    );
    expect("bit1", json!({"type": "boolean", "optional": true}));
    expect(
        "bits",
        json!({"type": "bytes", "optional": true, "name": "io.debezium.data.Bits", "version": 1,
               "parameters": {"length": "10"}}),
    );
    expect(
        "arr",
        json!({"type": "array", "items": {"type": "string", "optional": true}, "optional": true}),
    );
    expect(
        "yr",
        json!({"type": "int32", "optional": true, "name": "io.debezium.time.Year", "version": 1}),
    );
}

#[test]
fn avro_schema_follows_the_avro_converter() {
    let t = all_types_table();
    let e = encoder(&pg_config(AVRO), &t);
    let s: J = serde_json::from_str(e.avro_value_schema()).unwrap();
    assert_eq!(s["name"], "Envelope");
    assert_eq!(s["namespace"], "shop.public.all_types");
    assert_eq!(s["connect.version"], 2);
    let fields = s["fields"].as_array().unwrap();
    let names: Vec<_> = fields.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
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
    let value = &fields[0]["type"][1];
    assert_eq!(value["name"], "Value");
    assert_eq!(
        fields[1]["type"],
        json!(["null", "shop.public.all_types.Value"])
    );
    let col = |n: &str| {
        value["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(col("id"), json!({"name": "id", "type": "long"}));
    assert_eq!(
        col("i16"),
        json!({"name": "i16", "type": ["null", {"type": "int", "connect.type": "int16"}], "default": null})
    );
    assert_eq!(
        col("dec")["type"][1],
        json!({"type": "bytes", "scale": 2, "precision": 12, "connect.version": 1,
               "connect.parameters": {"scale": "2", "connect.decimal.precision": "12"},
               "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"})
    );
    assert_eq!(
        col("uid")["type"][1],
        json!({"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Uuid"})
    );
    assert_eq!(
        col("arr")["type"][1],
        json!({"type": "array", "items": ["null", "string"]})
    );
    // The key schema.
    let k: J = serde_json::from_str(e.avro_key_schema().unwrap()).unwrap();
    assert_eq!(
        k,
        json!({"type": "record", "name": "Key", "namespace": "shop.public.all_types",
               "fields": [{"name": "id", "type": "long"}],
               "connect.name": "shop.public.all_types.Key"})
    );
    // Parsing Canonical Form and fingerprint are stable (what the registry dedups on).
    let parsed = apache_avro::Schema::parse_str(e.avro_value_schema()).unwrap();
    assert!(parsed
        .canonical_form()
        .starts_with("{\"name\":\"shop.public.all_types.Envelope\""));
}

#[test]
fn avro_names_are_sanitised_like_debezium() {
    use cdc_schemas::{Column, ColumnType, TableId, TableSchema};
    let t = TableSchema::new(
        TableId::new("my-schema", "2fa codes"),
        vec![
            Column::new("user-id", ColumnType::Int32, "int4").not_null(),
            Column::new("ünï", ColumnType::Text { max_len: None }, "text"),
        ],
        &["user-id"],
    )
    .unwrap();
    let mut cfg = pg_config(AVRO);
    cfg.source.topic_prefix = "my-server".into();
    let e = encoder(&cfg, &t);
    let s: J = serde_json::from_str(e.avro_value_schema()).unwrap();
    assert_eq!(s["namespace"], "my_server.my_schema._2fa_codes");
    let value = &s["fields"][0]["type"][1];
    assert_eq!(value["fields"][0]["name"], "user_id");
    assert_eq!(value["fields"][1]["name"], "_n_");
    // connect.name keeps the unsanitised Connect name.
    assert_eq!(value["connect.name"], "my-server.my-schema.2fa codes.Value");
    let ev = cdc_schemas::ChangeEvent::create(
        std::sync::Arc::new(t),
        Row::new(vec![Value::Int32(1), Value::Text("x".into())]),
        pg_pos(),
        1,
    )
    .unwrap();
    let mut b = Vec::new();
    e.encode_value_at(&ev, NOW_NS, &mut b).unwrap();
    let v = decode_avro(e.avro_value_schema(), &b, 8);
    assert_eq!(v["after"], json!({"user_id": 1, "_n_": "x"}));

    // Two columns that sanitise to the same name are a construction error.
    let t = TableSchema::new(
        TableId::new("s", "t"),
        vec![
            Column::new("a-b", ColumnType::Int32, "int4"),
            Column::new("a_b", ColumnType::Int32, "int4"),
        ],
        &[],
    )
    .unwrap();
    assert!(matches!(
        cdc_schemas::encode::Encoder::new(&pg_config(AVRO), &t),
        Err(EncodeError::NameConflict { .. })
    ));
}

/// Random rows of random values: both encodings accept them and agree.
mod random_rows {
    use super::*;
    use proptest::prelude::*;

    fn value_for(i: usize) -> BoxedStrategy<Value> {
        let v: BoxedStrategy<Value> = match i {
            0 => any::<i64>().prop_map(Value::Int64).boxed(),
            1 => any::<bool>().prop_map(Value::Bool).boxed(),
            2 => any::<i16>().prop_map(Value::Int16).boxed(),
            3 => any::<i32>().prop_map(Value::Int32).boxed(),
            4 => any::<f32>().prop_map(Value::Float32).boxed(),
            5 => any::<f64>().prop_map(Value::Float64).boxed(),
            6 => (-99_999_999_999i64..99_999_999_999)
                .prop_map(|u| Value::Decimal(Decimal::new(u.into(), 2)))
                .boxed(),
            7 => ("-?[1-9][0-9]{0,50}", 0u32..60)
                .prop_map(|(u, s)| Value::Decimal(Decimal::new(u.parse().unwrap(), s)))
                .boxed(),
            8 | 10 | 25 | 26 => any::<String>().prop_map(Value::Text).boxed(),
            9 => proptest::collection::vec(any::<u8>(), 0..40)
                .prop_map(Value::Bytes)
                .boxed(),
            11 => any::<[u8; 16]>().prop_map(Value::Uuid).boxed(),
            12 => any::<i32>().prop_map(Value::Date).boxed(),
            13 | 14 => (0i64..86_400_000_001).prop_map(Value::Time).boxed(),
            15 => (0i64..86_400_000_000, -50_400i32..50_400)
                .prop_map(|(micros, offset_seconds)| Value::TimeTz {
                    micros,
                    offset_seconds,
                })
                .boxed(),
            16 | 17 => any::<i64>().prop_map(Value::Timestamp).boxed(),
            18 => any::<i64>().prop_map(Value::TimestampTz).boxed(),
            19 => (any::<i32>(), any::<i32>(), any::<i64>())
                .prop_map(|(months, days, micros)| Value::Interval {
                    months,
                    days,
                    micros,
                })
                .boxed(),
            20 => prop_oneof![Just("sad"), Just("ok")]
                .prop_map(|s| Value::Text(s.into()))
                .boxed(),
            21 => any::<bool>()
                .prop_map(|b| Value::Bits {
                    len: 1,
                    bytes: vec![if b { 0x80 } else { 0 }],
                })
                .boxed(),
            22 => (0u32..=10, any::<[u8; 2]>())
                .prop_map(|(len, b)| Value::Bits {
                    len,
                    bytes: b[..(len as usize).div_ceil(8)].to_vec(),
                })
                .boxed(),
            23 => proptest::collection::vec(
                prop_oneof![Just(Value::Null), any::<String>().prop_map(Value::Text)],
                0..5,
            )
            .prop_map(Value::Array)
            .boxed(),
            24 => proptest::collection::vec(
                prop_oneof![Just(Value::Null), any::<i32>().prop_map(Value::Int32)],
                0..5,
            )
            .prop_map(Value::Array)
            .boxed(),
            27 => (0u64..=i64::MAX as u64).prop_map(Value::UInt64).boxed(),
            _ => any::<i16>().prop_map(|y| Value::Int32(y as i32)).boxed(),
        };
        if i == 0 {
            v
        } else {
            prop_oneof![1 => Just(Value::Null), 4 => v].boxed()
        }
    }

    fn row() -> impl Strategy<Value = Row> {
        let n = all_types_table().columns.len();
        (0..n).map(value_for).collect::<Vec<_>>().prop_map(Row::new)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn json_and_avro_agree(row in row()) {
            let t = all_types_table();
            let v = value_everywhere(pg_config, &create(&t, row.clone()));
            // Spot-check exact values that survive both encodings unchanged.
            prop_assert_eq!(&v["after"]["id"], &json!(match row.0[0] { Value::Int64(i) => i, _ => 0 }));
            if let Value::Text(s) = &row.0[8] {
                prop_assert_eq!(&v["after"]["txt"], &json!(s));
            }
            if let Value::Decimal(d) = &row.0[7] {
                let back = &v["after"]["vdec"];
                let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, back["value"].as_str().unwrap()).unwrap();
                let scale = back["scale"].as_u64().unwrap() as u32;
                prop_assert_eq!(&Decimal::from_twos_complement_be(&bytes, scale), d);
            }
        }
    }
}

#[allow(dead_code)]
fn _assert_config_is_clone(c: &EncoderConfig, f: RecordFormat) -> EncoderConfig {
    let mut c = c.clone();
    c.format = f;
    c
}
