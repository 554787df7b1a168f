//! The Elasticsearch sink's authentication and batching keys end to end through the
//! shipped CLI: Postgres → `cdc run` (source and its `[[sink]]` in one process) → the
//! embedded log → a basic-authentication proxy (`cdc_harness::BasicAuthProxy`, as nginx
//! in front of a cluster) → the noida-db emulator's Elasticsearch API, which has no
//! authentication of its own.
//!
//! - `username` + `password_file`: the index equals the table after a snapshot and
//!   changes, and every request carried the credentials.
//! - A wrong `password`: the sink stops at the first 401 with a definite error naming the
//!   credential keys (never the password), does not retry, and its group's committed
//!   offsets stay where they were while the source goes on; with the password fixed the
//!   held-back changes arrive.
//! - `batch_documents = 4` (on `type = "opensearch"`): no `_bulk` request carries more
//!   than 4 documents, even when 40 changes are read in one go.
//!
//! Skips (with the reason) when the emulator cannot be fetched.

mod pg_source_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use cdc_harness::{search_http, BasicAuthProxy, NoidaElasticsearch, PgServer};
use pg_source_util::*;
use serde_json::Value as Json;

const USER: &str = "cdc";
const TOPIC: &str = "t.public.items";
const GROUP: &str = "cdc-sink-index";

const SETUP: &str = "SET ROLE cdc;
     CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL);
     INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 20) g;";

/// The emulator and a proxy in front of it that wants `USER` / `password`; `None` (the
/// test skips) without the emulator.
fn servers(password: &str) -> Option<(NoidaElasticsearch, BasicAuthProxy)> {
    if let Err(e) = cdc_harness::noida_bin() {
        eprintln!("SKIP: no noida-db binary: {e:#}");
        return None;
    }
    let es = NoidaElasticsearch::start().unwrap();
    let proxy = BasicAuthProxy::start(es.port(), USER, password).unwrap();
    Some((es, proxy))
}

/// The `[[sink]]` section: the index is the table's name; `keys` adds the keys tested.
fn sink(proxy: &BasicAuthProxy, kind: &str, keys: &str) -> String {
    format!(
        "[[sink]]\nname = \"index\"\ntype = \"{kind}\"\nurl = \"{}\"\nusername = \"{USER}\"\n{keys}\n",
        proxy.url()
    )
}

