//! Valid values the record format cannot carry, end to end through `cdc run` (see
//! schemas/FORMATS.md, "Values the record format cannot carry"): with default settings the
//! connector keeps running, the record holds Debezium's stand-in and a
//! `cdc.unrepresentable.<image>.<column>` header holds the database's text, each is counted
//! on `/metrics` and warned about once (without the value); with
//! `format.unrepresentable_handling_mode = "fail"` the connector stops instead. And
//! `source.toast = "reselect"` fills unchanged TOASTed values of every type.

mod pg_source_util;

use std::time::Duration;

use cdc_harness::PgServer;
use pg_source_util::*;
use serde_json::{json, Value as Json};

/// `special`: numeric NaN/±Infinity (also NOT NULL, and NaN at a fixed scale, which
/// cannot hold infinities), timestamps after
/// 294247 AD; no arrays, so the snapshot reads it with binary COPY. `arr`: a 2-D value in
/// an int4[] column (text COPY). `toast`: values stored out of line, so an update of `n`
/// leaves them out of the new tuple (unchanged TOAST).
const SCHEMA: &str = "SET ROLE cdc;
    CREATE TABLE special (id int PRIMARY KEY, n numeric, nn numeric NOT NULL, n2 numeric(10,2),
                          ts timestamp, tstz timestamptz);
    ALTER TABLE special REPLICA IDENTITY FULL;
    CREATE TABLE arr (id int PRIMARY KEY, m int4[]);
    CREATE TABLE toast (id int PRIMARY KEY, n int, big_arr int4[], big_num numeric);
    ALTER TABLE toast ALTER COLUMN big_arr SET STORAGE EXTERNAL,
                      ALTER COLUMN big_num SET STORAGE EXTERNAL;
    INSERT INTO special VALUES (1, 'NaN', 'Infinity', 'NaN',
                                '294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.5+00');
    INSERT INTO arr VALUES (1, '{{1,2},{3,4}}');
    INSERT INTO toast SELECT 1, 0, (SELECT array_agg(g) FROM generate_series(1, 2000) g),
        (SELECT string_agg((g % 10)::text, '') FROM generate_series(1, 6000) g)::numeric;";

const STREAMED: &str = "
    INSERT INTO special VALUES (2, '-Infinity', 'NaN', 12.5, '2024-01-01 00:00:00', '294276-01-01 00:00:00+00');
    UPDATE special SET n = 1 WHERE id = 1;
    INSERT INTO arr VALUES (2, '{{5},{NULL}}'), (3, '{7}');
    UPDATE toast SET n = 1 WHERE id = 1;";

fn after(recs: &[Rec], op: &str, id: i64) -> (Json, Vec<(String, String)>) {
    let r = recs
        .iter()
        .find(|r| {
            r.value.as_ref().is_some_and(|v| {
                let p = payload(v);
                p["op"] == op && p["after"]["id"] == id
            })
        })
        .unwrap_or_else(|| panic!("no {op} record of id {id} among {} records", recs.len()));
    (r.value.clone().unwrap(), r.headers.clone())
}

/// The log without its terminal colour codes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn h(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

/// The payload of a record value (with schemas: its `payload`).
fn payload(v: &Json) -> &Json {
    v.get("payload").unwrap_or(v)
}

