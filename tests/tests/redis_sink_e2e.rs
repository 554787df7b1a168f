//! The Redis sink end to end: Postgres → `cdc run` (with two `[[sink]]`s: a JSON cache
//! and a transactional hash view) → Redis. After a mixed workload (inserts, updates,
//! deletes, a key change, a truncate, an ALTER TABLE ADD COLUMN), with `cdc run`
//! SIGKILLed several times mid-workload and Redis stopped for a while, each view equals
//! the table (every key and value read from Redis directly, and no other key); a group
//! reset to the earliest offset replays everything and changes nothing; a row whose key
//! holds another type in Redis is refused into the dead-letter topic and the rest goes on.

mod pg_source_util;
mod redis_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cdc_harness::golden::read_log;
use cdc_harness::{passwords, PgServer, RedisOptions, RedisServer};
use pg_source_util::*;
use redis_util::{Redis, R};
use serde_json::Value as Json;

// ---------------------------------------------------------------------------------------

/// The table as id → row (JSON of its columns).
async fn rows(pg: &PgServer, db: &str) -> BTreeMap<i64, Json> {
    table_rows(pg, db, "items")
        .await
        .into_values()
        .map(|r| (r["id"].as_i64().unwrap(), r))
        .collect()
}

/// The hash view (`h:items:<id>` hashes) as id → {column: text}.
fn hash_view(r: &mut Redis) -> BTreeMap<i64, BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for k in r.keys("h:items:*") {
        let id: i64 = k.rsplit(':').next().unwrap().parse().unwrap();
        let f: BTreeMap<String, String> = r
            .cmd(&["HGETALL", &k])
            .items()
            .chunks(2)
            .map(|p| (p[0].text(), p[1].text()))
            .collect();
        // Empty: deleted by the sink between KEYS and HGETALL.
        if !f.is_empty() {
            m.insert(id, f);
        }
    }
    m
}

/// A row as the hash sink stores it: non-null columns, strings raw, the rest as JSON.
fn as_hash(row: &Json) -> BTreeMap<String, String> {
    row.as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| {
            let t = match v {
                Json::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), t)
        })
        .collect()
}

/// A row without its NULL columns.
fn non_null(mut row: Json) -> Json {
    if let Some(o) = row.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    row
}

