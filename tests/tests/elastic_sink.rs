//! The Elasticsearch sink driven directly with constructed changes against the noida-db
//! emulator's Elasticsearch API (`tests/fetch-noida.sh`; no real Elasticsearch is
//! installable here; the exact `_bulk` bodies are checked against Elasticsearch's
//! documented format in the sink's unit tests): upserts and deletes, older versions
//! never overwriting newer ones, a truncate and a replay across it, a mapping error
//! rejected, a new column reaching the mapping, the mapping file, and an unreachable
//! cluster being a transient failure.
//!
//! Skips (with the reason) when the emulator cannot be fetched.

use std::sync::OnceLock;

use cdc_harness::{search_http, NoidaElasticsearch};
use cdc_schemas::metrics::Metrics;
use cdc_sinks::elasticsearch::ElasticsearchSink;
use cdc_sinks::{Change, Op, Sink, SinkSpec};
use serde_json::{json, Map, Value};

fn server() -> Option<&'static NoidaElasticsearch> {
    static S: OnceLock<Option<NoidaElasticsearch>> = OnceLock::new();
    S.get_or_init(|| {
        if let Err(e) = cdc_harness::noida_bin() {
            eprintln!("SKIP: no noida-db binary: {e:#}");
            return None;
        }
        Some(NoidaElasticsearch::start().expect("starting noida-db"))
    })
    .as_ref()
}

fn sink(es: &NoidaElasticsearch, extra: &str) -> ElasticsearchSink {
    let text = format!(
        "name = \"search\"\ntype = \"opensearch\"\nurl = \"{}\"\n{extra}",
        es.url()
    );
    let spec = SinkSpec::from_table(&text.parse().unwrap(), "app", 0).expect("a valid section");
    ElasticsearchSink::connect(&spec, &Metrics::default()).unwrap()
}

fn change(table: &str, offset: u64, op: Op, id: i64, after: Option<Value>) -> Change {
    Change {
        topic: format!("app.public.{table}").into(),
        partition: 0,
        offset,
        timestamp_ms: 0,
        op,
        schema: "public".into(),
        table: table.into(),
        key: if op == Op::Truncate {
            Map::new()
        } else {
            json!({ "id": id }).as_object().unwrap().clone()
        },
        after: after.map(|a| a.as_object().unwrap().clone()),
        source_ts_ms: None,
        tx: None,
        after_json: None,
        truncate_copies: 0,
        tx_end: None,
    }
}

fn upsert(table: &str, offset: u64, id: i64, after: Value) -> Change {
    change(table, offset, Op::Update, id, Some(after))
}

fn req(es: &NoidaElasticsearch, method: &str, path: &str, body: Option<&str>) -> Value {
    let (status, body) = search_http(es.port(), method, path, &[], body).unwrap();
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {body}"
    );
    serde_json::from_str(&body).unwrap()
}

/// The index's documents by `_id`: (version, source).
fn docs(es: &NoidaElasticsearch, index: &str) -> Map<String, Value> {
    req(es, "POST", &format!("/{index}/_refresh"), None);
    let r = req(
        es,
        "POST",
        &format!("/{index}/_search"),
        Some(r#"{"query":{"match_all":{}},"size":1000,"version":true}"#),
    );
    r["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["_id"].as_str().unwrap().to_string(),
                json!([h["_version"], h["_source"]]),
            )
        })
        .collect()
}

fn mapping(es: &NoidaElasticsearch, index: &str) -> Value {
    let m = req(es, "GET", &format!("/{index}/_mapping"), None);
    m[index]["mappings"].clone()
}

