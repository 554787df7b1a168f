//! The Redis sink driven directly with constructed changes, against real Redis servers
//! (and Valkey, when `tests/fetch-valkey.sh` provided a binary): what a view holds after
//! upserts (JSON, hash), TTLs, invalidation, deletes, replays of older versions,
//! truncates, a change Redis refuses, an outage, passwords, transactions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_harness::{start_valkey, RedisOptions, RedisServer};
use cdc_schemas::metrics::Metrics;
use cdc_sinks::change::{TxEnd, TxInfo};
use cdc_sinks::redis::config::parse_url;
use cdc_sinks::redis::conn::{Cmd, Conn, Reply};
use cdc_sinks::redis::RedisSink;
use cdc_sinks::{Change, Op, Sink, SinkSpec};
use serde_json::{json, Value};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A sink named `name` with the target keys `extra` (TOML lines).
async fn sink(url: &str, name: &str, extra: &str) -> RedisSink {
    let text = format!("name = \"{name}\"\ntype = \"redis\"\nurl = \"{url}\"\n{extra}");
    let table: toml::Table = toml::from_str(&text).unwrap();
    let spec = SinkSpec::from_table(&table, "app", 0).unwrap();
    RedisSink::connect(&spec, &Metrics::default())
        .await
        .unwrap()
}

async fn client(url: &str) -> Conn {
    Conn::connect(&parse_url(url).unwrap(), Duration::from_secs(10))
        .await
        .unwrap()
}

async fn cmd(c: &mut Conn, args: &[&str]) -> Reply {
    let mut cmd = Cmd::new(args[0]);
    for a in &args[1..] {
        cmd.arg(a.as_bytes());
    }
    c.call(cmd).await.unwrap()
}

async fn get(c: &mut Conn, key: &str) -> Option<Value> {
    match cmd(c, &["GET", key]).await {
        Reply::Bulk(Some(b)) => Some(serde_json::from_slice(&b).unwrap()),
        Reply::Bulk(None) => None,
        other => panic!("GET {key}: {other:?}"),
    }
}

