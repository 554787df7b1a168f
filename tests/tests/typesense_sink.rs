//! The Typesense sink driven directly with constructed changes against a real Typesense
//! 0.24.1 (`tests/fetch-typesense.sh`): upserts and deletes, a replay, a truncate and a
//! replay across it (also by a new sink that only knows what Typesense recorded), a
//! document Typesense refuses, a new column reaching the collection's schema, the
//! schema file, and an unreachable server being a transient failure.
//!
//! Skips (with the reason) when the Typesense binary cannot be fetched.

use std::sync::OnceLock;

use cdc_harness::{search_http, TypesenseServer};
use cdc_schemas::metrics::Metrics;
use cdc_sinks::typesense::TypesenseSink;
use cdc_sinks::{Change, Op, Sink, SinkSpec};
use serde_json::{json, Map, Value};

fn server() -> Option<&'static TypesenseServer> {
    static S: OnceLock<Option<TypesenseServer>> = OnceLock::new();
    S.get_or_init(|| {
        if let Err(e) = cdc_harness::typesense_bin() {
            eprintln!("SKIP: no Typesense binary: {e:#}");
            return None;
        }
        Some(TypesenseServer::start().expect("starting Typesense"))
    })
    .as_ref()
}

fn spec(ts: &TypesenseServer, extra: &str) -> SinkSpec {
    let text = format!(
        "name = \"search\"\ntype = \"typesense\"\nurl = \"{}\"\napi_key = \"{}\"\n{extra}",
        ts.url(),
        ts.api_key()
    );
    SinkSpec::from_table(&text.parse().unwrap(), "app", 0).expect("a valid sink section")
}

fn sink(ts: &TypesenseServer, extra: &str) -> TypesenseSink {
    TypesenseSink::connect(&spec(ts, extra), &Metrics::default()).unwrap()
}

