//! `cdc verify --sink` through the shipped CLI against a real Redis kept by `cdc run`'s
//! `[[sink]]`s (a JSON view and a hash view): equal after the snapshot and a workload
//! (exit 0, also right after a change: the re-check waits for the sink to catch up);
//! rows changed, deleted and added in Redis behind the sink's back are found, printed
//! with both sides (exit 1); a column added to the table does not make the rows written
//! before it differ; an invalidating sink has no view to verify (exit 2). The same for a
//! Typesense sink's collection (skipped, with the reason, without the Typesense binary).

mod pg_source_util;

use std::process::Command;
use std::time::Duration;

use cdc_harness::{PgServer, RedisServer};
use pg_source_util::*;

/// `redis-cli -p <port> -n <db> <args>`, its output.
fn redis_cli(redis: &RedisServer, db: u32, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(redis.port().to_string())
        .arg("-n")
        .arg(db.to_string())
        .args(args)
        .output()
        .expect("redis-cli (installed with redis-server)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A verify's report without its timing (`… in 0.3 s`, `(checked in 0.3 s)`).
fn untimed(out: &str) -> String {
    out.lines()
        .map(|l| match l.rfind(" in ") {
            Some(i) if l.ends_with(" s") || l.ends_with(" s)") => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const SETUP: &str = "SET ROLE cdc;
     CREATE TABLE item (id int PRIMARY KEY, name text NOT NULL, price numeric(10,2), tags text[]);
     INSERT INTO item SELECT g, 'item ' || g, g * 1.25, ARRAY['a', g::text] FROM generate_series(1, 40) g;";

#[tokio::test(flavor = "multi_thread")]
async fn verify_sink_compares_redis_views_with_the_table() {
    let pg = PgServer::shared();
    let redis = RedisServer::start().unwrap();
    let db = database_with(pg, SETUP).await;
    let sinks = format!(
        "[format]\ndecimal_handling_mode = \"string\"\n\n\
         [[sink]]\nname = \"cache\"\ntype = \"redis\"\nurl = \"redis://127.0.0.1:{p}/0\"\n\n\
         [[sink]]\nname = \"hashes\"\ntype = \"redis\"\nurl = \"redis://127.0.0.1:{p}/1\"\nvalue = \"hash\"\nkey = \"h:{{table}}:{{key}}\"\nexclude_columns = [\"public.item:tags\"]\n\n\
         [[sink]]\nname = \"aside\"\ntype = \"redis\"\nurl = \"redis://127.0.0.1:{p}/2\"\nmode = \"invalidate\"\n",
        p = redis.port()
    );
    let (_dir, mut c) = temp_connector(pg, &db, &["public.item"], &sinks);
    c.start();
    c.wait_records("t.public.item", 40, Duration::from_secs(60))
        .await;
    pg.execute(
        &db,
        "UPDATE item SET price = price + 1 WHERE id % 3 = 0;
         DELETE FROM item WHERE id = 5;
         INSERT INTO item VALUES (100, 'hundred', 1, '{}');
         ALTER TABLE item ADD COLUMN note text;
         INSERT INTO item VALUES (101, 'with note', 2, NULL, 'n');",
    )
    .await
    .unwrap();
    // Right after the changes: the re-check waits for the sinks to apply them.
    for sink in ["cache", "hashes"] {
        let (code, out, err) = c.verify(&[
            "--table",
            "public.item",
            "--sink",
            sink,
            "--chunk-rows",
            "7",
        ]);
        assert_eq!(code, Some(0), "{sink}\n{out}\n{err}\n{}", c.output());
        assert!(out.contains("equal"), "{out}");
    }

    // Behind the sinks' back: one row changed, one deleted, one added (with a version
    // entry, as a sink would have written it).
    redis_cli(
        &redis,
        0,
        &[
            "SET",
            "t:item:3",
            r#"{"id":3,"name":"tampered","price":"4.75","tags":["a","3"]}"#,
        ],
    );
    redis_cli(&redis, 0, &["DEL", "t:item:4"]);
    redis_cli(
        &redis,
        0,
        &["SET", "t:item:999", r#"{"id":999,"name":"ghost"}"#],
    );
    redis_cli(&redis, 0, &["SADD", "t:__cdc:k:public.item", "t:item:999"]);
    let (code, out, err) = c.verify(&[
        "--table",
        "public.item",
        "--sink",
        "cache",
        "--wait-secs",
        "2",
    ]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains("differs: key {\"id\":3}") && out.contains("\"name\":\"tampered\""),
        "{out}"
    );
    assert!(out.contains("missing in the view: key {\"id\":4}"), "{out}");
    assert!(out.contains("\"name\":\"ghost\""), "{out}");
    assert!(out.contains("3 keys differ"), "{out}");

    // Past --memory-mb (forced small with the hidden --spill-keys) the source's ids and
    // the target's scan go to run files on disk; the verdict and the report are the
    // same, also when --max-report cuts it short.
    for report in ["1000", "2"] {
        let args = [
            "--table",
            "public.item",
            "--sink",
            "cache",
            "--wait-secs",
            "2",
            "--max-report",
            report,
        ];
        let (code, out, err) = c.verify_logging("info", &args);
        let spilled = [&args[..], &["--memory-mb", "1", "--spill-keys", "4"]].concat();
        let (s_code, s_out, s_err) = c.verify_logging("info", &spilled);
        assert_eq!(
            (code, untimed(&out)),
            (s_code, untimed(&s_out)),
            "{err}\n{s_err}"
        );
        assert!(!err.contains("spilled"), "{err}");
        assert!(
            s_err.contains("verify: spilled the source's ids"),
            "{s_err}"
        );
        assert!(
            s_err.contains("verify: compared the spilled ids"),
            "{s_err}"
        );
    }

    // The hash view: a field changed.
    redis_cli(&redis, 1, &["HSET", "h:item:10", "name", "other"]);
    let (code, out, err) = c.verify(&[
        "--table",
        "public.item",
        "--sink",
        "hashes",
        "--wait-secs",
        "2",
    ]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(out.contains("differs: key {\"id\":10}"), "{out}");
    assert!(
        out.contains("1 keys differ") || out.contains("1 key differs"),
        "{out}"
    );

    // A cache-aside sink keeps no rows: nothing to verify, and it says so.
    let (code, _out, err) = c.verify(&["--table", "public.item", "--sink", "aside"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("invalidate"), "{err}");

    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}

/// A Typesense sink's collection: equal after the snapshot and changes (the document
/// `id` is the key text, compared as such), a document changed and one deleted behind
/// the sink's back are found (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn verify_sink_compares_a_typesense_collection_with_the_table() {
    if let Err(e) = cdc_harness::typesense_bin() {
        eprintln!("SKIP: no Typesense binary: {e:#}");
        return;
    }
    let pg = PgServer::shared();
    let ts = cdc_harness::TypesenseServer::start().unwrap();
    let db = database_with(pg, SETUP).await;
    let sink = format!(
        "[format]\ndecimal_handling_mode = \"string\"\n\n\
         [[sink]]\nname = \"search\"\ntype = \"typesense\"\nurl = \"{}\"\napi_key = \"{}\"\n",
        ts.url(),
        ts.api_key()
    );
    let (_dir, mut c) = temp_connector(pg, &db, &["public.item"], &sink);
    c.start();
    c.wait_records("t.public.item", 40, Duration::from_secs(60))
        .await;
    pg.execute(
        &db,
        "UPDATE item SET name = 'renamed' WHERE id % 4 = 0;
         DELETE FROM item WHERE id = 6;
         INSERT INTO item VALUES (77, 'new', 7, '{x}');",
    )
    .await
    .unwrap();
    let (code, out, err) = c.verify(&[
        "--table",
        "public.item",
        "--sink",
        "search",
        "--chunk-rows",
        "9",
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", c.output());
    assert!(out.contains("equal"), "{out}");

    // Behind the sink's back.
    let (status, body) = cdc_harness::search_http(
        ts.port(),
        "PATCH",
        "/collections/item/documents/3",
        &[("X-TYPESENSE-API-KEY", ts.api_key())],
        Some(r#"{"name":"tampered"}"#),
    )
    .unwrap();
    assert!(status == 200 || status == 201, "{status} {body}");
    let (status, body) = cdc_harness::search_http(
        ts.port(),
        "DELETE",
        "/collections/item/documents/9",
        &[("X-TYPESENSE-API-KEY", ts.api_key())],
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (code, out, err) = c.verify(&[
        "--table",
        "public.item",
        "--sink",
        "search",
        "--wait-secs",
        "2",
    ]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(out.contains("differs: key {\"id\":3}"), "{out}");
    assert!(out.contains("missing in the view: key {\"id\":9}"), "{out}");
    assert!(out.contains("2 keys differ"), "{out}");
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}

/// An Elasticsearch sink's index (the noida-db emulator's Elasticsearch API), its name
/// from `index` and its mapping from `mapping_file` through `cdc run`: equal after the
/// snapshot and changes; a document changed and one deleted behind the sink's back
/// are found (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn verify_sink_compares_an_elasticsearch_index_with_the_table() {
    if let Err(e) = cdc_harness::noida_bin() {
        eprintln!("SKIP: no noida-db binary: {e:#}");
        return;
    }
    let pg = PgServer::shared();
    let es = cdc_harness::NoidaElasticsearch::start().unwrap();
    let db = database_with(pg, SETUP).await;
    // mapping_file through `cdc run`: `name` as a keyword (derived, it would be text).
    let files = tempfile::tempdir().unwrap();
    let mapping = files.path().join("mapping.json");
    std::fs::write(
        &mapping,
        r#"{"t_item": {"mappings": {"properties": {"name": {"type": "keyword"}}}}}"#,
    )
    .unwrap();
    let sink = format!(
        "[format]\ndecimal_handling_mode = \"string\"\n\n\
         [[sink]]\nname = \"index\"\ntype = \"elasticsearch\"\nurl = \"{}\"\nindex = \"{{prefix}}_{{table}}\"\nmapping_file = \"{}\"\nbatch_documents = 7\n",
        es.url(),
        mapping.display()
    );
    let (_dir, mut c) = temp_connector(pg, &db, &["public.item"], &sink);
    c.start();
    c.wait_records("t.public.item", 40, Duration::from_secs(60))
        .await;
    pg.execute(
        &db,
        "UPDATE item SET name = 'renamed' WHERE id % 4 = 0;
         DELETE FROM item WHERE id = 6;
         INSERT INTO item VALUES (77, 'new', 7, '{x}');",
    )
    .await
    .unwrap();
    let args = [
        "--table",
        "public.item",
        "--sink",
        "index",
        "--chunk-rows",
        "9",
    ];
    let (code, out, err) = c.verify(&args);
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", c.output());
    assert!(out.contains("equal"), "{out}");

    let json = [("content-type", "application/json")];
    let (status, body) =
        cdc_harness::search_http(es.port(), "GET", "/t_item/_mapping", &json, None).unwrap();
    assert_eq!(status, 200, "{body}");
    let m: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        m["t_item"]["mappings"]["properties"]["name"]["type"], "keyword",
        "the mapping file's type: {body}"
    );
    assert_eq!(
        m["t_item"]["mappings"]["properties"]["price"]["type"], "text",
        "a derived one: {body}"
    );

    // Behind the sink's back.
    let (status, body) = cdc_harness::search_http(
        es.port(),
        "PUT",
        "/t_item/_doc/3?version=1000000&version_type=external&refresh=true",
        &json,
        Some(r#"{"id":3,"name":"tampered"}"#),
    )
    .unwrap();
    assert!(status == 200 || status == 201, "{status} {body}");
    let (status, body) = cdc_harness::search_http(
        es.port(),
        "DELETE",
        "/t_item/_doc/9?refresh=true",
        &json,
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let args = [
        "--table",
        "public.item",
        "--sink",
        "index",
        "--wait-secs",
        "2",
    ];
    let (code, out, err) = c.verify(&args);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(out.contains("differs: key {\"id\":3}"), "{out}");
    assert!(out.contains("missing in the view: key {\"id\":9}"), "{out}");
    assert!(out.contains("2 keys differ"), "{out}");
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}

/// Not run by default (minutes, and a measurement rather than a check): the peak RSS of
/// `cdc verify --sink` against a Redis view of a table of `CDC_VERIFY_ROWS` rows (default
/// 1,000,000) with one row added behind the sink's back (so the target is scanned for
/// the rows the source lacks, against the source's ids), with the default budget and
/// smaller ones that spill, each printed as `memory_mb=… rss_kb=… secs=…`:
///
///     CDC_VERIFY_ROWS=1000000 cargo test -p cdc-harness --test verify_sink -- \
///       --ignored verify_sink_memory_on_a_large_table --nocapture
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn verify_sink_memory_on_a_large_table() {
    let rows: u64 = std::env::var("CDC_VERIFY_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let pg = PgServer::shared();
    let redis = RedisServer::start().unwrap();
    let db = database_with(
        pg,
        &format!(
            "SET ROLE cdc;
             CREATE TABLE big (id int PRIMARY KEY, v text NOT NULL, n int);
             INSERT INTO big SELECT g, 'value ' || g, g FROM generate_series(1, {rows}) g;"
        ),
    )
    .await;
    // The default snapshot mode: with `initial_only` the connector (and its sink) would
    // stop once the snapshot is in the log.
    let extra = format!(
        "[[sink]]\nname = \"cache\"\ntype = \"redis\"\nurl = \"redis://127.0.0.1:{}/0\"\n",
        redis.port()
    );
    let (_dir, mut c) = temp_connector(pg, &db, &["public.big"], &extra);
    c.start();
    c.wait_records("t.public.big", rows, Duration::from_secs(3600))
        .await;
    // The sink has applied the table when Redis holds a key per row (and its offsets
    // hash and rows set) and stops growing.
    let dbsize = || -> u64 { redis_cli(&redis, 0, &["DBSIZE"]).trim().parse().unwrap() };
    let started = std::time::Instant::now();
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let n = dbsize();
        if n > rows && n == last {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "{n} keys\n{}",
            c.output()
        );
        last = n;
    }
    let _ = c.stop();
    redis_cli(
        &redis,
        0,
        &["SET", "t:big:0", r#"{"id":0,"v":"ghost","n":0}"#],
    );
    redis_cli(&redis, 0, &["SADD", "t:__cdc:k:public.big", "t:big:0"]);
    let budgets = std::env::var("CDC_VERIFY_MB").unwrap_or_else(|_| "64,16,4".into());
    // A profiler to run each verify under, e.g. `heaptrack -o DIR/heap`.
    let wrap = std::env::var("CDC_VERIFY_WRAP").unwrap_or_default();
    let mut reports = Vec::new();
    for mb in budgets.split(',') {
        let time = c.dir.join("time.txt");
        let started = std::time::Instant::now();
        let out = Command::new("/usr/bin/time")
            .arg("-f")
            .arg("%M")
            .arg("-o")
            .arg(&time)
            .args(wrap.split_whitespace())
            .arg(env!("CARGO_BIN_EXE_cdc-e2e"))
            .args(["verify", "--config"])
            .arg(&c.config)
            .args([
                "--table",
                "public.big",
                "--sink",
                "cache",
                "--wait-secs",
                "0",
            ])
            .args(["--memory-mb", mb])
            .env("CDC_LOG_LEVEL", "info")
            .output()
            .unwrap();
        let secs = started.elapsed().as_secs_f64();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("missing in the source") && stdout.contains("1 key differs"),
            "{stdout}"
        );
        reports.push(untimed(&stdout));
        for l in stderr.lines().filter(|l| l.contains("verify:")) {
            println!("  {l}");
        }
        // Its last line (a non-zero exit is reported on a line before it).
        let rss = std::fs::read_to_string(&time).unwrap();
        println!(
            "memory_mb={mb} rss_kb={} secs={secs:.1} spilled={}",
            rss.lines().last().unwrap_or_default(),
            stderr.contains("verify: spilled")
        );
    }
    assert!(reports.windows(2).all(|w| w[0] == w[1]), "{reports:?}");
    drop_slot(pg, &db).await;
}