async fn get_raw(c: &mut Conn, key: &str) -> Option<String> {
    cmd(c, &["GET", key])
        .await
        .as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

async fn hgetall(c: &mut Conn, key: &str) -> Vec<(String, String)> {
    let Reply::Array(Some(items)) = cmd(c, &["HGETALL", key]).await else {
        panic!("HGETALL {key}")
    };
    let mut out: Vec<(String, String)> = items
        .chunks(2)
        .map(|p| {
            let s = |r: &Reply| String::from_utf8(r.as_bytes().unwrap().to_vec()).unwrap();
            (s(&p[0]), s(&p[1]))
        })
        .collect();
    out.sort();
    out
}

/// The sorted strings of an array reply (`SMEMBERS`, `KEYS`).
async fn sorted(c: &mut Conn, args: &[&str]) -> Vec<String> {
    let Reply::Array(Some(items)) = cmd(c, args).await else {
        panic!("{args:?}")
    };
    let mut out: Vec<String> = items
        .iter()
        .map(|r| String::from_utf8(r.as_bytes().unwrap().to_vec()).unwrap())
        .collect();
    out.sort();
    out
}

async fn smembers(c: &mut Conn, key: &str) -> Vec<String> {
    sorted(c, &["SMEMBERS", key]).await
}

async fn keys(c: &mut Conn, pattern: &str) -> Vec<String> {
    sorted(c, &["KEYS", pattern]).await
}

fn change(table: &str, op: Op, offset: u64, id: i64, after: Option<Value>) -> Change {
    Change {
        topic: format!("app.public.{table}").into(),
        partition: 0,
        offset,
        timestamp_ms: 0,
        op,
        schema: "public".into(),
        table: table.into(),
        key: json!({ "id": id }).as_object().unwrap().clone(),
        after: after.and_then(|a| a.as_object().cloned()),
        source_ts_ms: None,
        tx: None,
        after_json: None,
        truncate_copies: 0,
        tx_end: None,
    }
}

fn up(table: &str, offset: u64, id: i64, v: Value) -> Change {
    change(table, Op::Update, offset, id, Some(v))
}

fn del(table: &str, offset: u64, id: i64) -> Change {
    change(table, Op::Delete, offset, id, None)
}

fn truncate(table: &str, offset: u64) -> Change {
    let mut c = change(table, Op::Truncate, offset, 0, None);
    c.key.clear();
    c
}

fn in_tx(mut c: Change, id: &str, n: u64) -> Change {
    c.tx = Some(TxInfo {
        id: id.into(),
        total_order: n,
        data_collection_order: n,
    });
    c
}

fn end(id: &str, offset: u64, counts: &[(&str, u64)]) -> Change {
    let mut c = change("", Op::TxEnd, offset, 0, None);
    c.topic = "app.transaction".into();
    c.key.clear();
    c.tx_end = Some(TxEnd {
        id: id.into(),
        event_count: counts.iter().map(|(_, n)| n).sum(),
        data_collections: counts.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
    });
    c
}

/// Delivers `changes` as the driver does: each call gets what is not yet delivered (the
/// changes the sink left in flight at the front), until all of it is.
async fn deliver_all(s: &mut RedisSink, changes: &[Change]) -> Vec<(usize, String)> {
    let mut at = 0;
    let mut rejected = Vec::new();
    loop {
        let d = s.deliver(&changes[at..]).await.unwrap();
        rejected.extend(d.rejected.into_iter().map(|(i, e)| (at + i, e)));
        at += d.upto;
        if at == changes.len() && d.in_flight == 0 {
            return rejected;
        }
        assert!(d.upto > 0 || d.in_flight > 0, "no progress at {at}");
    }
}

// ------------------------------------------------------------------------------------
// The scenarios, each against a server URL (Redis and Valkey run the same ones).

async fn json_upserts_and_replays(url: &str) {
    let mut s = sink(url, "j", "prefix = \"j\"").await;
    let mut c = client(url).await;
    let batch = vec![
        up("t", 0, 1, json!({"id": 1, "v": "a"})),
        up("t", 1, 2, json!({"id": 2, "v": "b"})),
        up("t", 2, 1, json!({"id": 1, "v": "a2", "n": null})),
    ];
    assert!(deliver_all(&mut s, &batch).await.is_empty());
    assert_eq!(
        get(&mut c, "j:t:1").await,
        Some(json!({"id": 1, "v": "a2", "n": null}))
    );
    assert_eq!(get(&mut c, "j:t:2").await, Some(json!({"id": 2, "v": "b"})));
    // Replays (one old change alone, then the whole batch again) change nothing.
    deliver_all(&mut s, &batch[..1]).await;
    deliver_all(&mut s, &batch).await;
    assert_eq!(
        get(&mut c, "j:t:1").await,
        Some(json!({"id": 1, "v": "a2", "n": null}))
    );
    // The partition's offset (the last version taken) and the table's rows.
    assert_eq!(
        hgetall(&mut c, "j:__cdc:o:app.public.t").await,
        vec![("0".into(), "3".into())]
    );
    assert_eq!(
        smembers(&mut c, "j:__cdc:k:public.t").await,
        ["j:t:1", "j:t:2"]
    );
    // After a delete, a replayed older insert does not bring the row back.
    deliver_all(&mut s, &[del("t", 3, 1)]).await;
    assert_eq!(get(&mut c, "j:t:1").await, None);
    deliver_all(&mut s, &batch).await;
    assert_eq!(get(&mut c, "j:t:1").await, None);
    assert_eq!(
        hgetall(&mut c, "j:__cdc:o:app.public.t").await,
        vec![("0".into(), "4".into())]
    );
    assert_eq!(smembers(&mut c, "j:__cdc:k:public.t").await, ["j:t:2"]);
    assert_eq!(keys(&mut c, "j:t:*").await, vec!["j:t:2".to_string()]);
}

async fn hashes_and_ttl(url: &str) {
    let mut s = sink(
        url,
        "h",
        "prefix = \"h\"\nvalue = \"hash\"\nttl_ms = 600000",
    )
    .await;
    let mut c = client(url).await;
    deliver_all(
        &mut s,
        &[up(
            "t",
            0,
            7,
            json!({"id": 7, "name": "x y", "n": 1.5, "ok": true, "gone": null, "tags": ["a"]}),
        )],
    )
    .await;
    assert_eq!(
        hgetall(&mut c, "h:t:7").await,
        vec![
            ("id".into(), "7".into()),
            ("n".into(), "1.5".into()),
            ("name".into(), "x y".into()),
            ("ok".into(), "true".into()),
            ("tags".into(), "[\"a\"]".into()),
        ]
    );
    // An update that nulls a column removes its field.
    deliver_all(&mut s, &[up("t", 1, 7, json!({"id": 7, "name": null}))]).await;
    assert_eq!(
        hgetall(&mut c, "h:t:7").await,
        vec![("id".into(), "7".into())]
    );
    let Reply::Int(ttl) = cmd(&mut c, &["PTTL", "h:t:7"]).await else {
        panic!()
    };
    assert!(ttl > 500_000 && ttl <= 600_000, "PTTL {ttl}");
    let mut sj = sink(url, "hj", "prefix = \"hj\"\nttl_ms = 300000").await;
    deliver_all(&mut sj, &[up("t", 0, 1, json!({"id": 1}))]).await;
    let Reply::Int(ttl) = cmd(&mut c, &["PTTL", "hj:t:1"]).await else {
        panic!()
    };
    assert!(ttl > 200_000 && ttl <= 300_000, "PTTL {ttl}");
}

async fn invalidates(url: &str) {
    let mut s = sink(url, "i", "prefix = \"i\"\nmode = \"invalidate\"").await;
    let mut c = client(url).await;
    // The application cached rows its own way (another type even).
    cmd(&mut c, &["SET", "i:t:1", "cached"]).await;
    cmd(&mut c, &["HSET", "i:t:2", "f", "v"]).await;
    deliver_all(&mut s, &[up("t", 0, 1, json!({"id": 1})), del("t", 1, 2)]).await;
    assert_eq!(keys(&mut c, "i:t:*").await, Vec::<String>::new());
    // The application fills the cache again; a replayed change leaves it.
    cmd(&mut c, &["SET", "i:t:1", "cached again"]).await;
    deliver_all(&mut s, &[up("t", 0, 1, json!({"id": 1}))]).await;
    assert_eq!(keys(&mut c, "i:t:*").await, vec!["i:t:1".to_string()]);
}

async fn truncates(url: &str) {
    let mut s = sink(url, "tr", "prefix = \"tr\"").await;
    let mut c = client(url).await;
    // More rows than one HSCAN chunk, and rows of another table.
    let rows: Vec<Change> = (0..2500)
        .map(|i| up("t", i as u64, i, json!({"id": i})))
        .collect();
    deliver_all(&mut s, &rows).await;
    deliver_all(&mut s, &[up("other", 0, 1, json!({"id": 1}))]).await;
    // In one batch: the truncate, then a row after it.
    deliver_all(
        &mut s,
        &[
            truncate("t", 2500),
            up("t", 2501, 5, json!({"id": 5, "new": true})),
        ],
    )
    .await;
    assert_eq!(keys(&mut c, "tr:t:*").await, vec!["tr:t:5".to_string()]);
    assert_eq!(
        get(&mut c, "tr:t:5").await,
        Some(json!({"id": 5, "new": true}))
    );
    assert_eq!(
        keys(&mut c, "tr:other:*").await,
        vec!["tr:other:1".to_string()]
    );
    // Replaying everything before the truncate (and the truncate) changes nothing.
    deliver_all(&mut s, &rows).await;
    deliver_all(&mut s, &[del("t", 7, 5), truncate("t", 2500)]).await;
    assert_eq!(keys(&mut c, "tr:t:*").await, vec!["tr:t:5".to_string()]);
    assert_eq!(
        hgetall(&mut c, "tr:__cdc:o:app.public.t").await,
        vec![("0".into(), "2502".into())]
    );
    assert_eq!(smembers(&mut c, "tr:__cdc:k:public.t").await, ["tr:t:5"]);
    // Nothing is left of the sweep.
    assert_eq!(
        keys(&mut c, "tr:__cdc:*").await,
        [
            "tr:__cdc:k:public.other",
            "tr:__cdc:k:public.t",
            "tr:__cdc:o:app.public.other",
            "tr:__cdc:o:app.public.t"
        ]
    );
    // A truncate later in the same batch as rows written before it, and the table's next
    // truncate: only what came before each goes.
    deliver_all(
        &mut s,
        &[
            up("t", 2502, 6, json!({"id": 6})),
            truncate("t", 2503),
            up("t", 2504, 7, json!({"id": 7})),
            truncate("other", 1),
        ],
    )
    .await;
    assert_eq!(keys(&mut c, "tr:t:*").await, vec!["tr:t:7".to_string()]);
    assert_eq!(keys(&mut c, "tr:other:*").await, Vec::<String>::new());
    // A truncate that comes while rows before it are in flight: they take effect, then
    // the truncate clears them with the rest.
    let before: Vec<Change> = (0..10)
        .map(|i| up("t", 2505 + i as u64, 100 + i, json!({"id": 100 + i})))
        .collect();
    let d = s.deliver(&before).await.unwrap();
    assert_eq!((d.upto, d.in_flight), (0, before.len()), "left in flight");
    let mut next = before.clone();
    next.push(truncate("t", 2515));
    next.push(up("t", 2516, 8, json!({"id": 8})));
    deliver_all(&mut s, &next).await;
    assert_eq!(keys(&mut c, "tr:t:*").await, vec!["tr:t:8".to_string()]);
    assert_eq!(smembers(&mut c, "tr:__cdc:k:public.t").await, ["tr:t:8"]);
}

async fn refuses_a_key_of_another_type(url: &str) {
    let mut s = sink(url, "w", "prefix = \"w\"").await;
    let mut c = client(url).await;
    cmd(&mut c, &["RPUSH", "w:t:2", "someone else's"]).await;
    let rejected = deliver_all(
        &mut s,
        &[
            up("t", 0, 1, json!({"id": 1})),
            up("t", 1, 2, json!({"id": 2})),
            up("t", 2, 3, json!({"id": 3})),
        ],
    )
    .await;
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].0, 1);
    assert!(rejected[0].1.contains("WRONGTYPE"), "{}", rejected[0].1);
    assert_eq!(get(&mut c, "w:t:1").await, Some(json!({"id": 1})));
    assert_eq!(get(&mut c, "w:t:3").await, Some(json!({"id": 3})));
    let Reply::Int(n) = cmd(&mut c, &["LLEN", "w:t:2"]).await else {
        panic!()
    };
    assert_eq!(n, 1, "the list is untouched");
    // A refusal in a chunk left in flight is reported by the call that reads its EXEC, at
    // the change's index in that call's batch (after a delivered prefix).
    let a = up("t", 3, 1, json!({"id": 1, "n": 2}));
    let b = up("t", 4, 2, json!({"id": 2, "n": 2}));
    let d = s.deliver(std::slice::from_ref(&a)).await.unwrap();
    assert_eq!((d.upto, d.in_flight), (0, 1));
    let d = s.deliver(&[a, b.clone()]).await.unwrap();
    assert_eq!((d.upto, d.in_flight, d.rejected.len()), (1, 1, 0));
    let d = s.deliver(&[b]).await.unwrap();
    assert_eq!((d.upto, d.in_flight), (1, 0));
    assert_eq!(d.rejected.len(), 1, "{:?}", d.rejected);
    assert_eq!(d.rejected[0].0, 0);
    assert!(d.rejected[0].1.contains("WRONGTYPE"), "{}", d.rejected[0].1);
    assert_eq!(get(&mut c, "w:t:1").await, Some(json!({"id": 1, "n": 2})));
    // The same for a hash sink finding a string.
    let mut sh = sink(url, "wh", "prefix = \"wh\"\nvalue = \"hash\"").await;
    cmd(&mut c, &["SET", "wh:t:1", "plain"]).await;
    for c in [up("t", 0, 1, json!({"id": 1})), del("t", 1, 1)] {
        let rejected = deliver_all(&mut sh, &[c]).await;
        assert_eq!(rejected.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0]);
    }
    assert_eq!(get_raw(&mut c, "wh:t:1").await.as_deref(), Some("plain"));
}

