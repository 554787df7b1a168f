//! `cdc verify --log` through the shipped CLI against real Postgres: a table streamed into
//! the log verifies equal (exit 0), also while a workload keeps changing it; rows changed,
//! deleted and inserted directly while the connector is stopped (so the log lacks them)
//! are found, each key printed with both sides (exit 1); a composite key; usage errors
//! exit 2. Past `--memory-mb` the comparison spills to disk and says the same.

mod pg_source_util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cdc_harness::PgServer;
use pg_source_util::*;

const SETUP: &str = "SET ROLE cdc;
     CREATE TABLE item (id int PRIMARY KEY, name text NOT NULL, price numeric(10,2), at timestamptz, tags text[]);
     INSERT INTO item SELECT g, 'item ' || g, g * 1.25, '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 hour', ARRAY['a', g::text] FROM generate_series(1, 25) g;
     CREATE TABLE pair (a int NOT NULL, b text NOT NULL, v bigint, at timestamp, PRIMARY KEY (a, b));
     INSERT INTO pair SELECT g % 5, 'k' || g, g, '2024-02-01 12:00:00'::timestamp + g * interval '1 minute' FROM generate_series(1, 30) g;";

#[tokio::test(flavor = "multi_thread")]
async fn verify_log_finds_what_the_log_lacks() {
    let pg = PgServer::shared();
    let db = database_with(pg, SETUP).await;
    let (_dir, mut c) = temp_connector(pg, &db, &["public.item", "public.pair"], "");
    c.start();
    c.wait_records("t.public.item", 25, Duration::from_secs(60))
        .await;
    c.wait_records("t.public.pair", 30, Duration::from_secs(60))
        .await;
    pg.execute(
        &db,
        "UPDATE item SET price = price + 1 WHERE id % 4 = 0;
         DELETE FROM item WHERE id = 7;
         INSERT INTO item VALUES (50, 'fifty', 5.5, now(), '{}');
         UPDATE pair SET v = v * 10 WHERE a = 2;
         DELETE FROM pair WHERE a = 3 AND b = 'k3';",
    )
    .await
    .unwrap();
    // Streamed: equal (the re-check waits for the connector to catch up if it lags).
    for table in ["public.item", "pair"] {
        let (code, out, err) = c.verify(&["--table", table, "--log", "--chunk-rows", "7"]);
        assert_eq!(code, Some(0), "{table}\n{out}\n{err}\n{}", c.output());
        assert!(out.contains("equal to the log"), "{out}");
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    // Behind the log's back: the connector is stopped, so the log does not have these.
    pg.execute(
        &db,
        "UPDATE item SET name = 'changed' WHERE id = 3;
         DELETE FROM item WHERE id = 4;
         INSERT INTO item VALUES (60, 'sixty', 6, NULL, NULL);
         UPDATE pair SET v = -1 WHERE a = 1 AND b = 'k1';
         DELETE FROM pair WHERE a = 4 AND b = 'k4';",
    )
    .await
    .unwrap();
    let (code, out, err) = c.verify(&[
        "--table",
        "public.item",
        "--log",
        "--chunk-rows",
        "4",
        "--wait-secs",
        "1",
    ]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains("differs: key {\"id\":3}\n  source: {\"id\":3,\"name\":\"changed\""),
        "{out}"
    );
    assert!(
        out.contains("  view:   {\"id\":3,\"name\":\"item 3\""),
        "{out}"
    );
    assert!(
        out.contains(
            "missing in the source: key {\"id\":4}\n  source: (missing)\n  view:   {\"id\":4,"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "missing in the view: key {\"id\":60}\n  source: {\"id\":60,\"name\":\"sixty\""
        ),
        "{out}"
    );
    assert!(out.contains("3 keys differ"), "{out}");
    // The row deleted while streaming is gone from both sides: not reported.
    assert!(!out.contains("{\"id\":7}"), "{out}");

    let (code, out, err) = c.verify(&["--table", "public.pair", "--log", "--wait-secs", "1"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains(
            "differs: key {\"a\":1,\"b\":\"k1\"}\n  source: {\"a\":1,\"b\":\"k1\",\"v\":-1"
        ),
        "{out}"
    );
    assert!(
        out.contains("missing in the source: key {\"a\":4,\"b\":\"k4\"}"),
        "{out}"
    );
    assert!(out.contains("2 keys differ"), "{out}");

    // Streamed again: the connector catches up and the same command exits 0.
    c.start();
    let (code, out, err) = c.verify(&["--table", "public.item", "--log", "--wait-secs", "60"]);
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", c.output());
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    // Usage and configuration errors exit 2.
    for args in [
        vec!["--table", "public.item"],
        vec!["--table", "public.nope", "--log"],
        vec!["--table", "public.item", "--sink", "nope"],
    ] {
        let (code, out, err) = c.verify(&args);
        assert_eq!(code, Some(2), "{args:?}\n{out}\n{err}");
    }
    drop_slot(pg, &db).await;
}

/// A workload keeps changing the table while it is verified: the keys that differ only
/// because the log has not caught up yet are re-checked, not reported.
#[tokio::test(flavor = "multi_thread")]
async fn verify_log_on_a_busy_table_gives_no_false_alarm() {
    let pg = PgServer::shared();
    let db = database_with(pg, SETUP).await;
    let (_dir, mut c) = temp_connector(pg, &db, &["public.item"], "");
    c.start();
    c.wait_records("t.public.item", 25, Duration::from_secs(60))
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let w = {
        let stop = stop.clone();
        let db = db.clone();
        tokio::spawn(async move {
            let client = pg.superuser_client(&db).await.unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let id = 1 + (i * 7) % 25;
                client
                    .batch_execute(&format!(
                        "UPDATE item SET price = price + 1 WHERE id = {id}; INSERT INTO item VALUES ({}, 'new', 1, now(), NULL)",
                        1000 + i
                    ))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            i
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..3 {
        let (code, out, err) = c.verify(&[
            "--table",
            "public.item",
            "--log",
            "--chunk-rows",
            "10",
            "--wait-secs",
            "30",
        ]);
        assert_eq!(code, Some(0), "{out}\n{err}\n{}", c.output());
    }
    stop.store(true, Ordering::Relaxed);
    assert!(w.await.unwrap() > 10);
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}

/// `verify --log` past its memory budget (forced small with the hidden `--spill-keys`):
/// the rebuild spills to bucket files, and the verdict, the printed differences and the
/// re-check are exactly those of the in-memory comparison — over inserts, updates,
/// deletes, a truncate, and rows changed behind the log's back. The spill's directory is
/// gone afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn verify_log_spilled_equals_in_memory() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc;
         CREATE TABLE spill (id int PRIMARY KEY, v text NOT NULL, n int);
         INSERT INTO spill SELECT g, 'v' || g, g FROM generate_series(1, 40) g;",
    )
    .await;
    let (_dir, mut c) = temp_connector(pg, &db, &["public.spill"], "");
    c.start();
    c.wait_records("t.public.spill", 40, Duration::from_secs(60))
        .await;
    // Each its own transaction, apart in time: a truncate clears the keys whose latest
    // record is not newer than it, to the millisecond of the log time (the keys are in
    // other partitions than the truncate), so changes of its millisecond are ambiguous.
    for sql in [
        "UPDATE spill SET n = n * 10 WHERE id % 3 = 0; DELETE FROM spill WHERE id % 7 = 0",
        "TRUNCATE spill",
        "INSERT INTO spill SELECT g, 'w' || g, g FROM generate_series(1, 30) g;
         UPDATE spill SET v = 'u' || id WHERE id % 4 = 0;
         DELETE FROM spill WHERE id IN (5, 6);",
    ] {
        tokio::time::sleep(Duration::from_millis(20)).await;
        pg.execute(&db, sql).await.unwrap();
    }
    let base = ["--table", "public.spill", "--log", "--chunk-rows", "7"];
    let spilled = ["--memory-mb", "1", "--spill-keys", "4"];
    let run = |c: &Connector, extra: &[&str], spill: bool| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        if spill {
            args.extend_from_slice(&spilled);
        }
        c.verify_logging("info", &args)
    };
    // Streamed: equal either way (the re-check waits for the connector).
    for spill in [false, true] {
        let (code, out, err) = run(&c, &["--wait-secs", "60"], spill);
        assert_eq!(code, Some(0), "spill {spill}\n{out}\n{err}\n{}", c.output());
        assert!(out.contains("equal to the log"), "{out}");
        assert!(out.contains(": 28 rows, in"), "{out}");
        assert_eq!(err.contains("verify: spilled to"), spill, "{err}");
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    // Behind the log's back.
    pg.execute(
        &db,
        "UPDATE spill SET v = 'changed' WHERE id = 3;
         DELETE FROM spill WHERE id IN (4, 9);
         INSERT INTO spill VALUES (60, 'sixty', 60), (61, 'sixty-one', 61);",
    )
    .await
    .unwrap();
    // The timing, and the source position of a re-check's note, differ from run to run.
    let normalize = |out: &str| -> String {
        out.lines()
            .map(|l| {
                let l = l.split(" (checked in").next().unwrap();
                match l.split_once("source position ") {
                    Some((a, b)) => format!(
                        "{a}source position P when {}",
                        b.split_once(" when ").map_or("", |(_, r)| r)
                    ),
                    None => l.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    for extra in [
        &["--wait-secs", "0"][..],
        &["--wait-secs", "1"][..],
        &["--wait-secs", "0", "--max-report", "3"][..],
        &["--wait-secs", "1", "--max-report", "1"][..],
    ] {
        let (code, out, err) = run(&c, extra, false);
        let (s_code, s_out, s_err) = run(&c, extra, true);
        assert_eq!(code, Some(1), "{extra:?}\n{out}\n{err}");
        assert!(!err.contains("spilled"), "{err}");
        assert!(s_err.contains("verify: spilled to"), "{extra:?}\n{s_err}");
        assert!(s_err.contains("compared the spilled buckets"), "{s_err}");
        assert_eq!(s_code, code, "{extra:?}\n{s_out}\n{s_err}");
        assert_eq!(normalize(&s_out), normalize(&out), "{extra:?}\n{s_err}");
        assert!(out.contains("5 keys differ"), "{out}");
        assert!(
            out.contains("28 rows in the source, 28 in the view"),
            "{out}"
        );
    }
    let (_, out, _) = run(&c, &["--wait-secs", "0"], true);
    for needle in [
        "differs: key {\"id\":3}\n  source: {\"id\":3,\"v\":\"changed\",\"n\":3}\n  view:   {\"id\":3,\"v\":\"w3\",\"n\":3}",
        "missing in the source: key {\"id\":4}",
        "missing in the source: key {\"id\":9}",
        "missing in the view: key {\"id\":60}",
        "missing in the view: key {\"id\":61}",
    ] {
        assert!(out.contains(needle), "{needle}\n{out}");
    }
    // Rows truncated away are in neither side.
    assert!(!out.contains("\"v\":\"v3"), "{out}");
    // The spill's directory (beside the log) is removed; a directory that cannot take it
    // is named.
    let left: Vec<_> = std::fs::read_dir(&c.dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("cdc-verify-spill")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let (code, _, err) = run(
        &c,
        &["--wait-secs", "0", "--spill-dir", "/nonexistent/spill"],
        true,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("spilling to /nonexistent/spill"), "{err}");
    let (code, _, err) = c.verify(&["--table", "public.spill", "--log", "--memory-mb", "0"]);
    assert_eq!(code, Some(2), "{err}");
    drop_slot(pg, &db).await;
}

/// The source's side of a pass ([`cdc_sources::verify::TableReader`]): chunks of exactly
/// the rows asked for (the last one fewer), in key order, each row once — for an integer
/// key, whose text order is not its order (`'10' < '9'`: chunk bounds found in text order
/// made chunks of any size), and a composite one.
#[tokio::test(flavor = "multi_thread")]
async fn verify_reads_chunks_of_the_rows_asked_in_key_order() {
    use cdc_schemas::{TableId, Value};
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc;
         CREATE TABLE num (id int PRIMARY KEY, v text);
         INSERT INTO num SELECT g, 'v' || g FROM generate_series(1, 50) g;
         CREATE TABLE two (a int, b text, PRIMARY KEY (a, b));
         INSERT INTO two SELECT g % 12, 'k' || g FROM generate_series(1, 60) g;",
    )
    .await;
    let (_dir, c) = temp_connector(pg, &db, &["public.num", "public.two"], "");
    let config = cdc_connector::config::Config::load(&c.config).unwrap();
    for (table, rows) in [("num", 50), ("two", 60)] {
        let id = TableId::new("public", table);
        let mut r = cdc_sources::verify::TableReader::open(&config.source_spec(), &id)
            .await
            .unwrap();
        r.begin().await.unwrap();
        let mut sizes = Vec::new();
        let mut keys: Vec<(i32, String)> = Vec::new();
        loop {
            let chunk = r.next_chunk(7).await.unwrap();
            if chunk.is_empty() {
                break;
            }
            sizes.push(chunk.len());
            for row in chunk {
                keys.push(match (&row.0[0], &row.0[1]) {
                    (Value::Int32(a), Value::Text(b)) if table == "two" => (*a, b.clone()),
                    (Value::Int32(a), _) => (*a, String::new()),
                    other => panic!("{other:?}"),
                });
            }
        }
        r.end().await.unwrap();
        let mut want = vec![7; rows / 7];
        if rows % 7 > 0 {
            want.push(rows % 7);
        }
        assert_eq!(sizes, want, "{table}");
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{table}: {keys:?}");
        assert_eq!(keys.len(), rows, "{table}");
    }
}

/// Not run by default (minutes, and a measurement rather than a check): the peak RSS of
/// `cdc verify --log` on a table of `CDC_VERIFY_ROWS` rows (default 1,000,000), with the
/// default budget and with smaller ones that spill, each printed as
/// `memory_mb=… rss_kb=… secs=…`:
///
///     CDC_VERIFY_ROWS=1000000 cargo test -p cdc-harness --test verify_log -- \
///       --ignored verify_log_memory_on_a_large_table --nocapture
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn verify_log_memory_on_a_large_table() {
    let rows: u64 = std::env::var("CDC_VERIFY_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        &format!(
            "SET ROLE cdc;
             CREATE TABLE big (id int PRIMARY KEY, v text NOT NULL, n int);
             INSERT INTO big SELECT g, 'value ' || g, g FROM generate_series(1, {rows}) g;"
        ),
    )
    .await;
    let (_dir, mut c) = temp_connector(
        pg,
        &db,
        &["public.big"],
        "[snapshot]\nmode = \"initial_only\"\n",
    );
    c.start();
    c.wait_records("t.public.big", rows, Duration::from_secs(3600))
        .await;
    let _ = c.stop();
    let budgets = std::env::var("CDC_VERIFY_MB").unwrap_or_else(|_| "64,16,4".into());
    // A profiler to run each verify under, e.g. `heaptrack -o DIR/heap`.
    let wrap = std::env::var("CDC_VERIFY_WRAP").unwrap_or_default();
    // More options of each verify, e.g. `--chunk-rows 1000`.
    let extra = std::env::var("CDC_VERIFY_ARGS").unwrap_or_default();
    for mb in budgets.split(',') {
        let time = c.dir.join("time.txt");
        let started = std::time::Instant::now();
        let out = std::process::Command::new("/usr/bin/time")
            .arg("-f")
            .arg("%M")
            .arg("-o")
            .arg(&time)
            .args(wrap.split_whitespace())
            .arg(env!("CARGO_BIN_EXE_cdc-e2e"))
            .args(["verify", "--config"])
            .arg(&c.config)
            .args(["--table", "public.big", "--log", "--wait-secs", "0"])
            .args(["--memory-mb", mb])
            .args(extra.split_whitespace())
            .env("CDC_LOG_LEVEL", "info")
            .output()
            .unwrap();
        let secs = started.elapsed().as_secs_f64();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        for l in stderr.lines().filter(|l| l.contains("verify:")) {
            println!("  {l}");
        }
        let rss = std::fs::read_to_string(&time).unwrap();
        println!(
            "memory_mb={mb} rss_kb={} secs={secs:.1} spilled={}",
            rss.trim(),
            stderr.contains("verify: spilled to")
        );
    }
    drop_slot(pg, &db).await;
}