#[tokio::test]
async fn versions_decide_and_a_new_column_reaches_the_mapping() {
    let Some(es) = server() else { return };
    let t = "items";
    let mut s = sink(es, "");
    let batch = vec![
        upsert(
            t,
            0,
            1,
            json!({"id": 1, "name": "a", "price": 1.5, "ok": true}),
        ),
        upsert(
            t,
            1,
            2,
            json!({"id": 2, "name": "b", "price": 2.5, "ok": false}),
        ),
        upsert(
            t,
            2,
            1,
            json!({"id": 1, "name": "a2", "price": 1.75, "ok": true}),
        ),
        change(t, 3, Op::Delete, 2, None),
    ];
    let d = s.deliver(&batch).await.unwrap();
    assert_eq!((d.upto, d.rejected.len()), (4, 0), "{:?}", d.rejected);
    let got = docs(es, t);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got["1"],
        json!([3, {"id": 1, "name": "a2", "price": 1.75, "ok": true}])
    );
    let m = mapping(es, t);
    assert_eq!(m["properties"]["id"]["type"], "long");
    assert_eq!(m["properties"]["price"]["type"], "double");
    assert_eq!(m["properties"]["ok"]["type"], "boolean");
    assert_eq!(m["properties"]["name"]["type"], "text");

    // An older version never overwrites a newer one: replaying the first change (a
    // restarted sink, from an older committed offset) is a 409, which counts as done.
    let mut replay = sink(es, "batch_documents = 1");
    let d = replay.deliver(&batch[..1]).await.unwrap();
    assert_eq!((d.upto, d.rejected.len()), (1, 0));
    assert_eq!(docs(es, t)["1"][1]["name"], "a2");

    // A new column reaches the mapping.
    let d = s
        .deliver(&[upsert(
            t,
            4,
            1,
            json!({"id": 1, "name": "a3", "price": 1.0, "ok": true, "qty": 4}),
        )])
        .await
        .unwrap();
    assert_eq!(d.upto, 1);
    assert_eq!(mapping(es, t)["properties"]["qty"]["type"], "long");
    assert_eq!(
        docs(es, t)["1"],
        json!([5, {"id": 1, "name": "a3", "price": 1.0, "ok": true, "qty": 4}])
    );
}

#[tokio::test]
async fn a_mapping_error_is_rejected_and_the_rest_goes_on() {
    let Some(es) = server() else { return };
    let t = "refusals";
    let mut s = sink(es, "");
    assert_eq!(
        s.deliver(&[upsert(t, 0, 1, json!({"id": 1, "n": 1}))])
            .await
            .unwrap()
            .upto,
        1
    );
    let d = s
        .deliver(&[
            upsert(t, 1, 2, json!({"id": 2, "n": "not a number"})),
            upsert(t, 2, 3, json!({"id": 3, "n": 3})),
        ])
        .await
        .unwrap();
    assert_eq!(d.upto, 2);
    assert_eq!(d.rejected.len(), 1, "{:?}", d.rejected);
    assert_eq!(d.rejected[0].0, 0);
    assert!(d.rejected[0].1.contains("[n]"), "{:?}", d.rejected);
    assert!(
        !d.rejected[0].1.contains("not a number"),
        "no row values in messages"
    );
    let mut ids: Vec<String> = docs(es, t).keys().cloned().collect();
    ids.sort();
    assert_eq!(ids, vec!["1", "3"]);
}

#[tokio::test]
async fn a_truncate_is_recorded_and_replays_do_not_bring_rows_back() {
    let Some(es) = server() else { return };
    let t = "truncated";
    let batch = vec![
        upsert(t, 0, 1, json!({"id": 1, "v": "a"})),
        upsert(t, 1, 2, json!({"id": 2, "v": "b"})),
        change(t, 2, Op::Truncate, 0, None),
        upsert(t, 3, 3, json!({"id": 3, "v": "c"})),
    ];
    let mut s = sink(es, "");
    assert_eq!(s.deliver(&batch).await.unwrap().upto, 4);
    let only3 = docs(es, t);
    assert_eq!(only3.keys().cloned().collect::<Vec<_>>(), vec!["3"]);
    assert_eq!(
        mapping(es, t)["_meta"]["cdc_truncates"],
        json!({"app.public.truncated/0": 3})
    );
    // A restarted sink replaying from before the truncate: the older changes are passed
    // over (row 1 and 2 do not come back), and so is the truncate itself.
    let mut restarted = sink(es, "");
    assert_eq!(restarted.deliver(&batch).await.unwrap().upto, 4);
    assert_eq!(docs(es, t), only3);
}