/// The index's documents by `_id`, read from the emulator directly (past the proxy).
fn docs(es: &NoidaElasticsearch) -> BTreeMap<String, Json> {
    let (status, body) = search_http(es.port(), "POST", "/items/_refresh", &[], None).unwrap();
    if status == 404 {
        return BTreeMap::new();
    }
    assert_eq!(status, 200, "{body}");
    let (status, body) = search_http(
        es.port(),
        "POST",
        "/items/_search",
        &[],
        Some(r#"{"query":{"match_all":{}},"size":10000}"#),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let r: Json = serde_json::from_str(&body).unwrap();
    r["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["_id"].as_str().unwrap().to_string(), h["_source"].clone()))
        .collect()
}

/// The table by key text (the document `_id`).
async fn table(pg: &PgServer, db: &str) -> BTreeMap<String, Json> {
    table_rows(pg, db, "items")
        .await
        .into_values()
        .map(|r| (r["id"].to_string(), r))
        .collect()
}

async fn wait_equal(
    pg: &PgServer,
    db: &str,
    es: &NoidaElasticsearch,
    c: &mut Connector,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        c.assert_running();
        let want = table(pg, db).await;
        let got = docs(es);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the index does not equal the table\n table: {want:?}\n index: {got:?}\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The whole connector log (the error may be older than `output`'s last lines).
fn whole_log(c: &Connector) -> String {
    std::fs::read_to_string(c.dir.join("connector.log")).unwrap_or_default()
}

/// The sink's group: committed offset per partition of the change topic.
fn committed(log_dir: &Path) -> BTreeMap<u32, u64> {
    let log = cdc_log::Log::open_read_only(log_dir).unwrap();
    log.groups()
        .into_iter()
        .filter(|g| g.group == GROUP && g.topic == TOPIC)
        .map(|g| (g.partition, g.committed))
        .collect()
}

/// The change topic's high watermark per partition.
fn high_watermarks(log_dir: &Path) -> BTreeMap<u32, u64> {
    let log = cdc_log::Log::open_read_only(log_dir).unwrap();
    let d = log.describe(TOPIC).unwrap();
    (0..)
        .zip(d.partitions.iter().map(|p| p.high_watermark))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn username_and_password_file_reach_the_index() {
    let password = "s3cret-pw";
    let Some((es, proxy)) = servers(password) else {
        return;
    };
    let pg = PgServer::shared();
    let db = database_with(pg, SETUP).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("es.password");
    // One trailing newline is not part of the password.
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let keys = format!("password_file = \"{}\"", file.display());
    let mut c = connector(
        pg,
        &db,
        dir.path(),
        &["public.items"],
        &sink(&proxy, "elasticsearch", &keys),
    );
    c.start();
    wait_equal(pg, &db, &es, &mut c, "after the snapshot").await;
    pg.execute(
        &db,
        "INSERT INTO items VALUES (21, 'new', 7);
         UPDATE items SET name = 'changed', qty = qty * 10 WHERE id <= 5;
         DELETE FROM items WHERE id BETWEEN 6 AND 9;",
    )
    .await
    .unwrap();
    wait_equal(pg, &db, &es, &mut c, "after inserts, updates and deletes").await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    let requests = proxy.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.authorized && r.status != 401 && r.status != 403),
        "every request carried the credentials: {requests:#?}"
    );
    assert!(!proxy.bulk_actions().is_empty(), "{requests:#?}");
    assert!(
        !whole_log(&c).contains(password),
        "the password is never logged"
    );
    drop_slot(pg, &db).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_stops_the_sink_and_acknowledges_nothing_past_it() {
    let (right, wrong) = ("right-pw", "wrong-pw");
    let Some((es, proxy)) = servers(right) else {
        return;
    };
    let pg = PgServer::shared();
    let db = database_with(pg, SETUP).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = connector(
        pg,
        &db,
        dir.path(),
        &["public.items"],
        &sink(&proxy, "elasticsearch", &format!("password = \"{right}\"")),
    );
    c.start();
    wait_equal(pg, &db, &es, &mut c, "with the right password").await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    // Committed at shutdown: everything delivered.
    let acknowledged = committed(&c.log_dir());
    assert_eq!(acknowledged, high_watermarks(&c.log_dir()));
    let indexed = docs(&es);

    c.edit_config(|t| {
        t.replace(
            &format!("password = \"{right}\""),
            &format!("password = \"{wrong}\""),
        )
    });
    pg.execute(
        &db,
        "INSERT INTO items VALUES (21, 'new', 7);
         UPDATE items SET qty = 0 WHERE id <= 5;
         DELETE FROM items WHERE id = 20;",
    )
    .await
    .unwrap();
    let answered = proxy.requests().len();
    c.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !whole_log(&c).contains("sink stopped on a definite error") {
        c.assert_running();
        assert!(
            Instant::now() < deadline,
            "no definite error\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = whole_log(&c);
    let error = log
        .lines()
        .find(|l| l.contains("sink stopped on a definite error"))
        .unwrap();
    // A JSON line (the log file is not a terminal): the error is its `error` field.
    let error: serde_json::Value = serde_json::from_str(error).unwrap();
    let error = error["error"].as_str().unwrap();
    assert_mentions(
        error,
        &[
            "HTTP 401",
            "unable to authenticate user [cdc]",
            "username",
            "password / password_file",
            "\"cdc\"",
        ],
    );
    assert!(
        !log.contains(wrong) && !log.contains(right),
        "a password is never logged"
    );
    // The source goes on: the 7 changes (and the delete's tombstone) reach the log.
    c.wait_records(TOPIC, 28, Duration::from_secs(60)).await;
    // Longer than the sink's first backoffs (0.5 s, 1 s): a retry would show here.
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.assert_running();
    let refused: Vec<_> = proxy.requests()[answered..].to_vec();
    assert!(
        refused.len() == 1 && !refused[0].authorized && refused[0].status == 401,
        "one request, refused, and no retry: {refused:#?}"
    );
    assert_eq!(
        committed(&c.log_dir()),
        acknowledged,
        "nothing acknowledged past the 401"
    );
    assert_ne!(acknowledged, high_watermarks(&c.log_dir()));
    assert_eq!(docs(&es), indexed, "nothing reached the index");
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    // With the password fixed, the changes held back in the log arrive.
    c.edit_config(|t| {
        t.replace(
            &format!("password = \"{wrong}\""),
            &format!("password = \"{right}\""),
        )
    });
    c.start();
    wait_equal(pg, &db, &es, &mut c, "with the password fixed").await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    assert_eq!(committed(&c.log_dir()), high_watermarks(&c.log_dir()));
    drop_slot(pg, &db).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn batch_documents_bounds_the_documents_per_bulk_request() {
    let password = "batch-pw";
    let Some((es, proxy)) = servers(password) else {
        return;
    };
    let pg = PgServer::shared();
    let db = database_with(pg, SETUP).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = format!("password = \"{password}\"\nbatch_documents = 4");
    let mut c = connector(
        pg,
        &db,
        dir.path(),
        &["public.items"],
        &sink(&proxy, "opensearch", &keys),
    );
    c.start();
    wait_equal(pg, &db, &es, &mut c, "after the snapshot").await;
    // With the connector stopped, 40 changes in one transaction: the sink reads them in
    // one go, so only `batch_documents` splits them.
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let snapshot_requests = proxy.bulk_actions().len();
    pg.execute(
        &db,
        "BEGIN;
         UPDATE items SET qty = qty + 1;
         INSERT INTO items SELECT g, 'more ' || g, g FROM generate_series(100, 119) g;
         COMMIT;",
    )
    .await
    .unwrap();
    c.start();
    wait_equal(pg, &db, &es, &mut c, "after 40 changes").await;
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    let sizes = proxy.bulk_actions();
    assert!(
        sizes.iter().all(|&n| (1..=4).contains(&n)),
        "no _bulk request above batch_documents = 4: {sizes:?}"
    );
    let after = &sizes[snapshot_requests..];
    assert!(
        after.len() >= 10 && after.iter().sum::<usize>() >= 40,
        "the 40 changes in requests of at most 4 documents: {after:?}"
    );
    drop_slot(pg, &db).await;
}
