//! The Typesense sink end to end through the shipped CLI: Postgres → `cdc run` (source
//! and its `[[sink]]` in one process) → the embedded log → Typesense. After a snapshot,
//! inserts, updates, deletes, a truncate and an `ADD COLUMN`, the collection read back
//! through Typesense's API equals the table; the sink's keys (`api_key_file`,
//! `collection`, `schema_file`, `batch_documents`) are the ones in effect.
//!
//! Skips (with the reason) when the Typesense binary cannot be fetched.

mod pg_source_util;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cdc_harness::{search_http, PgServer, TypesenseServer};
use pg_source_util::*;
use serde_json::{json, Value as Json};

/// Numbers compared as numbers (Typesense returns a float field's 2 as 2.0), `id` as the
/// key text.
fn normalized(mut row: Json) -> Json {
    if let Some(o) = row.as_object_mut() {
        if let Some(id) = o.get("id").cloned() {
            o.insert(
                "id".into(),
                Json::String(id.to_string().trim_matches('"').to_string()),
            );
        }
        for v in o.values_mut() {
            if let Some(f) = v.as_f64() {
                *v = json!(f);
            }
        }
        o.retain(|_, v| !v.is_null());
    }
    row
}

/// The collection's documents, by id.
fn collection_docs(ts: &TypesenseServer, collection: &str) -> BTreeMap<String, Json> {
    let (status, body) = search_http(
        ts.port(),
        "GET",
        &format!("/collections/{collection}/documents/export"),
        &[("X-TYPESENSE-API-KEY", ts.api_key())],
        None,
    )
    .unwrap();
    if status == 404 {
        return BTreeMap::new();
    }
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Json = serde_json::from_str(l).unwrap();
            (v["id"].as_str().unwrap().to_string(), normalized(v))
        })
        .collect()
}

async fn table(pg: &PgServer, db: &str) -> BTreeMap<String, Json> {
    table_rows(pg, db, "items")
        .await
        .into_values()
        .map(|r| {
            let r = normalized(r);
            (r["id"].as_str().unwrap().to_string(), r)
        })
        .collect()
}

