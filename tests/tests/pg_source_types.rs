//! Every column type from a row to the log and back: the JSON envelope's `after` decoded
//! from the log equals the row's values (as Postgres computes them), and the snapshot path
//! (COPY text) and the streaming path (pgoutput) give identical records for identical rows.

mod pg_source_util;

use std::time::Duration;

use cdc_harness::PgServer;
use pg_source_util::*;
use serde_json::{json, Value as Json};

const COLUMNS: &[(&str, &str)] = &[
    ("c_bool", "bool"),
    ("c_int2", "int2"),
    ("c_int4", "int4"),
    ("c_int8", "int8"),
    ("c_float4", "float4"),
    ("c_float8", "float8"),
    ("c_numeric", "numeric(12,3)"),
    ("c_numeric_free", "numeric"),
    ("c_text", "text"),
    ("c_varchar", "varchar(20)"),
    ("c_char", "char(4)"),
    ("c_bytea", "bytea"),
    ("c_json", "json"),
    ("c_jsonb", "jsonb"),
    ("c_uuid", "uuid"),
    ("c_date", "date"),
    ("c_time", "time"),
    ("c_timetz", "timetz"),
    ("c_ts", "timestamp"),
    ("c_ts3", "timestamp(3)"),
    ("c_tstz", "timestamptz"),
    ("c_interval", "interval"),
    ("c_inet", "inet"),
    ("c_macaddr", "macaddr"),
    ("c_bit", "bit(5)"),
    ("c_varbit", "varbit"),
    ("c_int_arr", "int4[]"),
    ("c_text_arr", "text[]"),
    ("c_mood", "mood"),
    ("c_money", "money"),
    ("c_null", "text"),
];

const VALUES: &str = "true, -32768, 2147483647, -9223372036854775808, 1.5, -2.25e-300, 123456789.125, \
    -0.000000001, 'tab\tnewline\nquote''s back\\slash é', 'varchar', 'ab', '\\x00ff10'::bytea, \
    '{\"a\": [1, 2.5, null]}', '{\"b\": true}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29', \
    '23:59:59.999999', '12:00:01+05:30', '2024-01-02 03:04:05.678901', '1999-12-31 23:59:59.999', \
    '2024-06-01 12:00:00+02', 'P1Y2M3DT4H5M6.5S', '192.168.0.1/24', '08:00:2b:01:02:03', B'10101', \
    B'1100', '{1,NULL,3}', '{\"a b\",\"c,d\",NULL}', 'happy', 12.34, NULL";