/// The guard and the stored offsets: a key of another type is refused whether the change
/// is an update, a delete or an insert; an offset that another writer moved on wins over
/// the older change the sink holds; a sweep cut short (a crash between a truncate's EXEC
/// and the end of its sweep) is finished on the next connection, before anything else,
/// and keeps the rows written after the truncate.
async fn guards_and_offsets(url: &str) {
    let mut s = sink(url, "f", "prefix = \"f\"").await;
    let mut c = client(url).await;
    assert!(deliver_all(&mut s, &[up("t", 0, 1, json!({"id": 1}))])
        .await
        .is_empty());
    cmd(&mut c, &["RPUSH", "f:t:2", "someone else's"]).await;
    cmd(&mut c, &["HSET", "f:t:3", "a", "b"]).await;
    cmd(&mut c, &["SADD", "f:t:5", "x"]).await;
    let rejected = deliver_all(
        &mut s,
        &[
            up("t", 1, 2, json!({"id": 2})),
            del("t", 2, 3),
            up("t", 3, 4, json!({"id": 4})),
            change("t", Op::Create, 4, 5, Some(json!({"id": 5}))),
        ],
    )
    .await;
    assert_eq!(
        rejected.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![0, 1, 3]
    );
    assert!(
        rejected.iter().all(|r| r.1.contains("WRONGTYPE")),
        "{rejected:?}"
    );
    assert_eq!(get(&mut c, "f:t:4").await, Some(json!({"id": 4})));
    let Reply::Status(ty) = cmd(&mut c, &["TYPE", "f:t:3"]).await else {
        panic!()
    };
    assert_eq!(ty, "hash", "the hash is untouched");
    // Refused keys do not join the rows.
    assert_eq!(
        smembers(&mut c, "f:__cdc:k:public.t").await,
        ["f:t:1", "f:t:4"]
    );
    // Another writer moved the table's partition on: the older change the sink holds is
    // stale.
    cmd(&mut c, &["HSET", "f:__cdc:o:app.public.t", "0", "50"]).await;
    deliver_all(&mut s, &[up("t", 10, 1, json!({"id": 1, "older": true}))]).await;
    assert_eq!(get(&mut c, "f:t:1").await, Some(json!({"id": 1})));
    // A sweep cut short: table `s`'s rows 1 and 2 were set aside by a truncate, row 3 was
    // written after it.
    for k in ["f:s:1", "f:s:2", "f:s:3"] {
        cmd(&mut c, &["SET", k, "{}"]).await;
    }
    cmd(
        &mut c,
        &["SADD", "f:__cdc:t:public.s", "f:s:1", "f:s:2", "f:s:3"],
    )
    .await;
    cmd(&mut c, &["SADD", "f:__cdc:k:public.s", "f:s:3"]).await;
    cmd(&mut c, &["SADD", "f:__cdc:sweeps", "public.s"]).await;
    let mut fresh = sink(url, "f2", "prefix = \"f\"").await;
    deliver_all(&mut fresh, &[up("t", 60, 6, json!({"id": 6}))]).await;
    assert_eq!(keys(&mut c, "f:s:*").await, ["f:s:3"]);
    assert_eq!(keys(&mut c, "f:__cdc:t:*").await, Vec::<String>::new());
    assert_eq!(
        smembers(&mut c, "f:__cdc:sweeps").await,
        Vec::<String>::new()
    );
    assert_eq!(get(&mut c, "f:t:6").await, Some(json!({"id": 6})));
}