async fn wait_equal(pg: &PgServer, db: &str, ts: &TypesenseServer, c: &mut Connector, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        c.assert_running();
        let want = table(pg, db).await;
        let got = collection_docs(ts, "public_items");
        if got == want {
            return;
        }
        if Instant::now() > deadline {
            let all = std::fs::read_to_string(c.dir.join("connector.log")).unwrap_or_default();
            let sink_lines: Vec<&str> = all.lines().filter(|l| l.contains("sink")).collect();
            panic!(
                "{what}: the collection does not equal the table\n table: {want:?}\n collection: {got:?}\n{}\nsink lines:\n{}",
                c.output(),
                sink_lines.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn collection_schema(ts: &TypesenseServer) -> Json {
    let (status, body) = search_http(
        ts.port(),
        "GET",
        "/collections/public_items",
        &[("X-TYPESENSE-API-KEY", ts.api_key())],
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn field<'a>(schema: &'a Json, name: &str) -> Option<&'a Json> {
    schema["fields"]
        .as_array()?
        .iter()
        .find(|f| f["name"] == name)
}

#[tokio::test]
async fn the_collection_equals_the_table() {
    if let Err(e) = cdc_harness::typesense_bin() {
        eprintln!("SKIP: no Typesense binary: {e:#}");
        return;
    }
    let ts = TypesenseServer::start().unwrap();
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price double precision, qty int);
         INSERT INTO items SELECT i, 'item ' || i, i + 0.5, i FROM generate_series(1, 20) i;",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("typesense.key");
    std::fs::write(&key_file, format!("{}\n", ts.api_key())).unwrap();
    let schema_file = dir.path().join("schema.json");
    std::fs::write(
        &schema_file,
        r#"{"public_items": {"fields": [{"name": "name", "type": "string", "facet": true}]}}"#,
    )
    .unwrap();
    let sink = format!(
        "[[sink]]\nname = \"search\"\ntype = \"typesense\"\nurl = \"{}\"\napi_key_file = \"{}\"\ncollection = \"{{schema}}_{{table}}\"\nschema_file = \"{}\"\nbatch_documents = 3\n",
        ts.url(),
        key_file.display(),
        schema_file.display()
    );
    let mut c = connector(pg, &db, dir.path(), &["public.items"], &sink);
    // The sink starts before its topic exists: it picks the topic up when it appears.
    c.start();
    wait_equal(pg, &db, &ts, &mut c, "after the snapshot").await;
    // schema_file: `name` is a facet (inferred, it would not be); the rest inferred.
    let s = collection_schema(&ts);
    assert_eq!(field(&s, "name").unwrap()["facet"], true, "{s}");
    assert_eq!(field(&s, "price").unwrap()["type"], "float", "{s}");
    assert_eq!(field(&s, "qty").unwrap()["type"], "int64", "{s}");

    pg.execute(
        &db,
        "INSERT INTO items VALUES (21, 'new', 2.25, NULL);
         UPDATE items SET name = 'changed', qty = qty * 10 WHERE id <= 5;
         DELETE FROM items WHERE id BETWEEN 6 AND 9;
         BEGIN; UPDATE items SET price = 9.5 WHERE id = 10; DELETE FROM items WHERE id = 11; INSERT INTO items VALUES (11, 'again', 1.5, 1); COMMIT;",
    )
    .await
    .unwrap();
    wait_equal(pg, &db, &ts, &mut c, "after inserts, updates and deletes").await;

    pg.execute(
        &db,
        "TRUNCATE items; INSERT INTO items VALUES (100, 'after truncate', 0.5, 7);",
    )
    .await
    .unwrap();
    wait_equal(pg, &db, &ts, &mut c, "after a truncate").await;

    pg.execute(
        &db,
        "ALTER TABLE items ADD COLUMN note text; INSERT INTO items VALUES (101, 'noted', 1.5, 2, 'hello'); UPDATE items SET note = 'x' WHERE id = 100;",
    )
    .await
    .unwrap();
    wait_equal(pg, &db, &ts, &mut c, "after ADD COLUMN").await;
    let s = collection_schema(&ts);
    assert_eq!(
        field(&s, "note").map(|f| f["type"].clone()),
        Some(json!("string")),
        "{s}"
    );

    // A restart replays from the committed offsets and ends in the same state.
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    pg.execute(&db, "DELETE FROM items WHERE id = 100;")
        .await
        .unwrap();
    c.start();
    wait_equal(pg, &db, &ts, &mut c, "after a restart").await;

    // The log has 3 partitions: a truncate is in each. With the connector stopped, rows
    // before and after a truncate reach the sink in one go, so it meets some partitions'
    // rows after the truncate before other partitions' rows before it.
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    pg.execute(
        &db,
        "UPDATE items SET qty = 5;
         INSERT INTO items SELECT i, 'before ' || i, 1.5, i FROM generate_series(200, 260) i;
         TRUNCATE items;
         INSERT INTO items SELECT i, 'after ' || i, 2.5, i FROM generate_series(300, 360) i;
         UPDATE items SET qty = 1 WHERE id % 2 = 0;",
    )
    .await
    .unwrap();
    c.start();
    wait_equal(pg, &db, &ts, &mut c, "after a truncate read in one go").await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

/// The API key in effect is the file's: a wrong one stops the sink (401 is definite)
/// while the source goes on, and nothing reaches Typesense.
#[tokio::test]
async fn a_wrong_api_key_is_a_definite_failure_of_the_sink() {
    if let Err(e) = cdc_harness::typesense_bin() {
        eprintln!("SKIP: no Typesense binary: {e:#}");
        return;
    }
    let ts = TypesenseServer::start().unwrap();
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL); INSERT INTO items VALUES (1, 'a');",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("typesense.key");
    std::fs::write(&key_file, "not-the-key\n").unwrap();
    let sink = format!(
        "[[sink]]\nname = \"search\"\ntype = \"typesense\"\nurl = \"{}\"\napi_key_file = \"{}\"\ncollection = \"{{schema}}_{{table}}\"\n",
        ts.url(),
        key_file.display()
    );
    let mut c = connector(pg, &db, dir.path(), &["public.items"], &sink);
    c.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    // The error names the keys to fix.
    while !c.output().contains("api_key or api_key_file") {
        c.assert_running();
        assert!(
            Instant::now() < deadline,
            "no credentials error\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !c.output().contains("not-the-key"),
        "the key is never logged"
    );
    c.assert_running();
    assert!(collection_docs(&ts, "public_items").is_empty());
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}