#[tokio::test(flavor = "multi_thread")]
async fn every_type_round_trips_through_snapshot_and_stream() {
    let pg = PgServer::shared();
    let cols: Vec<String> = COLUMNS.iter().map(|(n, t)| format!("{n} {t}")).collect();
    let db = database_with(
        pg,
        &format!(
            "SET ROLE cdc; CREATE TYPE mood AS ENUM ('sad', 'happy');
             CREATE TABLE ty (id int PRIMARY KEY, {});
             INSERT INTO ty VALUES (1, {VALUES});",
            cols.join(", ")
        ),
    )
    .await;
    let (_dir, mut c) = temp_connector(
        pg,
        &db,
        &["public.ty"],
        "[format]\ndecimal_handling_mode = \"string\"\nbinary_handling_mode = \"hex\"\ninterval_handling_mode = \"string\"\n",
    );
    c.start();
    let topic = "t.public.ty";
    let wait = |n: usize| {
        let dir = c.log_dir();
        async move {
            for _ in 0..300 {
                let r = read_topic(&dir, topic);
                if r.len() >= n {
                    return r;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("fewer than {n} records");
        }
    };
    wait(1).await;
    pg.execute(&db, &format!("INSERT INTO ty VALUES (2, {VALUES})"))
        .await
        .unwrap();
    let recs = wait(2).await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
    let after = |op: &str| -> Json {
        recs.iter()
            .filter_map(|r| r.value.clone())
            .find(|v| v["op"] == op)
            .unwrap_or_else(|| panic!("no {op} record"))["after"]
            .clone()
    };
    let (mut snap, mut live) = (after("r"), after("c"));
    assert_eq!(snap["id"], 1);
    assert_eq!(live["id"], 2);
    snap.as_object_mut().unwrap().remove("id");
    live.as_object_mut().unwrap().remove("id");
    for (name, _) in COLUMNS {
        assert_eq!(
            snap[name], live[name],
            "column {name}: snapshot and stream differ"
        );
    }
    // The values, as Postgres computes them.
    let client = pg.superuser_client(&db).await.unwrap();
    let q = |sql: String| {
        let client = &client;
        async move {
            let row = client
                .query_one(&format!("SELECT ({sql})::text FROM ty WHERE id = 2"), &[])
                .await
                .unwrap();
            row.get::<_, Option<String>>(0)
        }
    };
    let s = |v: &Json| v.as_str().map(|s| s.to_string());
    let checks: Vec<(&str, Json, Option<String>)> = vec![
        ("c_bool", live["c_bool"].clone(), Some("true".into())),
        (
            "c_int2",
            json!(live["c_int2"].as_i64()),
            q("c_int2".into())
                .await
                .map(|v| json!(v.parse::<i64>().unwrap()))
                .map(|j| j.to_string()),
        ),
        (
            "c_int8",
            json!(live["c_int8"].to_string()),
            q("c_int8".into()).await,
        ),
        (
            "c_numeric",
            json!(s(&live["c_numeric"])),
            q("c_numeric".into()).await,
        ),
        (
            "c_numeric_free",
            json!(s(&live["c_numeric_free"])),
            q("c_numeric_free".into()).await,
        ),
        (
            "c_text",
            json!(s(&live["c_text"])),
            q("c_text".into()).await,
        ),
        // char(n) keeps its padding (a cast to text would strip it).
        ("c_char", json!(s(&live["c_char"])), Some("ab  ".into())),
        (
            "c_bytea",
            json!(s(&live["c_bytea"])),
            q("encode(c_bytea, 'hex')".into()).await,
        ),
        (
            "c_jsonb",
            json!(s(&live["c_jsonb"])),
            q("c_jsonb".into()).await,
        ),
        (
            "c_uuid",
            json!(s(&live["c_uuid"])),
            q("c_uuid".into()).await,
        ),
        (
            "c_date",
            json!(live["c_date"].as_i64().unwrap().to_string()),
            q("c_date - '1970-01-01'::date".into()).await,
        ),
        (
            "c_time",
            json!(live["c_time"].as_i64().unwrap().to_string()),
            q("(extract(epoch from c_time) * 1000000)::int8".into()).await,
        ),
        (
            "c_ts",
            json!(live["c_ts"].as_i64().unwrap().to_string()),
            q("(extract(epoch from c_ts) * 1000000)::int8".into()).await,
        ),
        (
            "c_ts3",
            json!(live["c_ts3"].as_i64().unwrap().to_string()),
            q("(extract(epoch from c_ts3) * 1000)::int8".into()).await,
        ),
        (
            "c_inet",
            json!(s(&live["c_inet"])),
            q("c_inet".into()).await,
        ),
        (
            "c_mood",
            json!(s(&live["c_mood"])),
            q("c_mood".into()).await,
        ),
        ("c_null", live["c_null"].clone(), None),
    ];
    let mut failures = Vec::new();
    for (name, got, want) in checks {
        let want_j = match &want {
            Some(w) if name == "c_bool" => json!(w == "true"),
            Some(w) if name == "c_int2" => serde_json::from_str(w).unwrap(),
            Some(w) => json!(w),
            None => Json::Null,
        };
        if got != want_j {
            failures.push(format!("{name}: log {got}, table {want_j}"));
        }
    }
    // serde_json parses floats approximately; the encoder's text is exact.
    let f = live["c_float8"].as_f64().unwrap();
    assert!(((f - -2.25e-300) / 2.25e-300).abs() < 1e-12, "c_float8 {f}");
    assert_eq!(live["c_float4"].as_f64(), Some(1.5));
    // Timestamps with zone: ISO-8601 text in UTC.
    let tstz = s(&live["c_tstz"]).unwrap();
    assert!(tstz.starts_with("2024-06-01T10:00:00"), "c_tstz {tstz}");
    assert_eq!(live["c_int_arr"], json!([1, null, 3]));
    assert_eq!(live["c_text_arr"], json!(["a b", "c,d", null]));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
