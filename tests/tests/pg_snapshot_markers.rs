//! Debezium's snapshot markers (`source.snapshot` of `op = r` records) with parallel
//! chunked readers: `first` on the very first snapshot record, `last` on the very last,
//! `first_in_data_collection` / `last_in_data_collection` on each table's first / last
//! record, `true` on all others (precedence `last` > `first` > `last_in_data_collection` >
//! `first_in_data_collection`), for 1 and 4 snapshot connections; plus the progress figures
//! the connector logs and exports.

mod pg_source_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cdc_harness::{passwords, PgServer};
use cdc_log::{Log, StartAt};
use pg_source_util::*;
use serde_json::Value as Json;

/// One `op = r` record: its marker and the log's append timestamp.
#[derive(Debug)]
struct Read {
    marker: String,
    ts: i64,
}

/// Every record of `topic` (one partition) in offset order.
fn reads(log_dir: &Path, topic: &str) -> Vec<Read> {
    let log = Log::open_read_only(log_dir).unwrap();
    if !log.topics().iter().any(|t| t == topic) {
        return Vec::new();
    }
    assert_eq!(log.describe(topic).unwrap().partitions.len(), 1);
    let mut r = log.reader(topic, 0, StartAt::Earliest).unwrap();
    let mut out = Vec::new();
    loop {
        let batch = r.poll(4 << 20).unwrap();
        if batch.is_empty() {
            break;
        }
        for rec in batch {
            let v: Json = serde_json::from_slice(rec.value.as_deref().unwrap()).unwrap();
            assert_eq!(v["op"], "r", "{v}");
            out.push(Read {
                marker: v["source"]["snapshot"].as_str().unwrap().to_string(),
                ts: rec.timestamp,
            });
        }
    }
    out
}

/// `text` without terminal colour sequences (`ESC [ … m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut it = text.chars();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            for c in it.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Tables (name, rows): several chunks each for the big ones, a one-row and an empty one.
const TABLES: &[(&str, i64)] = &[("big", 6000), ("one", 1), ("empty", 0), ("mid", 2500)];

async fn setup(pg: &PgServer) -> String {
    let mut sql = String::from("SET ROLE cdc;");
    for (t, n) in TABLES {
        sql.push_str(&format!(
            "CREATE TABLE {t} (id int PRIMARY KEY, pad text);
             INSERT INTO {t} SELECT g, repeat('p', 200) FROM generate_series(1, {n}) g;
             ANALYZE {t};"
        ));
    }
    database_with(pg, &sql).await
}

/// Runs an `initial_only` snapshot into a one-partition log and checks the markers.
async fn markers_with(connections: usize) {
    let pg = PgServer::shared();
    let db = setup(pg).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?sslmode=disable", pg.url("cdc", passwords::PG_CDC, &db));
    let tables = TABLES
        .iter()
        .map(|(t, _)| format!("\"public.{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut c = connector(pg, &db, dir.path(), &[], "");
    // Our own config: one partition (so a topic's offsets are the send order), small
    // chunks and batches (so tables interleave across readers).
    std::fs::write(
        &c.config,
        format!(
            "name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"{url}\"\ntables = [{tables}]\nslot = \"{db}\"\nmax_batch_events = 100\n\n[snapshot]\nmode = \"initial_only\"\nconnections = {connections}\nchunk_pages = 8\n\n[log]\ndir = \"{}\"\npartitions = 1\n\n[admin]\nlisten = \"127.0.0.1:0\"\n",
            c.log_dir().display()
        ),
    )
    .unwrap();
    c.start();
    let code = c
        .wait_exit(Duration::from_secs(120), "snapshot did not finish")
        .await;
    assert_eq!(code, Some(0), "{}", c.output());

    let mut per_table: BTreeMap<&str, Vec<Read>> = BTreeMap::new();
    for (t, n) in TABLES {
        let r = reads(&c.log_dir(), &format!("t.public.{t}"));
        assert_eq!(r.len() as i64, *n, "{t}: records");
        per_table.insert(t, r);
    }
    let all: Vec<(&str, usize, &Read)> = per_table
        .iter()
        .flat_map(|(t, rs)| rs.iter().enumerate().map(move |(i, r)| (*t, i, r)))
        .collect();
    let firsts: Vec<_> = all.iter().filter(|(_, _, r)| r.marker == "first").collect();
    let lasts: Vec<_> = all.iter().filter(|(_, _, r)| r.marker == "last").collect();
    assert_eq!(firsts.len(), 1, "exactly one `first`: {firsts:?}");
    assert_eq!(lasts.len(), 1, "exactly one `last`: {lasts:?}");
    let (ft, fi, fr) = firsts[0];
    let (lt, li, lr) = lasts[0];
    // `first` opens its table, `last` closes its table, and across tables they are the
    // earliest / latest appended.
    assert_eq!(*fi, 0, "`first` is the first record of {ft}");
    assert_eq!(
        *li,
        per_table[lt].len() - 1,
        "`last` is the last record of {lt}"
    );
    assert!(all.iter().all(|(_, _, r)| r.ts >= fr.ts && r.ts <= lr.ts));

    for (t, rs) in &per_table {
        let n = rs.len();
        for (i, r) in rs.iter().enumerate() {
            let global = (r.marker == "first" && i == 0) || (r.marker == "last" && i == n - 1);
            let want = if global {
                r.marker.as_str()
            } else if i == n - 1 {
                // Also the single-row table's only record (last_in wins over first_in).
                "last_in_data_collection"
            } else if i == 0 {
                "first_in_data_collection"
            } else {
                "true"
            };
            assert_eq!(r.marker, want, "{t} record {i} of {n}");
        }
    }
    // The progress figures: the final log line and the estimate from reltuples.
    let log = strip_ansi(&std::fs::read_to_string(c.dir.join("connector.log")).unwrap());
    assert!(
        log.contains("snapshot started") && log.contains("\"estimated_rows\":8501"),
        "{log}"
    );
    assert!(log.contains("snapshot read every table"), "{log}");
    assert!(log.contains("\"rows\":8501"), "{log}");
    // initial_only leaves no slot behind: nobody would read it, and it would retain WAL.
    let slots = slot_count(pg, &db).await;
    assert_eq!(slots, 0, "initial_only left its slot behind\n{log}");
    // A second run finds the snapshot complete and exits 0 without creating a slot.
    c.start();
    let code = c
        .wait_exit(Duration::from_secs(60), "second run did not end")
        .await;
    assert_eq!(code, Some(0), "{}", c.output());
    let slots = slot_count(pg, &db).await;
    assert_eq!(slots, 0, "the second initial_only run created a slot");
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_markers_1_connection() {
    markers_with(1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_markers_4_connections() {
    markers_with(4).await;
}