fn change(table: &str, offset: u64, op: Op, id: i64, after: Option<Value>) -> Change {
    let key: Map<String, Value> = json!({ "id": id }).as_object().unwrap().clone();
    Change {
        topic: format!("app.public.{table}").into(),
        partition: 0,
        offset,
        timestamp_ms: 0,
        op,
        schema: "public".into(),
        table: table.into(),
        key: if op == Op::Truncate { Map::new() } else { key },
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

fn get(ts: &TypesenseServer, path: &str) -> (u16, String) {
    search_http(
        ts.port(),
        "GET",
        path,
        &[("X-TYPESENSE-API-KEY", ts.api_key())],
        None,
    )
    .unwrap()
}

/// The collection's documents by id.
fn docs(ts: &TypesenseServer, collection: &str) -> Map<String, Value> {
    let (status, body) = get(ts, &format!("/collections/{collection}/documents/export"));
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["id"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

fn schema(ts: &TypesenseServer, collection: &str) -> Value {
    let (status, body) = get(ts, &format!("/collections/{collection}"));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn field_type(schema: &Value, name: &str) -> Option<String> {
    schema["fields"]
        .as_array()?
        .iter()
        .find(|f| f["name"] == name)
        .map(|f| f["type"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn upserts_deletes_replays_and_a_new_column() {
    let Some(ts) = server() else { return };
    let t = "items";
    let mut s = sink(ts, "");
    let batch = vec![
        upsert(
            t,
            0,
            1,
            json!({"id": 1, "name": "a", "price": 1.5, "ok": true, "at": 1_700_000_000_000i64}),
        ),
        upsert(
            t,
            1,
            2,
            json!({"id": 2, "name": "b", "price": 2.0, "ok": false, "at": null}),
        ),
        upsert(
            t,
            2,
            1,
            json!({"id": 1, "name": "a2", "price": 1.75, "ok": true, "at": 5}),
        ),
        change(t, 3, Op::Delete, 2, None),
        upsert(
            t,
            4,
            3,
            json!({"id": 3, "name": "c", "price": 3, "ok": true, "at": 6}),
        ),
    ];
    let d = s.deliver(&batch).await.unwrap();
    assert_eq!((d.upto, d.rejected.len()), (5, 0));
    let got = docs(ts, t);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got["1"],
        json!({"id": "1", "name": "a2", "price": 1.75, "ok": true, "at": 5})
    );
    assert_eq!(got["3"]["name"], "c");
    let sc = schema(ts, t);
    assert_eq!(field_type(&sc, "name").as_deref(), Some("string"));
    assert_eq!(field_type(&sc, "price").as_deref(), Some("float"));
    assert_eq!(field_type(&sc, "ok").as_deref(), Some("bool"));
    assert_eq!(field_type(&sc, "at").as_deref(), Some("int64"));

    // A replay (the driver re-delivers after a crash) ends in the same state, also one
    // split differently, with the batch size of one document per request.
    let mut again = sink(ts, "batch_documents = 1");
    let d = again.deliver(&batch).await.unwrap();
    assert_eq!(d.upto, 5);
    assert_eq!(docs(ts, t), got);

    // A new column reaches the collection's schema.
    let d = s
        .deliver(&[upsert(
            t,
            5,
            3,
            json!({"id": 3, "name": "c", "price": 3, "ok": true, "at": 6, "qty": 7}),
        )])
        .await
        .unwrap();
    assert_eq!(d.upto, 1);
    assert_eq!(field_type(&schema(ts, t), "qty").as_deref(), Some("int64"));
    assert_eq!(docs(ts, t)["3"]["qty"], 7);
}

#[tokio::test]
async fn a_refused_document_is_rejected_and_the_rest_goes_on() {
    let Some(ts) = server() else { return };
    let t = "refusals";
    let mut s = sink(ts, "");
    let d = s
        .deliver(&[upsert(t, 0, 1, json!({"id": 1, "n": 1}))])
        .await
        .unwrap();
    assert_eq!(d.upto, 1);
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
    assert!(d.rejected[0].1.contains("int64"), "{:?}", d.rejected);
    assert!(
        !d.rejected[0].1.contains("not a number"),
        "no row values in messages"
    );
    let got = docs(ts, t);
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), vec!["1", "3"]);
}

#[tokio::test]
async fn a_truncate_is_applied_once_and_replays_do_not_bring_rows_back() {
    let Some(ts) = server() else { return };
    let t = "truncated";
    let batch = vec![
        upsert(t, 0, 1, json!({"id": 1, "v": "a"})),
        upsert(t, 1, 2, json!({"id": 2, "v": "b"})),
        change(t, 2, Op::Truncate, 0, None),
        upsert(t, 3, 3, json!({"id": 3, "v": "c"})),
    ];
    let mut s = sink(ts, "");
    assert_eq!(s.deliver(&batch).await.unwrap().upto, 4);
    let only3 = docs(ts, t);
    assert_eq!(only3.keys().cloned().collect::<Vec<_>>(), vec!["3"]);
    // The marker is in Typesense.
    let (status, body) = get(ts, "/collections/_cdc_truncates/documents/export");
    assert_eq!(status, 200);
    assert!(
        body.contains(r#""place":"app.public.truncated/0""#) && body.contains(r#""version":3"#),
        "{body}"
    );

    // A replay by a new sink (a restart: it knows only what Typesense recorded) passes
    // over the changes before the truncate and the truncate itself (which would remove
    // row 3 again, in a window where readers see it gone).
    let mut restarted = sink(ts, "");
    assert_eq!(restarted.deliver(&batch[..2]).await.unwrap().upto, 2);
    assert_eq!(
        docs(ts, t),
        only3,
        "changes older than the truncate are passed over"
    );
    assert_eq!(restarted.deliver(&batch[2..]).await.unwrap().upto, 2);
    assert_eq!(docs(ts, t), only3);
    // A later truncate is applied.
    let d = restarted
        .deliver(&[change(t, 4, Op::Truncate, 0, None)])
        .await
        .unwrap();
    assert_eq!(d.upto, 1);
    assert!(docs(ts, t).is_empty());
}

#[tokio::test]
async fn the_schema_file_overrides_field_types() {
    let Some(ts) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("schema.json");
    std::fs::write(
        &f,
        r#"{"app_public_typed": {"fields": [{"name": "code", "type": "string", "facet": true, "optional": true}]}}"#,
    )
    .unwrap();
    let mut s = sink(
        ts,
        &format!(
            "collection = \"{{prefix}}_{{schema}}_{{table}}\"\nschema_file = \"{}\"",
            f.display()
        ),
    );
    let d = s
        .deliver(&[upsert(
            "typed",
            0,
            1,
            json!({"id": 1, "code": "X1", "n": 2}),
        )])
        .await
        .unwrap();
    assert_eq!(d.upto, 1);
    let sc = schema(ts, "app_public_typed");
    let code = sc["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "code")
        .unwrap()
        .clone();
    assert_eq!(
        (code["type"].as_str(), code["facet"].as_bool()),
        (Some("string"), Some(true))
    );
    assert_eq!(field_type(&sc, "n").as_deref(), Some("int64"));
}

#[tokio::test]
async fn an_unreachable_server_is_transient() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = format!(
        "name = \"s\"\ntype = \"typesense\"\nurl = \"http://127.0.0.1:{port}\"\napi_key = \"k\"\n"
    );
    let spec = SinkSpec::from_table(&text.parse().unwrap(), "app", 0).unwrap();
    let mut s = TypesenseSink::connect(&spec, &Metrics::default()).unwrap();
    let e = s
        .deliver(&[upsert("x", 0, 1, json!({"id": 1}))])
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
}

#[test]
fn keys_are_checked() {
    let check = |extra: &str| {
        let text = format!("name = \"s\"\ntype = \"typesense\"\n{extra}");
        SinkSpec::from_table(&text.parse().unwrap(), "app", 0).map(|_| ())
    };
    assert!(check("url = \"http://h:8108\"\napi_key = \"k\"").is_ok());
    let (k, m) = check("url = \"http://h:8108\"").unwrap_err();
    assert_eq!(k, "sink[0].api_key", "{m}");
    let (k, _) =
        check("url = \"http://h:8108\"\napi_key = \"k\"\ncollection = \"{key}\"").unwrap_err();
    assert_eq!(k, "sink[0].collection");
    let (k, _) =
        check("url = \"http://h:8108\"\napi_key = \"k\"\nbatch_documents = 0").unwrap_err();
    assert_eq!(k, "sink[0].batch_documents");
    let (k, m) = check("url = \"http://h:8108\"\napi_key = \"k\"\nindex = \"x\"").unwrap_err();
    assert!(
        k == "sink[0].index" && m.contains("unknown key"),
        "{k}: {m}"
    );
    let (k, _) = check("url = \"http://h:8108\"\napi_key_file = \"/nonexistent/key\"").unwrap_err();
    assert_eq!(k, "sink[0].api_key_file");
    // The API key is a secret: never in the settings' debug output.
    let spec = SinkSpec::from_table(
        &"name = \"s\"\ntype = \"typesense\"\nurl = \"http://h\"\napi_key = \"hunter2\""
            .parse()
            .unwrap(),
        "app",
        0,
    )
    .unwrap();
    let resolved = cdc_sinks::typesense::config::Settings::resolve(&spec).unwrap();
    assert!(!format!("{resolved:?}").contains("hunter2"));
}
