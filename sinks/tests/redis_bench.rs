//! Throughput of the Redis sink against `redis-cli --pipe` of the equivalent SET
//! commands, for 1M changes (the target: at least half of `redis-cli --pipe`'s rate).
//! Ignored by default (it takes a while and wants a quiet machine):
//!
//! ```text
//! cargo test --release -p cdc-sinks --test redis_bench -- --ignored --nocapture
//! ```
//!
//! `CDC_BENCH_CHANGES` changes the count; `CDC_BENCH_TRANSACTIONAL=1` measures a
//! transactional sink (transactions of 5 changes, each with its END).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cdc_harness::RedisServer;
use cdc_schemas::metrics::Metrics;
use cdc_sinks::change::{TxEnd, TxInfo};
use cdc_sinks::redis::RedisSink;
use cdc_sinks::{Change, Op, Sink, SinkSpec};
use serde_json::json;

fn changes(n: u64, transactional: bool) -> Vec<Change> {
    let mut out = Vec::with_capacity(n as usize * 6 / 5);
    for i in 0..n {
        let after =
            json!({"id": i, "name": format!("customer {i}"), "total": i * 3, "active": true});
        out.push(Change {
            topic: "app.public.t".into(),
            partition: 0,
            offset: i,
            timestamp_ms: 0,
            op: Op::Create,
            schema: "public".into(),
            table: "t".into(),
            key: json!({ "id": i }).as_object().unwrap().clone(),
            after: after.as_object().cloned(),
            source_ts_ms: None,
            tx: transactional.then(|| TxInfo {
                id: format!("tx{}", i / 5).into(),
                total_order: i % 5 + 1,
                data_collection_order: i % 5 + 1,
            }),
            after_json: None,
            truncate_copies: 0,
            tx_end: None,
        });
        if transactional && i % 5 == 4 {
            let mut e = out.last().unwrap().clone();
            e.op = Op::TxEnd;
            e.topic = "app.transaction".into();
            e.offset = i / 5;
            e.after = None;
            e.tx = None;
            e.tx_end = Some(TxEnd {
                id: format!("tx{}", i / 5).into(),
                event_count: 5,
                data_collections: vec![("public.t".into(), 5)],
            });
            out.push(e);
        }
    }
    out
}

fn redis_cli_pipe(port: u16, n: u64) -> Duration {
    let mut input = Vec::new();
    for i in 0..n {
        let k = format!("app:t:{i}");
        let v = json!({"id": i, "name": format!("customer {i}"), "total": i * 3, "active": true})
            .to_string();
        write!(
            input,
            "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
            k.len(),
            v.len()
        )
        .unwrap();
    }
    let started = Instant::now();
    let mut child = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("errors: 0"), "{text}");
    took
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn redis_sink_vs_redis_cli_pipe() {
    let n: u64 = std::env::var("CDC_BENCH_CHANGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let transactional = std::env::var_os("CDC_BENCH_TRANSACTIONAL").is_some();
    let pipe = redis_cli_pipe(RedisServer::start().unwrap().port(), n);
    let r = RedisServer::start().unwrap();
    let batch = changes(n, transactional);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let took = rt.block_on(async {
        let text = format!(
            "name = \"b\"\ntype = \"redis\"\nurl = \"{}\"\ntransactional = {transactional}",
            r.url()
        );
        let spec = SinkSpec::from_table(&toml::from_str(&text).unwrap(), "app", 0).unwrap();
        let mut s = RedisSink::connect(&spec, &Metrics::default())
            .await
            .unwrap();
        let started = Instant::now();
        // As the driver hands them over: about 1 MiB of records at a time.
        let mut at = 0;
        // (The changes the sink left in flight are at the front of the next call.)
        loop {
            let end = (at + 8000).min(batch.len());
            let d = s.deliver(&batch[at..end]).await.unwrap();
            assert!((d.upto > 0 || d.in_flight > 0) && d.rejected.is_empty());
            at += d.upto;
            if at == batch.len() && d.in_flight == 0 {
                break;
            }
        }
        let took = started.elapsed();
        let out = Command::new("redis-cli")
            .args(["-p", &r.port().to_string(), "INFO", "commandstats"])
            .output()
            .unwrap();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if l.starts_with("cmdstat") {
                println!("{l}");
            }
        }
        took
    });
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "{n} changes: redis-cli --pipe {:.2}s ({:.0}/s); sink{} {:.2}s ({:.0}/s); ratio {:.2}",
        pipe.as_secs_f64(),
        rate(pipe),
        if transactional {
            " (transactional)"
        } else {
            ""
        },
        took.as_secs_f64(),
        rate(took),
        rate(took) / rate(pipe)
    );
}