/// Waits until both views equal the table (the JSON one except the refused `foreign`
/// id, whose key keeps its list).
async fn wait_views(
    pg: &PgServer,
    db: &str,
    redis: &RedisServer,
    c: &mut Connector,
    foreign: Option<i64>,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        c.assert_running();
        let want = rows(pg, db).await;
        // Redis may be down for a while in the workload: an empty view then.
        let (json, hash) = std::panic::catch_unwind(|| {
            let mut r0 = Redis::connect(redis.port(), 0);
            let mut r1 = Redis::connect(redis.port(), 1);
            (r0.json_view("t:items:*"), hash_view(&mut r1))
        })
        .unwrap_or_default();
        // A row last written before the ADD COLUMN has no `note` in its JSON: absent
        // reads as NULL, so NULL columns are compared as absent.
        let json: BTreeMap<i64, Json> = json.into_iter().map(|(k, v)| (k, non_null(v))).collect();
        let mut want_json: BTreeMap<i64, Json> = want
            .iter()
            .map(|(k, v)| (*k, non_null(v.clone())))
            .collect();
        // The other application's key stays as it is, whatever happens to its row
        // (a truncate sweeps only the keys the sink wrote).
        if let Some(f) = foreign {
            want_json.insert(f, Json::String("<not a string>".into()));
        }
        let want_hash: BTreeMap<i64, BTreeMap<String, String>> =
            want.iter().map(|(k, v)| (*k, as_hash(v))).collect();
        if json == want_json && hash == want_hash {
            return;
        }
        if Instant::now() > deadline {
            let diff = |a: &BTreeMap<i64, Json>, b: &BTreeMap<i64, Json>| -> Vec<String> {
                a.keys()
                    .chain(b.keys())
                    .filter(|k| a.get(k) != b.get(k))
                    .take(5)
                    .map(|k| format!("{k}: view {:?} table {:?}", a.get(k), b.get(k)))
                    .collect()
            };
            panic!(
                "views differ from the table: json {:?}; hash rows {} vs {}\n{}",
                diff(&json, &want_json),
                hash.len(),
                want_hash.len(),
                c.output()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn cdc(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cdc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stops `c`, resets both sinks' groups (and the transactional one's transaction topic)
/// to the earliest offsets, starts it again and waits until both have caught up: both
/// views are then byte for byte what they were. `expect_behind`: also check that the
/// reset left the cache's group behind (it is, unless the log is empty).
fn reset_and_replay_changes_nothing(c: &mut Connector, redis: &RedisServer, expect_behind: bool) {
    let before0 = Redis::connect(redis.port(), 0).dump_views();
    let before1 = Redis::connect(redis.port(), 1).dump_views();
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let cfg = c.config.clone();
    let cfg_s = cfg.to_str().unwrap();
    for (group, topic) in [
        ("cdc-sink-cache", "t.public.items"),
        ("cdc-sink-view", "t.public.items"),
        ("cdc-sink-view", "t.transaction"),
    ] {
        cdc(&[
            "log",
            "--config",
            cfg_s,
            "reset-group",
            group,
            topic,
            "--to-earliest",
        ]);
    }
    if expect_behind {
        assert!(!caught_up(&cfg, "cdc-sink-cache"));
    }
    c.start();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !(caught_up(&cfg, "cdc-sink-cache") && caught_up(&cfg, "cdc-sink-view")) {
        assert!(
            Instant::now() < deadline,
            "replay did not finish\n{}",
            c.output()
        );
        c.assert_running();
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        Redis::connect(redis.port(), 0).dump_views(),
        before0,
        "JSON view after the replay"
    );
    assert_eq!(
        Redis::connect(redis.port(), 1).dump_views(),
        before1,
        "hash view after the replay"
    );
}

/// Whether every partition of `group` is caught up (lag 0) and it has any.
fn caught_up(config: &Path, group: &str) -> bool {
    let out = cdc(&["log", "--config", config.to_str().unwrap(), "groups"]);
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.split('\t').next() == Some(group))
        .collect();
    // GROUP TOPIC PARTITION COMMITTED HIGH-WATERMARK LAG PROTECT
    !lines.is_empty() && lines.iter().all(|l| l.split('\t').nth(5) == Some("0"))
}

async fn workload(pg: &PgServer, db: &str, from: i64, n: i64) {
    let c = pg.superuser_client(db).await.unwrap();
    for i in from..from + n {
        // Several statements per transaction, over several rows.
        c.batch_execute(&format!(
            "BEGIN;
             INSERT INTO items (id, name, qty) VALUES ({i}, 'item {i}', {i});
             UPDATE items SET qty = qty + 1 WHERE id = {} ;
             DELETE FROM items WHERE id = {};
             COMMIT;",
            i - 3,
            i - 7
        ))
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_views_equal_the_table_through_crashes_outages_truncates_and_replays() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE items (id int PRIMARY KEY, name text, qty int);
         INSERT INTO items SELECT g, 'seed ' || g, g FROM generate_series(1, 200) g;",
    )
    .await;
    // Persistence on, so that a Redis restart keeps the views (the sinks' durability is
    // Redis's own).
    let redis = RedisServer::start_with(RedisOptions {
        appendonly: true,
        ..RedisOptions::default()
    })
    .unwrap();
    // A key of the JSON view that already holds another type: its row is refused.
    let foreign = 150i64;
    Redis::connect(redis.port(), 0).cmd(&["RPUSH", "t:items:150", "not the sink's"]);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?sslmode=disable", pg.url("cdc", passwords::PG_CDC, &db));
    let text = format!(
        r#"name = "t"

[source]
type = "postgres"
url = "{url}"
tables = ["public.items"]
slot = "{db}"
heartbeat_interval_ms = 1000

[format]
provide_transaction_metadata = true

[log]
dir = "{log}"

[admin]
listen = "127.0.0.1:0"

[[sink]]
name = "cache"
type = "redis"
url = "redis://127.0.0.1:{port}/0"

[[sink]]
name = "view"
type = "valkey"
url = "redis://127.0.0.1:{port}/1"
prefix = "h"
value = "hash"
transactional = true
"#,
        log = dir.path().join("log").display(),
        port = redis.port()
    );
    let mut c = Connector::with_config(dir.path(), &text);
    c.start();
    // The sinks pick up the topics as they appear; a SIGKILL once the first transaction
    // records are in.
    c.wait_records("t.public.items", 200, Duration::from_secs(60))
        .await;
    workload(pg, &db, 1000, 5).await;
    c.wait_records("t.transaction", 1, Duration::from_secs(60))
        .await;
    c.kill();
    c.start();
    wait_views(pg, &db, &redis, &mut c, Some(foreign)).await;

    // SIGKILL mid-workload, several times.
    let mut next = 2000;
    for _ in 0..3 {
        let w = {
            let db = db.clone();
            tokio::spawn(async move { workload(PgServer::shared(), &db, next, 40).await })
        };
        tokio::time::sleep(Duration::from_millis(700)).await;
        c.kill();
        c.start();
        w.await.unwrap();
        next += 1000;
    }
    // The foreign key's row changes once more after the last kill: its dead letter is
    // checked below. (One made just before a kill is written by the replay: checked at
    // the group reset.)
    // A key change, a truncate, rows after it, a new column.
    pg.execute(
        &db,
        "UPDATE items SET qty = qty + 1 WHERE id = 150;
         UPDATE items SET id = id + 100000 WHERE id = 10;
         TRUNCATE items;
         INSERT INTO items SELECT g, 'after ' || g, g FROM generate_series(1, 100) g;
         ALTER TABLE items ADD COLUMN note text;
         UPDATE items SET note = 'n' || id WHERE id % 3 = 0;",
    )
    .await
    .unwrap();
    workload(pg, &db, 3000, 10).await;
    wait_views(pg, &db, &redis, &mut c, Some(foreign)).await;

    // Redis stopped while the source keeps streaming; started again: the lag drains.
    redis.stop_for_now().unwrap();
    workload(pg, &db, 4000, 30).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.start_again().unwrap();
    wait_views(pg, &db, &redis, &mut c, Some(foreign)).await;

    // The refused row is in the dead-letter topic, with Redis's reason.
    let dlq = read_log(&dir.path().join("log/sinks/cache"), "dlq.t.cache");
    assert!(
        dlq.iter().any(|r| r
            .headers
            .iter()
            .any(|(k, v)| k == "__connect.errors.exception.message" && v.contains("WRONGTYPE"))),
        "no WRONGTYPE dead letter in {:?}",
        dlq.iter().map(|r| &r.headers).collect::<Vec<_>>()
    );
    assert_eq!(
        Redis::connect(redis.port(), 0).cmd(&["TYPE", "t:items:150"]),
        R::Str(b"list".to_vec()),
        "the foreign key is left alone"
    );

    // A refusal whose dead letter a crash lost (its record is left in the refused hash,
    // as a SIGKILL between the EXEC and the dead letter's write leaves it): the replay
    // refuses that change again, so its dead letter is written after all.
    Redis::connect(redis.port(), 0).cmd(&[
        "HSET",
        "t:__cdc:refused",
        "t.public.items/0/1",
        "refused before a crash",
    ]);
    // A group reset to the earliest offset replays everything: nothing changes.
    reset_and_replay_changes_nothing(&mut c, &redis, true);
    let dlq = read_log(&dir.path().join("log/sinks/cache"), "dlq.t.cache");
    assert!(
        dlq.iter().any(|r| r.headers.iter().any(|(k, v)| k
            == "__connect.errors.exception.message"
            && v == "refused before a crash")
            && r.headers
                .iter()
                .any(|(k, v)| k == "__connect.errors.offset" && v == "0")),
        "the replay did not refuse offset 0 again: {:?}",
        dlq.iter().map(|r| &r.headers).collect::<Vec<_>>()
    );
    wait_views(pg, &db, &redis, &mut c, Some(foreign)).await;
    c.stop();
    drop_slot(pg, &db).await;
}

/// With `[log] partitions = 3` a row's key is in its partition's rows set, each partition
/// has its own stored offset, and a truncate is in every partition (each at its place in commit order): rows committed
/// before the truncate are gone from both views, rows committed after it stay, whichever
/// partition the sink reads first; a replay from the earliest offsets changes nothing, and
/// `cdc verify --sink` reads every partition's rows set.
#[tokio::test(flavor = "multi_thread")]
async fn truncates_clear_every_partition_of_a_multi_partition_topic() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE items (id int PRIMARY KEY, name text, qty int);
         INSERT INTO items SELECT g, 'seed ' || g, g FROM generate_series(1, 300) g;",
    )
    .await;
    let redis = RedisServer::start_with(RedisOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?sslmode=disable", pg.url("cdc", passwords::PG_CDC, &db));
    let text = format!(
        r#"name = "t"

[source]
type = "postgres"
url = "{url}"
tables = ["public.items"]
slot = "{db}"

[format]
provide_transaction_metadata = true

[log]
dir = "{log}"
partitions = 3

[admin]
listen = "127.0.0.1:0"

[[sink]]
name = "cache"
type = "redis"
url = "redis://127.0.0.1:{port}/0"

[[sink]]
name = "view"
type = "redis"
url = "redis://127.0.0.1:{port}/1"
prefix = "h"
value = "hash"
transactional = true
"#,
        log = dir.path().join("log").display(),
        port = redis.port()
    );
    let mut c = Connector::with_config(dir.path(), &text);
    c.start();
    c.wait_records("t.public.items", 300, Duration::from_secs(60))
        .await;
    wait_views(pg, &db, &redis, &mut c, None).await;
    // Stopped, so that the truncate and the rows around it reach the sinks in one go
    // (a partition's rows after the truncate may be read before another partition's
    // rows before it).
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let cfg = c.config.clone();
    let cfg_s = cfg.to_str().unwrap().to_string();
    workload(pg, &db, 1000, 20).await;
    pg.execute(
        &db,
        "UPDATE items SET qty = qty + 1 WHERE id % 5 = 0;
         BEGIN;
         INSERT INTO items SELECT g, 'before ' || g, g FROM generate_series(2001, 2030) g;
         TRUNCATE items;
         INSERT INTO items SELECT g, 'after ' || g, g FROM generate_series(1, 40) g;
         COMMIT;
         UPDATE items SET qty = -qty WHERE id % 2 = 0;",
    )
    .await
    .unwrap();
    workload(pg, &db, 3000, 20).await;
    // The sinks read the log alone (the records are there once `cdc run` streamed them).
    c.start();
    wait_views(pg, &db, &redis, &mut c, None).await;
    let out = cdc(&[
        "verify",
        "--config",
        &cfg_s,
        "--table",
        "public.items",
        "--sink",
        "cache",
    ]);
    assert!(out.contains("equal"), "{out}");
    let out = cdc(&[
        "verify",
        "--config",
        &cfg_s,
        "--table",
        "public.items",
        "--sink",
        "view",
    ]);
    assert!(out.contains("equal"), "{out}");
    // Three partitions, three rows sets for each sink.
    let mut r0 = Redis::connect(redis.port(), 0);
    let mut sets = r0.keys("t:__cdc:k:*");
    sets.sort();
    assert_eq!(
        sets,
        [
            "t:__cdc:k:public.items",
            "t:__cdc:k:public.items#1",
            "t:__cdc:k:public.items#2"
        ]
    );

    // A replay from the earliest offsets: nothing changes.
    reset_and_replay_changes_nothing(&mut c, &redis, false);
    c.stop();
    drop_slot(pg, &db).await;
}