/// A truncate of a 3-partition topic is in every partition: the first copy the sink meets
/// clears the index, each other partition's changes before its own copy are passed over
/// (they are older than the truncate), and a restarted sink replaying everything ends
/// with the same documents.
#[tokio::test]
async fn the_copies_of_a_truncate_in_every_partition_clear_once() {
    let Some(es) = server() else { return };
    let t = "truncated3";
    let at = |p: u32, mut c: Change| {
        c.partition = p;
        if c.op == Op::Truncate {
            c.truncate_copies = 3;
        }
        c
    };
    // Partition order as a reader may meet it: partition 1 (rows 1, 4, then its copy,
    // then row 7 written after the truncate), partition 2 (row 2 before its copy, row 8
    // after), partition 0 (row 3 before, its copy, row 9 after).
    let batch = vec![
        at(1, upsert(t, 0, 1, json!({"id": 1, "v": "a"}))),
        at(1, upsert(t, 1, 4, json!({"id": 4, "v": "d"}))),
        at(1, change(t, 2, Op::Truncate, 0, None)),
        at(1, upsert(t, 3, 7, json!({"id": 7, "v": "g"}))),
        at(2, upsert(t, 0, 2, json!({"id": 2, "v": "b"}))),
        at(2, change(t, 1, Op::Truncate, 0, None)),
        at(2, upsert(t, 2, 8, json!({"id": 8, "v": "h"}))),
        at(0, upsert(t, 0, 3, json!({"id": 3, "v": "c"}))),
        at(0, change(t, 1, Op::Truncate, 0, None)),
        at(0, upsert(t, 2, 9, json!({"id": 9, "v": "i"}))),
    ];
    let mut s = sink(es, "");
    assert_eq!(s.deliver(&batch).await.unwrap().upto, batch.len());
    let after = docs(es, t);
    assert_eq!(
        after.keys().cloned().collect::<Vec<_>>(),
        vec!["7", "8", "9"],
        "only the rows written after the truncate"
    );
    let mut restarted = sink(es, "");
    assert_eq!(restarted.deliver(&batch).await.unwrap().upto, batch.len());
    assert_eq!(docs(es, t), after);
}

#[tokio::test]
async fn the_mapping_file_and_the_index_template() {
    let Some(es) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mapping.json");
    std::fs::write(
        &f,
        r#"{"app-public-typed": {"settings": {"number_of_shards": 1}, "mappings": {"properties": {"code": {"type": "keyword"}}}}}"#,
    )
    .unwrap();
    let mut s = sink(
        es,
        &format!(
            "index = \"{{prefix}}-{{schema}}-{{table}}\"\nmapping_file = \"{}\"",
            f.display()
        ),
    );
    let d = s
        .deliver(&[upsert(
            "Typed",
            0,
            1,
            json!({"id": 1, "code": "X1", "n": 2}),
        )])
        .await
        .unwrap();
    assert_eq!(d.upto, 1);
    // Index names are lowercase.
    let m = mapping(es, "app-public-typed");
    assert_eq!(m["properties"]["code"]["type"], "keyword");
    assert_eq!(m["properties"]["n"]["type"], "long");
}

#[tokio::test]
async fn an_unreachable_cluster_is_transient() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text =
        format!("name = \"s\"\ntype = \"elasticsearch\"\nurl = \"http://127.0.0.1:{port}\"\n");
    let spec = SinkSpec::from_table(&text.parse().unwrap(), "app", 0).unwrap();
    let mut s = ElasticsearchSink::connect(&spec, &Metrics::default()).unwrap();
    let e = s
        .deliver(&[upsert("x", 0, 1, json!({"id": 1}))])
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
}

#[test]
fn keys_are_checked() {
    let check = |extra: &str| {
        let text =
            format!("name = \"s\"\ntype = \"elasticsearch\"\nurl = \"http://h:9200\"\n{extra}");
        SinkSpec::from_table(&text.parse().unwrap(), "app", 0).map(|_| ())
    };
    assert!(check("username = \"u\"\npassword = \"p\"").is_ok());
    let (k, _) = check("password = \"p\"").unwrap_err();
    assert_eq!(k, "sink[0].username");
    let (k, _) = check("index = \"{key}\"").unwrap_err();
    assert_eq!(k, "sink[0].index");
    let (k, _) = check("mapping_file = \"/nonexistent.json\"").unwrap_err();
    assert_eq!(k, "sink[0].mapping_file");
    let (k, m) = check("api_key = \"x\"").unwrap_err();
    assert!(
        k == "sink[0].api_key" && m.contains("unknown key"),
        "{k}: {m}"
    );
    let spec = SinkSpec::from_table(
        &"name = \"s\"\ntype = \"elasticsearch\"\nurl = \"http://h\"\nusername = \"u\"\npassword = \"hunter2\""
            .parse()
            .unwrap(),
        "app",
        0,
    )
    .unwrap();
    let resolved = cdc_sinks::elasticsearch::config::Settings::resolve(&spec).unwrap();
    assert!(!format!("{resolved:?}").contains("hunter2"));
}