async fn hidden_values_travel_in_headers(format: &str) {
    let pg = PgServer::shared();
    let db = database_with(pg, SCHEMA).await;
    let extra = if format == "json" {
        String::new() // the defaults
    } else {
        format!("[format]\nvalue = \"{format}\"\n")
    };
    let (_dir, mut c) = temp_connector(
        pg,
        &db,
        &["public.special", "public.arr", "public.toast"],
        &extra,
    );
    let admin = c.fixed_admin_port();
    c.start();
    c.wait_records("t.public.special", 1, Duration::from_secs(60))
        .await;
    c.wait_records("t.public.toast", 1, Duration::from_secs(30))
        .await;
    pg.execute(&db, STREAMED).await.unwrap();
    c.wait_records("t.public.special", 3, Duration::from_secs(30))
        .await;
    c.wait_records("t.public.arr", 3, Duration::from_secs(30))
        .await;
    c.wait_records("t.public.toast", 2, Duration::from_secs(30))
        .await;
    c.assert_running();
    let (_, metrics) = http(&admin, "GET", "/metrics", None, "");
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
    let log = strip_ansi(&std::fs::read_to_string(c.dir.join("connector.log")).unwrap());

    // numeric NaN/±Infinity (snapshot, binary COPY): null as Debezium, the NOT NULL one
    // the type's zero; the timestamps beyond the model's range null; texts in headers.
    let special = read_topic(&c.log_dir(), "t.public.special");
    let (v, hs) = after(&special, "r", 1);
    let a = &payload(&v)["after"];
    assert_eq!(a["n"], Json::Null);
    assert_eq!(a["nn"], json!({"scale": 0, "value": "AA=="}));
    assert_eq!(a["n2"], Json::Null);
    assert_eq!(a["ts"], Json::Null);
    // A ZonedTimestamp string holds any year: exact, as Debezium, no header.
    assert_eq!(a["tstz"], "+294276-12-31T23:59:59.500000Z");
    assert_eq!(
        hs,
        vec![
            h("cdc.unrepresentable.after.n", "NaN"),
            h("cdc.unrepresentable.after.nn", "Infinity"),
            h("cdc.unrepresentable.after.n2", "NaN"),
            h(
                "cdc.unrepresentable.after.ts",
                "294276-12-31 23:59:59.999999"
            ),
        ],
        "{format}"
    );
    // Streamed (pgoutput text).
    let (v, hs) = after(&special, "c", 2);
    assert_eq!(
        payload(&v)["after"]["n2"],
        "BOI=",
        "12.50 as a Connect Decimal"
    );
    assert_eq!(payload(&v)["after"]["ts"], json!(1_704_067_200_000_000i64));
    assert_eq!(
        payload(&v)["after"]["tstz"],
        "+294276-01-01T00:00:00.000000Z"
    );
    assert_eq!(
        hs,
        vec![
            h("cdc.unrepresentable.after.n", "-Infinity"),
            h("cdc.unrepresentable.after.nn", "NaN"),
        ],
        "{format}"
    );
    // REPLICA IDENTITY FULL: the old row's values are in `before` headers.
    let (v, hs) = after(&special, "u", 1);
    assert_eq!(
        payload(&v)["after"]["n"],
        json!({"scale": 0, "value": "AQ=="})
    );
    assert_eq!(payload(&v)["before"]["n"], Json::Null);
    let keys: Vec<&str> = hs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "cdc.unrepresentable.before.n",
            "cdc.unrepresentable.before.nn",
            "cdc.unrepresentable.before.n2",
            "cdc.unrepresentable.before.ts",
            "cdc.unrepresentable.after.nn",
            "cdc.unrepresentable.after.n2",
            "cdc.unrepresentable.after.ts",
        ]
    );

    // Multi-dimensional arrays: schemaless JSON keeps the nesting; a schema with one
    // level gets Debezium's one null per sub-array and the text in a header.
    let arr = read_topic(&c.log_dir(), "t.public.arr");
    let (v1, h1) = after(&arr, "r", 1);
    let (v2, h2) = after(&arr, "c", 2);
    let (v3, h3) = after(&arr, "c", 3);
    assert_eq!(payload(&v3)["after"]["m"], json!([7]));
    assert!(h3.is_empty());
    if format == "json" {
        assert_eq!(payload(&v1)["after"]["m"], json!([[1, 2], [3, 4]]));
        assert_eq!(payload(&v2)["after"]["m"], json!([[5], [null]]));
        assert!(h1.is_empty() && h2.is_empty());
    } else {
        assert_eq!(payload(&v1)["after"]["m"], json!([null, null]));
        assert_eq!(h1, vec![h("cdc.unrepresentable.after.m", "{{1,2},{3,4}}")]);
        assert_eq!(h2, vec![h("cdc.unrepresentable.after.m", "{{5},{NULL}}")]);
    }

    // Unchanged TOAST: int4[] as Debezium's int-array placeholder, numeric null.
    let toast = read_topic(&c.log_dir(), "t.public.toast");
    let (v, hs) = after(&toast, "u", 1);
    let a = &payload(&v)["after"];
    assert_eq!(a["n"], 1);
    let placeholder: Vec<Json> = b"__debezium_unavailable_value"
        .iter()
        .map(|b| json!(b))
        .collect();
    assert_eq!(a["big_arr"], Json::Array(placeholder));
    assert_eq!(a["big_num"], Json::Null);
    assert_eq!(
        hs,
        vec![
            h("cdc.unrepresentable.after.big_arr", "unavailable"),
            h("cdc.unrepresentable.after.big_num", "unavailable"),
        ]
    );

    // Counted with their labels, warned about once per table and column, no values
    // logged.
    for (table, column, reason, n) in [
        ("public.special", "n", "numeric_nan_infinity", 3),
        // The snapshot's row, and the update's before and after.
        ("public.special", "ts", "out_of_range", 3),
        ("public.toast", "big_num", "unchanged_toast", 1),
    ] {
        let line = format!(
            "cdc_unrepresentable_values_total{{table=\"{table}\",column=\"{column}\",reason=\"{reason}\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("a value the record format cannot carry"))
        .collect();
    let on_n: Vec<&&str> = warnings
        .iter()
        .filter(|l| l.contains("public.special") && l.contains("\"column\":\"n\""))
        .collect();
    assert_eq!(
        on_n.len(),
        1,
        "warned once per table and column: {warnings:#?}"
    );
    assert!(
        !log.contains("294276") && !log.contains("{{1,2}"),
        "row values must not be logged:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hidden_values_travel_in_headers_schemaless_json() {
    hidden_values_travel_in_headers("json").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hidden_values_travel_in_headers_json_with_schemas() {
    hidden_values_travel_in_headers("json-schemas").await;
}

/// `format.unrepresentable_handling_mode = "fail"`: today's behaviour for those who prefer
/// to stop: a definite error naming the table, the column and the setting; nothing of the
/// change is appended.
#[tokio::test(flavor = "multi_thread")]
async fn fail_mode_stops_with_a_definite_error() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE special (id int PRIMARY KEY, n numeric);
         INSERT INTO special VALUES (1, 1.5);",
    )
    .await;
    let (_dir, mut c) = temp_connector(
        pg,
        &db,
        &["public.special"],
        "[format]\nunrepresentable_handling_mode = \"fail\"\n",
    );
    c.start();
    c.wait_records("t.public.special", 1, Duration::from_secs(60))
        .await;
    pg.execute(&db, "INSERT INTO special VALUES (2, 'NaN')")
        .await
        .unwrap();
    let out = c
        .wait_definite_error(Duration::from_secs(60), "fail mode must stop on NaN")
        .await;
    assert_mentions(
        &out,
        &[
            "public.special",
            "\"n\"",
            "NaN",
            "unrepresentable_handling_mode",
        ],
    );
    let recs = read_topic(&c.log_dir(), "t.public.special");
    assert_eq!(recs.len(), 1, "nothing of the NaN row: {recs:?}");
    drop_slot(pg, &db).await;
}

/// `source.toast = "reselect"` for non-text types: int4[], numeric, jsonb, bytea, and
/// arrays of timestamptz and interval (whose text depends on the session's settings).
#[tokio::test(flavor = "multi_thread")]
async fn reselect_fills_unchanged_toast_of_every_type() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc;
         CREATE TABLE doc (id int PRIMARY KEY, n int, a int4[], num numeric, j jsonb, b bytea,
                           tsa timestamptz[], iva interval[]);
         ALTER TABLE doc ALTER COLUMN a SET STORAGE EXTERNAL, ALTER COLUMN num SET STORAGE EXTERNAL,
             ALTER COLUMN j SET STORAGE EXTERNAL, ALTER COLUMN b SET STORAGE EXTERNAL,
             ALTER COLUMN tsa SET STORAGE EXTERNAL, ALTER COLUMN iva SET STORAGE EXTERNAL;
         INSERT INTO doc SELECT 1, 0,
             (SELECT array_agg(g) FROM generate_series(1, 2000) g),
             (SELECT string_agg((g % 10)::text, '') FROM generate_series(1, 6000) g)::numeric / 1000,
             (SELECT jsonb_agg(g) FROM generate_series(1, 2000) g),
             (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g)::bytea,
             (SELECT array_agg('2024-01-01 00:00:00+05'::timestamptz + g * interval '1 min') FROM generate_series(1, 400) g),
             (SELECT array_agg(g * interval '1 day 2 hours') FROM generate_series(1, 400) g);",
    )
    .await;
    let (_dir, mut c) = temp_connector(pg, &db, &["public.doc"], "");
    c.edit_config(|text| {
        text.replace(
            "heartbeat_interval_ms = 1000\n",
            "heartbeat_interval_ms = 1000\ntoast = \"reselect\"\n",
        )
    });
    c.start();
    let topic = "t.public.doc";
    c.wait_records(topic, 1, Duration::from_secs(60)).await;
    pg.execute(&db, "UPDATE doc SET n = 1 WHERE id = 1")
        .await
        .unwrap();
    c.wait_records(topic, 2, Duration::from_secs(30)).await;
    c.assert_running();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
    let recs = read_topic(&c.log_dir(), topic);
    let (snap, _) = after(&recs, "r", 1);
    let (upd, hs) = after(&recs, "u", 1);
    assert!(hs.is_empty(), "nothing hidden: {hs:?}");
    for col in ["a", "num", "j", "b", "tsa", "iva"] {
        assert!(snap["after"][col].to_string().len() > 1000, "{col} is big");
        assert_eq!(
            upd["after"][col], snap["after"][col],
            "{col}: the re-selected value equals the snapshot's"
        );
        assert!(
            !upd["after"][col].to_string().contains("unavailable"),
            "{col}"
        );
    }
    assert_eq!(upd["after"]["n"], 1);
}