/// A reader polling two keys of one transaction never sees one updated without the
/// other, while the transaction's changes reach the sink in two deliveries (as they do
/// when the driver's polls split them).
async fn transactions_are_atomic(url: &str, transactional: bool) -> bool {
    let extra = format!("prefix = \"x{transactional}\"\ntransactional = {transactional}");
    let mut s = sink(url, &format!("x{transactional}"), &extra).await;
    let (ka, kb) = (
        format!("x{transactional}:a:1"),
        format!("x{transactional}:b:1"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let torn = Arc::new(AtomicBool::new(false));
    let reader = {
        let (url, stop, torn) = (url.to_string(), stop.clone(), torn.clone());
        let (ka, kb) = (ka.clone(), kb.clone());
        tokio::spawn(async move {
            let mut c = client(&url).await;
            while !stop.load(Ordering::Relaxed) {
                let Reply::Array(Some(v)) = cmd(&mut c, &["MGET", &ka, &kb]).await else {
                    panic!()
                };
                let n = |r: &Reply| {
                    r.as_bytes()
                        .map(|b| serde_json::from_slice::<Value>(b).unwrap()["n"].clone())
                };
                if n(&v[0]) != n(&v[1]) {
                    torn.store(true, Ordering::Relaxed);
                }
            }
        })
    };
    for n in 0..40u64 {
        let offset = n;
        let id = format!("tx{n}");
        let a = in_tx(up("a", offset, 1, json!({"id": 1, "n": n})), &id, 1);
        let b = in_tx(up("b", offset, 1, json!({"id": 1, "n": n})), &id, 2);
        let e = end(&id, n, &[("public.a", 1), ("public.b", 1)]);
        let d = s.deliver(std::slice::from_ref(&a)).await.unwrap();
        if transactional {
            assert_eq!(d.upto, 0, "half a transaction is not applied");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let pending: Vec<Change> = if d.upto == 1 {
            vec![b, e]
        } else {
            vec![a, b, e]
        };
        deliver_all(&mut s, &pending).await;
    }
    stop.store(true, Ordering::Relaxed);
    reader.await.unwrap();
    !torn.load(Ordering::Relaxed)
}

async fn transactions_without_ends_go_after_the_wait(url: &str) {
    let mut s = sink(url, "nw", "prefix = \"nw\"\ntransactional = true").await;
    s.set_tx_wait(Duration::from_millis(300));
    let c = in_tx(up("a", 0, 1, json!({"id": 1})), "t1", 1);
    let started = Instant::now();
    loop {
        let d = s.deliver(std::slice::from_ref(&c)).await.unwrap();
        if d.upto == 1 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
    // From now on (no END ever seen), transactions go at once.
    let c2 = in_tx(up("a", 1, 1, json!({"id": 1})), "t2", 1);
    deliver_all(&mut s, &[c2]).await;
    // must_progress: a transaction bigger than the driver may hold goes anyway.
    let mut s = sink(url, "mp", "prefix = \"mp\"\ntransactional = true").await;
    let c = in_tx(up("a", 0, 1, json!({"id": 1})), "t1", 1);
    assert_eq!(
        s.deliver(&[end("t0", 0, &[]), c.clone()])
            .await
            .unwrap()
            .upto,
        1
    );
    s.must_progress();
    let d = s.deliver(std::slice::from_ref(&c)).await.unwrap();
    assert_eq!(d.upto + d.in_flight, 1, "forced");
    deliver_all(&mut s, &[c]).await;
}

/// Another client keeps writing the offsets hash (a field the sink does not use) while
/// batches go in, each call leaving a chunk in flight: EXECs find the hash changed, in
/// flight and in step, and each such chunk is planned again. The view ends as the last
/// change of each key left it, with the offset of the last change.
async fn offsets_hash_written_while_chunks_are_in_flight(url: &str) {
    let text =
        format!("name = \"inflight\"\ntype = \"redis\"\nurl = \"{url}\"\nprefix = \"inflight\"");
    let spec = SinkSpec::from_table(&toml::from_str(&text).unwrap(), "app", 0).unwrap();
    let metrics = Metrics::default();
    let mut s = RedisSink::connect(&spec, &metrics).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let stop = stop.clone();
        let mut c = client(url).await;
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                cmd(
                    &mut c,
                    &[
                        "HSET",
                        "inflight:__cdc:o:app.public.t",
                        "99",
                        &n.to_string(),
                    ],
                )
                .await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    // As the driver does: what is not delivered (in flight included) is passed again,
    // followed by the next batch; a failure (too many conflicts in a row) is retried.
    let mut pending: Vec<Change> = Vec::new();
    let mut offset = 0;
    for round in 0..300u64 {
        for id in 1..=10 {
            pending.push(up("t", offset, id, json!({"id": id, "round": round})));
            offset += 1;
        }
        if let Ok(d) = s.deliver(&pending).await {
            assert!(d.rejected.is_empty(), "{:?}", d.rejected);
            pending.drain(..d.upto);
        }
    }
    while !pending.is_empty() {
        if let Ok(d) = s.deliver(&pending).await {
            pending.drain(..d.upto);
        }
    }
    stop.store(true, Ordering::Relaxed);
    hammer.await.unwrap();
    let mut c = client(url).await;
    for id in 1..=10 {
        assert_eq!(
            get(&mut c, &format!("inflight:t:{id}")).await,
            Some(json!({"id": id, "round": 299}))
        );
    }
    let o = hgetall(&mut c, "inflight:__cdc:o:app.public.t").await;
    assert_eq!(o[0], ("0".to_string(), offset.to_string()), "{o:?}");
    let mut m = String::new();
    metrics.render(&mut m);
    let conflicts: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("cdc_redis_watch_conflicts_total{sink=\"inflight\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(conflicts > 0, "the other writer never met an EXEC: {m}");
}

// ------------------------------------------------------------------------------------

#[test]
fn redis_views() {
    let r = RedisServer::start().unwrap();
    let url = r.url();
    rt().block_on(async {
        json_upserts_and_replays(&url).await;
        hashes_and_ttl(&url).await;
        invalidates(&url).await;
        truncates(&url).await;
        refuses_a_key_of_another_type(&url).await;
        guards_and_offsets(&url).await;
        offsets_hash_written_while_chunks_are_in_flight(&url).await;
    });
}

#[test]
fn redis_transactions() {
    let r = RedisServer::start().unwrap();
    let url = r.url();
    rt().block_on(async {
        assert!(
            transactions_are_atomic(&url, true).await,
            "a reader saw half a transaction"
        );
        // The test can tell: without `transactional` the reader does see half of one.
        assert!(!transactions_are_atomic(&url, false).await);
        transactions_without_ends_go_after_the_wait(&url).await;
    });
}

#[test]
fn valkey_views_and_transactions() {
    let Some(v) = start_valkey(RedisOptions::default()).unwrap() else {
        return;
    };
    let url = v.url();
    rt().block_on(async {
        json_upserts_and_replays(&url).await;
        hashes_and_ttl(&url).await;
        invalidates(&url).await;
        truncates(&url).await;
        refuses_a_key_of_another_type(&url).await;
        guards_and_offsets(&url).await;
        assert!(transactions_are_atomic(&url, true).await);
    });
}

#[test]
fn redis_outage_is_transient_and_passwords_and_databases_work() {
    let dir = tempfile_dir();
    let pw_file = dir.join("pw");
    std::fs::write(&pw_file, "s3cret\n").unwrap();
    let r = RedisServer::start_with(RedisOptions {
        appendonly: true,
        password: Some("s3cret".into()),
        ..RedisOptions::default()
    })
    .unwrap();
    let url = format!("redis://127.0.0.1:{}/3", r.port());
    rt().block_on(async {
        let extra = format!("password_file = \"{}\"", pw_file.display());
        let mut s = sink(&url, "p", &extra).await;
        deliver_all(&mut s, &[up("t", 0, 1, json!({"id": 1}))]).await;
        let mut c = client(&format!("redis://:s3cret@127.0.0.1:{}/3", r.port())).await;
        assert_eq!(get(&mut c, "app:t:1").await, Some(json!({"id": 1})));
        // A wrong password is definite.
        let table: toml::Table = toml::from_str(&format!(
            "name = \"bad\"\ntype = \"redis\"\nurl = \"{url}\"\npassword = \"nope\""
        ))
        .unwrap();
        let spec = SinkSpec::from_table(&table, "app", 0).unwrap();
        let e = RedisSink::connect(&spec, &Metrics::default())
            .await
            .err()
            .expect("refused");
        assert!(!e.is_transient(), "{e}");
        assert!(
            !e.to_string().contains("nope"),
            "the password is not in {e}"
        );
        // Redis stopped: transient; back (with its data, from the AOF): delivering again.
        r.stop_for_now().unwrap();
        let e = s
            .deliver(&[up("t", 1, 1, json!({"id": 1, "v": 2}))])
            .await
            .unwrap_err();
        assert!(e.is_transient(), "{e}");
        r.start_again().unwrap();
        deliver_all(&mut s, &[up("t", 1, 1, json!({"id": 1, "v": 2}))]).await;
        let mut c = client(&format!("redis://:s3cret@127.0.0.1:{}/3", r.port())).await;
        assert_eq!(get(&mut c, "app:t:1").await, Some(json!({"id": 1, "v": 2})));
    });
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cdc-redis-sink-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
